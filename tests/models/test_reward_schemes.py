"""The reward schemes share one interface and are built through one registry."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch

from models.aggregation import LdpReward, LocalRewards, RewardScheme, SensitivityAware
from models.aggregation.registry import REWARD_SCHEMES, make_scheme
from models.config import LOCAL_SCHEMES, MECHANISMS, SCHEMES, TrainConfig
from models.critics import Moments
from udfs.errors import ConfigError, InvalidParameterError


def _configs():
    for scheme in SCHEMES:
        for mechanism in MECHANISMS:
            try:
                yield TrainConfig(scheme=scheme, mechanism=mechanism)
            except ConfigError:  # a pair the config refuses (local schemes are Laplace only)
                continue


def test_registry_names_are_the_configs():
    assert tuple(REWARD_SCHEMES) == SCHEMES
    built = {(c.scheme, c.mechanism) for c in _configs()}
    assert built == {(s, m) for s, ms in REWARD_SCHEMES.items() for m in ms}


@pytest.mark.parametrize("cfg", list(_configs()), ids=lambda c: f"{c.scheme}-{c.mechanism}")
def test_every_scheme_has_the_one_release_signature(cfg):
    scheme = make_scheme(cfg)
    assert isinstance(scheme, RewardScheme)
    assert scheme.local == (cfg.scheme in LOCAL_SCHEMES)
    params = list(inspect.signature(scheme.release).parameters)
    assert params[1:] == ["gen", "spend", "prior", "normaliser"]


@pytest.mark.parametrize("cfg", list(_configs()), ids=lambda c: f"{c.scheme}-{c.mechanism}")
def test_every_scheme_releases_through_the_same_call(cfg):
    scheme = make_scheme(cfg)
    b, rewards = 6, torch.rand(4, 6, generator=torch.Generator().manual_seed(0)).double()
    data = (LocalRewards(rewards, torch.arange(4), 4) if scheme.local else
            Moments(rewards.sum(0), (rewards ** 2).sum(0), 4))
    spent = []
    rel = scheme.release(data, gen=torch.Generator().manual_seed(1), spend=spent.append,
                         prior=None)
    assert rel.rewards.shape == (b,) and spent and rel.epsilon_spent > 0


def test_laplace_schemes_refuse_a_public_normaliser():
    mom = Moments(torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), 2)
    for cfg in _configs():
        scheme = make_scheme(cfg)
        if cfg.mechanism == "laplace" and not scheme.local:
            with pytest.raises(InvalidParameterError, match="normaliser"):
                scheme.release(mom, gen=torch.Generator(), spend=lambda e: None, normaliser=1.5)


def test_default_pilot_agrees_with_the_config():
    assert SensitivityAware(0.1).pilot == LdpReward(0.1).pilot == TrainConfig().pilot


def test_trainer_dispatches_on_the_interface_not_the_class():
    source = (Path(__file__).resolve().parents[2] / "models" / "train.py").read_text()
    assert "isinstance(self.scheme" not in source and "LdpReward" not in source

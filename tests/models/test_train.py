from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from models.checkpoint import Checkpointing
from models.config import TrainConfig
from models.env import MobilityEnv
from models.starts import HierarchicalStarts, kd_levels, start_mass
from models.synthesis import synthesize
from models.train import fit
from tests.models._toy import toy_data
from udfs.errors import BudgetExceededError, ConfigError

TINY = TrainConfig(rounds=4, episodes_per_round=8, k_nearest=10, critic_hidden=8,
                   critic_batch=16, critic_steps=2, policy_hidden=16, loc_dim=4, slot_dim=4,
                   ppo_epochs=2, ppo_minibatch=128, noise=0.5, beta=0.5, participation=0.8,
                   spectral_norm=True, seed=7)


def _same(a, b):
    def strip(h):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in h]

    assert strip(a.history) == strip(b.history)
    for k in a.policy_state:
        assert torch.equal(a.policy_state[k], b.policy_state[k]), k
    assert a.accountant == b.accountant


def test_stop_and_resume_equals_uninterrupted(tmp_path):
    data = toy_data()
    whole = fit(TINY, data)
    part = fit(TINY, data, checkpoint=Checkpointing(tmp_path), stop_after=2)
    assert part.rounds_done == 2
    resumed = fit(TINY, data, checkpoint=Checkpointing(tmp_path, resume=True))
    assert resumed.rounds_done == 4
    _same(whole, resumed)
    assert not [p for p in tmp_path.iterdir() if p.name != "latest.pt"]  # no temp leftovers


def test_resume_with_another_config_refuses(tmp_path):
    data = toy_data()
    fit(TINY, data, checkpoint=Checkpointing(tmp_path), stop_after=1)
    with pytest.raises(ConfigError, match=r"\['noise'\] differ"):
        fit(dataclasses.replace(TINY, noise=0.9), data,
            checkpoint=Checkpointing(tmp_path, resume=True))


@pytest.mark.parametrize("scheme,kind", [("pategail", "bce"), ("ldp", "wgan"),
                                         ("ldp++", "wgan")])
def test_other_schemes_run_and_account(scheme, kind, caplog):
    cfg = dataclasses.replace(TINY, scheme=scheme, critic_kind=kind, rounds=2)
    with caplog.at_level(logging.INFO, logger="models.train"):
        res = fit(cfg, toy_data())
    assert res.rounds_done == 2 and "round 2/2" in caplog.text
    eps = [h["epsilon"] for h in res.history]
    assert 0 < eps[0] < eps[1] == res.accountant["epsilon"]


def test_training_stops_before_the_target_epsilon():
    cfg = dataclasses.replace(TINY, rounds=50, target_epsilon=400.0, accountant="pld")
    res = fit(cfg, toy_data())
    assert res.stopped_reason is not None and "above the target" in res.stopped_reason
    assert 0 < res.rounds_done < 50
    assert res.accountant["epsilon"] <= 400.0


def test_budget_too_small_for_the_start_histogram():
    with pytest.raises(BudgetExceededError, match="start distribution costs 1 "):
        fit(dataclasses.replace(TINY, target_epsilon=0.5), toy_data())


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="'participation'"):
        TrainConfig(participation=0)
    with pytest.raises(ConfigError, match="'scheme'"):
        TrainConfig(scheme="pate")
    with pytest.raises(ConfigError, match="unknown train config field"):
        TrainConfig.from_dict({"nosie": 0.1})


def test_synthesis_shapes_ids_and_seed():
    data = toy_data()
    res = fit(dataclasses.replace(TINY, rounds=1), data)
    env = MobilityEnv(data.coords, TINY.k_nearest)
    a = synthesize(res.policy(), env, res.start_probs, 37, torch.Generator().manual_seed(0),
                   batch=16)
    b = synthesize(res.policy(), env, res.start_probs, 37, torch.Generator().manual_seed(0),
                   batch=16)
    assert a.shape == (37, 48) and a.dtype == np.int64
    assert a.min() >= 0 and a.max() < env.n_locations
    assert np.array_equal(a, b)
    assert set(a[:, 0]) <= set(torch.nonzero(res.start_probs).flatten().tolist())


def test_dp_start_distribution_spends_one_event_per_level_and_finds_the_mode():
    days = [np.full((3, 48), 5)] * 40 + [np.full((2, 48), 9)]
    spent = []
    levels = kd_levels(np.random.default_rng(0).random((50, 2)))
    mech = HierarchicalStarts(2.0, len(levels))
    p = mech.release(start_mass(days, 50), levels, gen=torch.Generator().manual_seed(0),
                     spend=spent.append)
    assert len(spent) == 1 and spent[0].count == len(levels)
    assert spent[0].event.noise_multiplier == len(levels) / 2.0
    assert p.sum().item() == pytest.approx(1.0) and int(p.argmax()) == 5

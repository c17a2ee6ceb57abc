"""The budget of a residual PateGAIL++ run (models/pretrain.py, markov_share_unit "rho"): the
release's share in the accountant's natural unit, and the release and the rounds composed in
one accountant whose ledger equals the plan and dp_accounting's own composition."""

from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting.rdp import RdpAccountant

from models.budget import noise_for_epsilon, pairs_per_round, planned_epsilon
from models.config import TrainConfig
from models.pretrain import gaussian_multiplier, markov_epsilon, markov_plan
from models.train import fit
from tests.models._toy import tiny_config, toy_data
from udfs.errors import ConfigError

DELTA = 1e-5


def _rdp(event) -> float:
    acc = RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(DELTA))


def _cfg(**kw) -> TrainConfig:
    return tiny_config(**{"scheme": "pategail", "mechanism": "gaussian", "beta": 0.0,
                          "participation": 1.0, "pretrain": "markov", "target_epsilon": 6.0,
                          "destination": "residual", "markov_share_unit": "rho",
                          "markov_share": 0.9, **kw})


@pytest.mark.parametrize("share", [0.5, 0.9])
def test_a_rho_share_gives_the_release_the_multiplier_s_over_root_share(share):
    """S spends the target alone (dp_accounting's RDP); the release's composed Gaussians equal
    one of multiplier S / sqrt(share) up to the calibration's grid (< 1%): 0.9 costs ~5%."""
    data = toy_data(n_users=6)
    cfg = _cfg(markov_share=share)
    s = gaussian_multiplier(cfg.target_epsilon, DELTA, "rdp")
    # the project's accountant records multipliers rounded down (larger epsilon): exact <= target
    assert cfg.target_epsilon * 0.97 <= _rdp(dpa.GaussianDpEvent(s)) <= cfg.target_epsilon
    plan = markov_plan(cfg, data.coords)
    assert plan.scale / s == pytest.approx(1 / math.sqrt(share), rel=1e-2)
    inv = sum(1 / m ** 2 for m in plan.multipliers().values())  # natural unit: adds exactly
    assert inv == pytest.approx(1 / plan.scale ** 2, rel=1e-9)
    assert _rdp(plan.events()) <= markov_epsilon(cfg) * (1 + 1e-9)


def test_release_and_rounds_compose_in_one_accountant_and_the_ledger_is_the_plan():
    data = toy_data(n_users=6)
    base = _cfg()
    noise = noise_for_epsilon(base, data.n_users, data.coords, base.rounds, base.target_epsilon)
    cfg = TrainConfig(**{**base.to_dict(), "noise": noise,
                         "target_epsilon": base.target_epsilon * (1 + 1e-9)})
    res = fit(cfg, data)
    assert res.rounds_done == cfg.rounds
    spent = res.accountant["epsilon"]
    assert spent == pytest.approx(planned_epsilon(cfg, data.n_users, data.coords, cfg.rounds),
                                  rel=1e-9)  # the ledger equals the plan
    assert spent <= cfg.target_epsilon
    round_m = noise * data.n_users / math.sqrt(pairs_per_round(cfg))
    exact = dpa.ComposedDpEvent([markov_plan(cfg, data.coords).events(),
                                 dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(round_m),
                                                         cfg.rounds)])
    # the project's accountant rounds multipliers down to its grid (toward larger epsilon)
    assert _rdp(exact) <= spent <= _rdp(exact) * 1.03
    # the rounds took what the release left: together about the whole target
    assert spent == pytest.approx(cfg.target_epsilon, rel=0.03)
    assert res.accountant["releases"] == len(markov_plan(cfg, data.coords).multipliers()) + 3


def test_rho_needs_gaussian_noise_and_residual_needs_the_release():
    with pytest.raises(ConfigError, match="markov_share_unit"):
        TrainConfig(pretrain="markov", target_epsilon=4.0, markov_share_unit="rho",
                    markov_mechanism="laplace")
    with pytest.raises(ConfigError, match="set pretrain='markov'"):
        TrainConfig(destination="residual")
    with pytest.raises(ConfigError, match="residual_actions"):
        TrainConfig(residual_actions=False)  # there is no action residual to freeze

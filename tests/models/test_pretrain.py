"""Private pre-training on the DP Markov release (models/pretrain.py, TrainConfig.pretrain):
its accounting against dp_accounting, behaviour cloning against the Markov model's own
statistics, the plan, and resume."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant

from models.budget import pairs_per_round, planned_epsilon
from models.checkpoint import Checkpointing
from models.config import TrainConfig
from models.markov import fit_markov
from models.policy import PolicyNet
from models.pretrain import behaviour_clone, dest_prior, markov_plan
from models.synthesis import synthesize
from models.train import env_of, fit
from tests.models._toy import tiny_config, toy_data
from udfs.errors import BudgetExceededError, ConfigError
from udfs.mobility import jsd_metrics

DELTA = 1e-5


def _cfg(**kw) -> TrainConfig:
    """A pre-trained uniform Gaussian run: its plan is its exact cost (models/budget.py)."""
    return tiny_config(**{"scheme": "pategail", "mechanism": "gaussian", "beta": 0.0,
                          "participation": 1.0, "pretrain": "markov", "markov_share": 0.5,
                          "target_epsilon": 6.0, "noise": 8.0, "bc_epochs": 1,
                          "bc_days": 64, **kw})


def _rdp(event) -> float:
    acc = RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(DELTA))


def _grid(m: float) -> float:
    """The accountant's record of a multiplier: rounded down to 2^(k/64)."""
    return 2.0 ** (math.floor(math.log2(m) * 64) / 64)


@pytest.mark.parametrize("field,value,words", [
    ("pretrain", "hmm", "must be one of"),
    ("markov_share", 1.0, "must lie in (0, 1)"),
    ("markov_share", 0.0, "must lie in (0, 1)"),
    ("bc_days", 0, "must be >= 1"),
    ("bc_epochs", -1, "must be >= 0"),
    ("markov_mechanism", "exp", "must be one of"),
    ("markov_cell_depth", 0, "must lie in [1, 16]"),
    ("markov_dest_weight", 1.5, "must lie in [0, 1]"),
])
def test_config_names_the_bad_pretrain_field(field, value, words):
    with pytest.raises(ConfigError, match=rf"'{field}'.*{words}".replace("(", r"\(")
                       .replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        TrainConfig(**{"target_epsilon": 5.0, field: value})


def test_pretrain_needs_a_target_and_a_central_scheme():
    with pytest.raises(ConfigError, match="set target_epsilon"):
        TrainConfig(pretrain="markov")
    with pytest.raises(ConfigError, match="local schemes cannot pre-train"):
        TrainConfig(pretrain="markov", scheme="ldp", target_epsilon=5.0)


def test_one_accountant_composes_the_markov_release_and_the_rounds_as_dp_accounting_does():
    data = toy_data(n_users=6)
    cfg = _cfg()
    res = fit(cfg, data)
    assert res.rounds_done == cfg.rounds and res.stopped_reason is None
    plan = markov_plan(cfg, data.coords)
    # the Markov release alone costs at most its share
    assert _rdp(plan.events()) <= cfg.markov_share * cfg.target_epsilon
    round_m = cfg.noise * data.n_users / math.sqrt(pairs_per_round(cfg))
    exact = dpa.ComposedDpEvent([plan.events(),
                                 dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(round_m), 3)])
    recorded = dpa.ComposedDpEvent(
        [dpa.GaussianDpEvent(_grid(m)) for m in plan.multipliers().values()]
        + [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(_grid(round_m)), 3)])
    spent = res.accountant["epsilon"]
    assert spent == pytest.approx(_rdp(recorded), rel=1e-12)  # the ledger is that composition
    assert _rdp(exact) <= spent <= _rdp(exact) * 1.03  # grid: multipliers < 1.1% low
    # no separate start release: the Markov release and the rounds are all that was charged
    assert res.accountant["releases"] == len(plan.multipliers()) + 3


def test_the_pre_trained_run_spends_its_plan_and_never_passes_the_target():
    data = toy_data(n_users=6)
    for target in (6.0, 3.0):
        cfg = _cfg(target_epsilon=target, rounds=50)
        res = fit(cfg, data)
        spent = res.accountant["epsilon"]
        assert spent <= target
        assert spent == pytest.approx(planned_epsilon(cfg, data.n_users, data.coords,
                                                      res.rounds_done), rel=1e-9)
        # it stopped because one more round would pass the target: the plan says so too
        assert planned_epsilon(cfg, data.n_users, data.coords, res.rounds_done + 1) > target
        assert res.stopped_reason is not None and res.rounds_done >= 1


def test_a_markov_share_that_leaves_no_round_is_refused_before_any_release():
    data = toy_data(n_users=6)
    with pytest.raises(BudgetExceededError, match="DP Markov release.*markov_share"):
        fit(_cfg(markov_share=0.95, target_epsilon=1.0, noise=0.01), data)


def test_a_resumed_run_does_not_pay_for_the_markov_release_twice(tmp_path):
    data = toy_data(n_users=6)
    cfg = _cfg()
    whole = fit(cfg, data)
    fit(cfg, data, checkpoint=Checkpointing(tmp_path), stop_after=1)
    resumed = fit(cfg, data, checkpoint=Checkpointing(tmp_path, resume=True))
    assert resumed.rounds_done == whole.rounds_done == 3
    assert resumed.accountant == whole.accountant  # one Markov release, three rounds
    assert resumed.accountant_state == whole.accountant_state
    assert [h["reward_mean"] for h in resumed.history] == pytest.approx(
        [h["reward_mean"] for h in whole.history], rel=1e-6)
    for k, v in whole.dest_prior.items():  # the same released tables, restored, not redrawn
        np.testing.assert_array_equal(resumed.dest_prior[k], v)


def _six(days_ref: np.ndarray, days: np.ndarray, coords: np.ndarray) -> float:
    return sum(jsd_metrics(days_ref, days, coords, "geo").values())


def test_behaviour_cloning_reaches_the_markov_models_own_statistics():
    data = toy_data(n_users=20, n_loc=80, days=6, seed=3)
    model = fit_markov(data.days_per_user, data.coords, 50.0, DELTA, 0)
    # every location a candidate (a Markov move may go anywhere on the map), drawn from the
    # release's destination distribution alone (weight 1): the Markov model's own dynamics
    cfg = tiny_config(pretrain="markov", target_epsilon=50.0, k_nearest=79)
    env = env_of(data.coords, cfg, dest_prior(model, 1.0).to_dict())
    ref = model.sample(1500, np.random.default_rng(1))
    start = torch.as_tensor(model.start_probs)
    torch.manual_seed(0)
    policy = PolicyNet(env.n_locations, 8, 4, 32)
    before = _six(ref, synthesize(policy, env, start, 1000, torch.Generator().manual_seed(2)),
                  data.coords)
    losses = behaviour_clone(policy, env, model.sample(600, np.random.default_rng(3)), 8, 256,
                             3e-3, torch.Generator().manual_seed(4))
    after = _six(ref, synthesize(policy, env, start, 1000, torch.Generator().manual_seed(2)),
                 data.coords)
    assert losses[-1] < losses[0]
    # the Markov model's own sampling noise: a second sample of it against the first
    floor = _six(ref, model.sample(1000, np.random.default_rng(5)), data.coords)
    assert after < before / 4, (before, after, floor)
    assert after < floor + 0.25 * (before - floor), (before, after, floor)


def test_the_destination_prior_tilts_explore_draws_toward_the_released_destinations():
    data = toy_data(n_users=20, n_loc=80, days=6, seed=3)
    model = fit_markov(data.days_per_user, data.coords, 50.0, DELTA, 0)
    prior = dest_prior(model, 0.99)
    cfg = dataclasses.replace(tiny_config(), k_nearest=20)
    public, tilted = env_of(data.coords, cfg), env_of(data.coords, cfg, prior.to_dict())
    # rows: the public weights times a factor of mean 1 that follows the release
    f = (tilted.explore_w / public.explore_w).double()
    assert torch.allclose(f.mean(1), torch.ones(f.shape[0], dtype=torch.float64), atol=1e-5)
    q = (model.cell_trans[model.cell_of[:, None], model.cell_of[public.nearest.numpy()]]
         * model.within[public.nearest.numpy()])
    rows = np.flatnonzero(q.std(1) > 0)
    assert len(rows) > len(q) // 4
    # within a row the factor grows linearly with the candidate's released probability
    corr = [np.corrcoef(f.numpy()[r], q[r])[0, 1] for r in rows]
    assert min(corr) > 0.999
    # weight 0: the public distribution unchanged
    flat = env_of(data.coords, cfg, dest_prior(model, 0.0).to_dict())
    assert torch.allclose(flat.explore_w, public.explore_w)

"""Issue 15: training publishes nothing unnoised, LDP is local, budgets that cannot pay a round
fail, `pategail` is the paper's, the DP starts keep mass where days start, the pilot carries
signal. Each test failed on the code before the issue (noted per test)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from models.aggregation import SensitivityAware
from models.aggregation.pilot import N_KEYS, HistoryPilot
from models.config import TrainConfig
from models.critics import Moments
from models.starts import HierarchicalStarts, kd_levels, start_jsd, start_mass
from models.train import ROUND_PUBLIC, LocalComm, fit
from tests.models._toy import tiny_config, toy_data
from udfs.errors import BudgetExceededError


def test_round_records_and_info_logs_hold_no_unnoised_figure(caplog):
    """Before: every record had `reward_raw_mean` (exact mean critic reward) and `critic_loss`
    at top level, and the INFO line printed "(raw 0.5029)"."""
    with caplog.at_level(logging.INFO, logger="models.train"):
        res = fit(tiny_config(rounds=2), toy_data())
    for rec in res.history:
        assert set(rec) == {*ROUND_PUBLIC, "trusted"}
        raw = rec["trusted"]["reward_raw_mean"]
        assert 0 < raw < 1 and rec["trusted"]["critic_loss"] is not None
        for text in (f"{raw:.4f}", f"{raw:.3f}", repr(raw)):
            assert text not in caplog.text
    assert "raw" not in caplog.text and "critic" not in caplog.text


class SpyComm(LocalComm):
    """One process that records every tensor handed to an all-reduce."""

    def __init__(self):
        self.reduced: list[torch.Tensor] = []

    def all_reduce_sum(self, t):
        self.reduced.append(t.detach().clone())
        return t


@pytest.mark.parametrize("scheme", ["ldp", "ldp++"])
def test_ldp_never_sums_unperturbed_rewards_or_starts(scheme, monkeypatch):
    """Before: the ranks all-reduced the users' exact reward sums (for `reward_raw_mean`) and
    the exact start histogram in LDP mode."""
    import models.train as train_mod
    import models.train_round as round_mod  # where the round scores the rewards

    scored: list[torch.Tensor] = []
    real_rewards = round_mod.critic_rewards

    def spy_rewards(*args, **kwargs):
        out = real_rewards(*args, **kwargs)
        scored.append(out.detach().cpu().double())
        return out

    monkeypatch.setattr(round_mod, "critic_rewards", spy_rewards)
    data = toy_data()
    cfg = tiny_config(scheme=scheme, rounds=2, participation=1.0)
    assert cfg.privacy_model == "local"
    comm = SpyComm()
    run = train_mod._Run(cfg, data, comm)
    run.setup_start_histogram()
    for _ in range(2):
        run.history.append(run.one_round())
        run.round += 1
    assert scored, "the spy must see the round's scoring"
    exact = [r.sum(0) for r in scored] + [start_mass(data.days_per_user, len(data.coords))]
    for t in comm.reduced:
        for e in exact:
            if t.numel() >= e.numel():
                assert not torch.allclose(t.reshape(-1)[:e.numel()].double(), e, atol=1e-9)
    assert all(rec["trusted"].get("reward_raw_mean") is None for rec in run.history)
    assert all(rec["epsilon_batch"] > 0 for rec in run.history)


def test_a_budget_that_cannot_pay_one_round_fails_naming_the_costs():
    """Before: the start histogram fit, the first release was refused, and `fit` returned 0
    rounds with an untrained policy and no error (conf/geolife.yaml did exactly this)."""
    data = toy_data()
    cfg = tiny_config(target_epsilon=3.0)  # pays the start distribution (1), not one round
    with pytest.raises(BudgetExceededError, match=r"target_epsilon=3 cannot pay one round") as e:
        fit(cfg, data)
    msg = str(e.value)
    assert "start distribution costs 1 " in msg and "raise target_epsilon to at least" in msg
    assert "noise >=" in msg
    # the suggested noise does pay one round
    need = float(msg.split("noise >= ")[1].split()[0])
    assert fit(dataclasses.replace(cfg, noise=need * 1.01, rounds=1), data).rounds_done == 1


def test_pategail_trains_the_papers_critic_and_the_label_says_which_model():
    """Before: every scheme defaulted to WGAN critics; nothing said local or central."""
    assert TrainConfig(scheme="pategail").critic_kind == "bce"
    assert TrainConfig(scheme="pategail++").critic_kind == "wgan"
    assert TrainConfig(scheme="pategail", critic_kind="wgan").critic_kind == "wgan"
    assert TrainConfig(scheme="ldp").privacy_model == "local"
    assert TrainConfig(scheme="pategail++").privacy_model == "central"


def _clustered_starts():
    """1,500 locations; 240 users whose days all start at one of 24 locations in 3 clusters
    (mass 10 each, far below the flat threshold 2 ln(1500) = 14.6 at epsilon 1)."""
    rng = np.random.default_rng(0)
    coords = rng.random((1500, 2))
    centres = rng.random((3, 2))
    starts = np.concatenate([np.argsort(((coords - c) ** 2).sum(1))[:8] for c in centres])
    days = [np.full((2, 48), starts[u % 24]) for u in range(240)]
    return coords, days, starts


def test_dp_starts_keep_mass_where_real_days_start():
    """Before: a flat threshold kept one cell (JSD about 0.45, 1 of 24 start locations, often a
    zero-mass cell). Means over 10 noise draws; false-failure rate: 0 of 100 blocks of 10 draws
    passed any threshold (block means: JSD max 0.373, off-start mass max 0.316, coverage
    median min 9), so below 1%."""
    coords, days, starts = _clustered_starts()
    mass = start_mass(days, len(coords))
    true = (mass / mass.sum()).numpy()
    levels = kd_levels(coords)
    mech = HierarchicalStarts(1.0, len(levels))
    js, off, cover = [], [], []
    for s in range(10):
        p = mech.release(mass, levels, gen=torch.Generator().manual_seed(s),
                         spend=lambda e: None).numpy()
        js.append(start_jsd(p, true))
        off.append(p[true == 0].sum())
        cover.append(int((p[starts] > 0).sum()))
    assert np.mean(js) < 0.42
    assert np.mean(off) < 0.35
    assert np.median(cover) >= 6


def _pilot_population(rng: np.random.Generator, b: int, n: int, mu: np.ndarray):
    keys = torch.as_tensor(rng.integers(N_KEYS, size=b))
    true = np.clip(mu[keys.numpy()][None, :] + rng.normal(0, 0.1, (n, b)), 0, 1)
    r = torch.as_tensor(true)
    return keys, Moments(r.sum(0), (r * r).sum(0), n), r.mean(0)


@pytest.mark.parametrize("noise,min_corr", [(0.1, 0.8), (1.0, 0.3)])
def test_history_pilot_carries_signal_where_the_paid_pilot_does_not(noise, min_corr):
    """Toy population: 83 users, 3,008 pairs a round, per-key true mean rewards spread
    uniformly in [0.1, 0.9]. Before: the paper's pilot (noise 10 lambda) had correlation about
    0 with the true per-pair mean at lambda 0.1; the history pilot costs nothing. Measured over
    20 other seeds (/tmp script in the issue note): history corr at round 5 0.986 +- 0.001
    (lambda 0.1) and 0.675 +- 0.025 (lambda 1.0); the paid pilot 0.203 +- 0.016 (lambda 0.1).
    Every threshold is > 6 sd from its mean: false-failure rate below 1e-6 (normal tails)."""
    rng = np.random.default_rng(1)
    mu = rng.uniform(0.1, 0.9, N_KEYS)
    hist = SensitivityAware(noise, pilot="history")
    paid = SensitivityAware(noise, pilot="laplace")
    pilot = HistoryPilot(0.5)
    gen = torch.Generator().manual_seed(2)
    spent: list = []
    for rnd in range(5):
        keys, mom, true_mean = _pilot_population(rng, 3008, 83, mu)
        prior = pilot.estimate(keys)
        rel = hist.release(mom, gen=gen, spend=spent.append, prior=prior)
        pilot.update(keys, rel.mean)
        if rnd == 0:
            assert prior is None and rel.pilot is None  # first round: uniform, like PateGAIL
    corr = np.corrcoef(prior.numpy(), true_mean.numpy())[0, 1]
    paid_rel = paid.release(mom, gen=gen, spend=lambda e: None)
    corr_paid = np.corrcoef(paid_rel.pilot.numpy(), true_mean.numpy())[0, 1]
    assert corr >= min_corr
    if noise == 0.1:
        assert corr_paid < 0.3
    # the history pilot spends only the release: one Laplace event per pair a round
    assert sum(len(e.events) for e in spent) == 5 * 3008

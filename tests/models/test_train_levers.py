"""Training with the issue-16 levers: Gaussian releases and Poisson user sampling.

Accounting is checked against a direct dp_accounting composition of what the run released; the
Poisson inclusion rate is checked statistically, with companion variants that must fail."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from models.budget import pairs_per_round, planned_epsilon, start_events
from models.checkpoint import Checkpointing, load_checkpoint, save_checkpoint
from models.train import fit, participants
from tests.models._toy import tiny_config, toy_data

ALPHA = 1e-3  # false-failure rate of each statistical assertion on a correct sampler
DOWN = 2 ** (-1 / 64)  # the most the accountant's grid rounds a multiplier down


def _direct(events) -> float:
    acc = RdpAccountant()
    acc.compose(dpa.ComposedDpEvent(events))
    return float(acc.get_epsilon(1e-5))


def _starts(cfg, coords, scale=1.0):
    ev = start_events(cfg, coords)  # SelfComposed(Laplace(levels / eps), levels)
    return dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(ev.event.noise_multiplier * scale),
                                   ev.count)


@pytest.mark.parametrize("scheme", ["pategail", "pategail++"])
def test_gaussian_run_costs_exactly_its_plan(scheme):
    """Both Gaussian schemes charge one GaussianDpEvent(sigma N / sqrt(B)) a round (the
    sensitivity-aware one's per-sample sds are matched exactly), so the accountant's epsilon is
    the plan's, and both lie between the direct dp_accounting figures at the true and at the
    grid-rounded multipliers."""
    data = toy_data()
    cfg = tiny_config(scheme=scheme, mechanism="gaussian", beta=0.0, participation=1.0,
                      rounds=3, critic_kind=None, noise=2.0)
    res = fit(cfg, data)
    assert res.accountant["epsilon"] == pytest.approx(
        planned_epsilon(cfg, data.n_users, data.coords, 3), rel=1e-9)
    m = 2.0 * data.n_users / math.sqrt(pairs_per_round(cfg))
    lo = _direct([_starts(cfg, data.coords),
                  dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m), 3)])
    hi = _direct([_starts(cfg, data.coords, DOWN),
                  dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m * DOWN), 3)])
    assert lo <= res.accountant["epsilon"] * (1 + 1e-9) <= hi * (1 + 1e-9)
    assert res.accountant["basic_epsilon"] is None  # no pure epsilon with Gaussian events
    assert all(h["epsilon_batch"] > 0 for h in res.history)


def test_poisson_run_is_accounted_as_poisson_sampled_gaussians():
    """Direct oracle: starts + rounds x PoissonSampledDpEvent(q, Gaussian(sigma q N / sqrt(B))),
    sigma q N / sqrt(B) with the PUBLIC q * N (not the realised sample size)."""
    data = toy_data(n_users=8)
    q, sigma, rounds = 0.5, 1.5, 4
    cfg = tiny_config(mechanism="gaussian", sampling="poisson", participation=q, beta=0.0,
                      rounds=rounds, scheme="pategail", critic_kind=None, noise=sigma)
    res = fit(cfg, data)
    m = sigma * q * data.n_users / math.sqrt(pairs_per_round(cfg))
    lo = _direct([_starts(cfg, data.coords), dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(m)), rounds)])
    hi = _direct([_starts(cfg, data.coords, DOWN), dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(m * DOWN)), rounds)])
    assert lo <= res.accountant["epsilon"] * (1 + 1e-9) <= hi * (1 + 1e-9)
    assert res.accountant["epsilon"] == pytest.approx(
        planned_epsilon(cfg, data.n_users, data.coords, rounds), rel=1e-9)  # plan = cost
    no_amp = _direct([_starts(cfg, data.coords),
                      dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m), rounds)])
    assert res.accountant["epsilon"] < no_amp  # the amplification is claimed
    # the sample size is not published; it sits in the trusted part of the record
    assert all(h["participants"] is None for h in res.history)
    sizes = [h["trusted"]["participants"] for h in res.history]
    assert all(0 <= s <= data.n_users for s in sizes)


def test_fixed_size_sampling_claims_no_amplification():
    data = toy_data(n_users=8)
    cfg = tiny_config(mechanism="gaussian", participation=0.5, beta=0.0, rounds=2,
                      scheme="pategail", critic_kind=None, noise=1.5)
    res = fit(cfg, data)
    m = 1.5 * 4 / math.sqrt(pairs_per_round(cfg))  # 4 = round(0.5 * 8) users, charged in full
    lo = _direct([_starts(cfg, data.coords), dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(m), 2)])
    assert res.accountant["epsilon"] * (1 + 1e-9) >= lo
    assert all(h["participants"] == 4 for h in res.history)


def test_empty_poisson_rounds_still_release_and_are_charged():
    data = toy_data(n_users=5)
    cfg = tiny_config(mechanism="gaussian", sampling="poisson", participation=0.02, beta=0.0,
                      rounds=3, scheme="pategail", critic_kind=None, noise=1.0)
    res = fit(cfg, data)
    assert res.rounds_done == 3
    assert [h["trusted"]["participants"] for h in res.history] == [0, 0, 0]  # q N = 0.1
    eps = [h["epsilon"] for h in res.history]
    assert eps[0] < eps[1] < eps[2]  # each empty round charged
    assert all(math.isfinite(h["reward_mean"]) for h in res.history)


# ------------------------------------------------------------------ the Poisson inclusion rate
N_USERS, ROUNDS, Q = 200, 400, 0.1


def _inclusions(sampler, seed=0) -> np.ndarray:
    """(ROUNDS, N_USERS) 0/1 matrix of who took part, from one numpy stream as the trainer."""
    rng = np.random.default_rng(seed)
    out = np.zeros((ROUNDS, N_USERS), dtype=np.int64)
    for r in range(ROUNDS):
        out[r, sampler(N_USERS, Q, rng).numpy()] = 1
    return out


def rate_p(inc: np.ndarray) -> float:
    """Two-sided exact binomial test of the overall inclusion rate against Q."""
    return float(stats.binomtest(int(inc.sum()), inc.size, Q).pvalue)


def dispersion_p(inc: np.ndarray) -> float:
    """Two-sided test that per-round sample sizes vary as Binomial(N, Q): sum over rounds of
    (n_r - NQ)^2 / (NQ(1-Q)) ~ chi2(ROUNDS) (approximately; NQ = 20); a fixed-size sample has
    no variance and fails it."""
    n = inc.sum(1)
    chi = float(np.sum((n - N_USERS * Q) ** 2) / (N_USERS * Q * (1 - Q)))
    lo = stats.chi2.cdf(chi, ROUNDS)
    return 2 * min(lo, 1 - lo)


def independence_p(inc: np.ndarray) -> float:
    """Per-user counts over the rounds ~ Binomial(ROUNDS, Q), independent across users:
    chi-square of the users' counts against that law (bins pooled to expected >= 5)."""
    counts = inc.sum(0)
    edges = np.arange(0, ROUNDS + 2)
    obs = np.histogram(counts, edges)[0].astype(float)
    exp = stats.binom.pmf(edges[:-1], ROUNDS, Q) * N_USERS
    keep_lo, keep_hi = stats.binom.ppf([0.01, 0.99], ROUNDS, Q).astype(int)
    o = np.r_[obs[:keep_lo].sum(), obs[keep_lo:keep_hi + 1], obs[keep_hi + 1:].sum()]
    e = np.r_[exp[:keep_lo].sum(), exp[keep_lo:keep_hi + 1], exp[keep_hi + 1:].sum()]
    pooled_o, pooled_e, acc_o, acc_e = [], [], 0.0, 0.0
    for oo, ee in zip(o, e, strict=True):
        acc_o, acc_e = acc_o + oo, acc_e + ee
        if acc_e >= 5:
            pooled_o.append(acc_o)
            pooled_e.append(acc_e)
            acc_o = acc_e = 0.0
    pooled_o[-1] += acc_o
    pooled_e[-1] += acc_e
    pe = np.array(pooled_e) * (N_USERS / np.sum(pooled_e))
    return float(stats.chisquare(pooled_o, pe).pvalue)


def poisson(n, q, rng):
    return participants(n, q, rng, "poisson")


def test_poisson_inclusion_rate_is_q_and_sizes_are_binomial():
    inc = _inclusions(poisson)
    assert rate_p(inc) > ALPHA
    assert dispersion_p(inc) > ALPHA
    assert independence_p(inc) > ALPHA


def test_a_sampler_off_by_ten_percent_fails_the_rate_test():
    """q' = 1.1 q over 80,000 draws: the count is about 8 standard deviations high."""
    inc = _inclusions(lambda n, q, rng: participants(n, 1.1 * q, rng, "poisson"))
    assert rate_p(inc) < 1e-6


def test_the_fixed_size_sample_fails_the_dispersion_test():
    """round(qN) users every round: the right rate, but no Binomial variance (so no Poisson
    amplification may be claimed for it)."""
    inc = _inclusions(lambda n, q, rng: participants(n, q, rng, "fixed"))
    assert rate_p(inc) > ALPHA
    assert dispersion_p(inc) < 1e-6


def test_poisson_sample_does_not_depend_on_sharding():
    """One uniform per user of ALL users from the shared stream: the same sample whatever the
    rank (every rank draws the full vector and keeps its own users)."""
    a = participants(50, 0.3, np.random.default_rng(5), "poisson")
    b = participants(50, 0.3, np.random.default_rng(5), "poisson")
    assert torch.equal(a, b)


def test_checkpoint_from_before_the_levers_resumes(tmp_path):
    """An old checkpoint: its config lacks `mechanism` / `sampling`, its accountant state lacks
    `events`; resuming with the defaults continues it."""
    data = toy_data()
    cfg = tiny_config(rounds=2)
    whole = fit(cfg, data)
    fit(cfg, data, checkpoint=Checkpointing(tmp_path), stop_after=1)
    ck = load_checkpoint(tmp_path)
    for k in ("mechanism", "sampling"):
        del ck["config"][k]
    assert ck["accountant"].pop("events") == []
    save_checkpoint(ck, tmp_path)
    resumed = fit(cfg, data, checkpoint=Checkpointing(tmp_path, resume=True))
    assert resumed.rounds_done == 2
    assert resumed.accountant == whole.accountant
    assert dataclasses.asdict(resumed.config) == dataclasses.asdict(whole.config)

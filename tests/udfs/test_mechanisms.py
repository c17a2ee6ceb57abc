"""Primitives: samplers against exact probabilities, ratio bounds, broken-sampler detection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from stats_util import gof_pvalue

from udfs.errors import InvalidParameterError
from udfs.mechanisms import KRR, ExponentialMechanism, SquareWave
from udfs.sampling import Domains, em_sample

# Every GOF assertion below rejects at p < 1e-4: false-failure rate 1e-4 per assertion at a
# fixed seed (deterministic in practice: the seed is fixed, so a pass stays a pass).
ALPHA = 1e-4
N = 200_000


def test_krr_sampler_matches_probabilities():
    m = KRR(6, 1.3)
    out = m.perturb(np.full(N, 2), rng=np.random.default_rng(1))
    assert gof_pvalue(np.bincount(out, minlength=6), m.probabilities(2)) > ALPHA


def test_gof_rejects_krr_off_by_three_percent():
    m = KRR(6, 1.3)
    out = m.perturb(np.full(N, 2), rng=np.random.default_rng(1))
    wrong = KRR(6, 1.3).probabilities(2) * np.array([1, 1, 1.03, 1, 1, 1])
    assert gof_pvalue(np.bincount(out, minlength=6), wrong / wrong.sum()) < ALPHA


@pytest.mark.parametrize("eps", [0.01, 0.5, 3.0, 50.0])
def test_krr_ratio_bound(eps):
    m = KRR(5, eps)
    p = np.stack([m.probabilities(x) for x in range(5)])
    assert (p.max(0) / p.min(0)).max() <= math.exp(eps) * (1 + 1e-12)
    assert m.epsilon == pytest.approx(eps, rel=1e-12)


def test_krr_huge_epsilon_is_identity():
    m = KRR(12, 1e6)
    x = np.arange(12).repeat(10)
    assert np.array_equal(m.perturb(x, rng=np.random.default_rng(0)), x)


@pytest.mark.parametrize("eps", [0.3, 2.0])
def test_em_sampler_matches_probabilities(grid_space, eps):
    m = ExponentialMechanism(grid_space, eps * 10)
    out = m.perturb(np.full(N, 7), rng=np.random.default_rng(2))
    counts = np.bincount(out, minlength=grid_space.n)
    assert gof_pvalue(counts, m.probabilities(7)) > ALPHA


def test_em_explicit_path_matches_probabilities(grid_space):
    """Huge epsilon-step forces the explicit inverse-CDF stage (rejection almost never accepts)."""
    c = 200.0 / (2 * grid_space.diameter)
    out = em_sample(grid_space, np.full(N, 14), c, np.random.default_rng(3), tries=0)
    logw = -c * grid_space.dist[14].astype(float)
    p = np.exp(logw - logw.max())
    assert gof_pvalue(np.bincount(out, minlength=grid_space.n), p / p.sum()) > ALPHA


def test_gof_rejects_em_with_wrong_sensitivity(grid_space):
    m = ExponentialMechanism(grid_space, 20.0)
    out = m.perturb(np.full(N, 7), rng=np.random.default_rng(2))
    wrong = ExponentialMechanism(grid_space, 20.0 * 1.05).probabilities(7)  # 5 % off in eps
    assert gof_pvalue(np.bincount(out, minlength=grid_space.n), wrong) < ALPHA


def _restricted(sp, next_sector, seed):
    c = 8.0 / (2 * sp.diameter)
    d = Domains(
        region_anchor=np.full(N, 14), region_radius=np.full(N, 3.0),
        prev_pivot=np.full(N, 0), prev_sector=np.full(N, 0), has_prev=np.ones(N, bool),
        next_pivot=np.full(N, 35), next_sector=np.full(N, next_sector),
        has_next=np.ones(N, bool), k=3)
    out = em_sample(sp, np.full(N, 21), c, np.random.default_rng(seed), d)
    return out, c


@pytest.mark.parametrize("next_sector", [2, 0])
def test_em_restricted_domain_and_fallback(grid_space, next_sector):
    """Region ∩ sector(prev) ∩ sector(next); when that is empty (next_sector 0 = north-east of
    the north-east corner) the law must be EM on region ∩ sector(prev) (DESIGN fallback)."""
    sp = grid_space
    out, c = _restricted(sp, next_sector, 4)
    region_prev = (sp.dist[14] <= 3.0) & (sp.sector12[0] // 3 == 0)
    dom = region_prev & (sp.sector12[35] // 3 == next_sector)
    if next_sector == 0:
        assert dom.sum() == 0
        dom = region_prev
    assert dom.sum() >= 2
    logw = np.where(dom, -c * sp.dist[21].astype(float), -np.inf)
    p = np.exp(logw - logw.max())
    assert gof_pvalue(np.bincount(out, minlength=sp.n), p / p.sum()) > ALPHA


def test_em_fallback_to_base_when_prev_sector_empty(grid_space):
    """Both constrained levels empty -> EM over the base set (here: all of P)."""
    sp = grid_space
    n = 50_000
    c = 8.0 / (2 * sp.diameter)
    d = Domains(prev_pivot=np.full(n, 35), prev_sector=np.full(n, 1), has_prev=np.ones(n, bool),
                next_pivot=np.full(n, 0), next_sector=np.full(n, 2), has_next=np.ones(n, bool),
                k=3)
    assert not (sp.sector12[35] // 3 == 1).any()
    out = em_sample(sp, np.full(n, 21), c, np.random.default_rng(6), d)
    p = ExponentialMechanism(sp, 8.0).probabilities(21)
    assert gof_pvalue(np.bincount(out, minlength=sp.n), p) > ALPHA


@pytest.mark.parametrize("eps", [0.1, 4.0, 40.0])
def test_em_ratio_bound(lopsided_space, eps):
    m = ExponentialMechanism(lopsided_space, eps)
    lp = np.stack([m.log_probabilities(x) for x in range(lopsided_space.n)])
    assert (lp.max(0) - lp.min(0)).max() <= eps * (1 + 1e-9)


def test_em_huge_epsilon_no_overflow(grid_space):
    m = ExponentialMechanism(grid_space, 1e6)
    assert np.isfinite(m.log_probabilities(3)[3])
    out = m.perturb(np.arange(grid_space.n), rng=np.random.default_rng(0))
    assert np.array_equal(out, np.arange(grid_space.n))


def _sw_bins(sw, x, edges):
    return np.diff(sw.cdf(edges, x))


@pytest.mark.parametrize("eps", [0.2, 1.0, 5.0])
def test_sw_sampler_matches_cdf(eps):
    sw = SquareWave(eps)
    out = sw.perturb(np.full(N, 0.3), rng=np.random.default_rng(5))
    edges = np.linspace(-sw.b, 1 + sw.b, 41)
    counts = np.histogram(out, edges)[0]
    probs = _sw_bins(sw, 0.3, edges)
    assert probs.sum() == pytest.approx(1.0)
    assert gof_pvalue(counts, probs) > ALPHA


def test_gof_rejects_sw_with_window_three_percent_too_wide():
    sw = SquareWave(1.0)
    rng = np.random.default_rng(5)
    x = np.full(N, 0.3)
    b = sw.b * 1.03
    in_win = rng.random(N) < sw.c * sw.q
    u = rng.random(N)
    broken = np.where(in_win, x - b + 2 * b * u, np.where(u < x, u - sw.b, u + sw.b))
    edges = np.linspace(-sw.b, 1 + sw.b, 41)
    counts = np.histogram(np.clip(broken, -sw.b, 1 + sw.b), edges)[0]
    assert gof_pvalue(counts, _sw_bins(sw, 0.3, edges)) < ALPHA


@pytest.mark.parametrize("eps", [1e-6, 0.1, 2.0, 30.0])
def test_sw_density_ratio(eps):
    sw = SquareWave(eps)
    y = np.linspace(-sw.b, 1 + sw.b, 501)
    d = np.stack([sw.density(y, x) for x in np.linspace(0, 1, 21)])
    assert (d.max(0) / d.min(0)).max() <= math.exp(eps) * (1 + 1e-9)
    assert sw.epsilon == pytest.approx(eps, rel=1e-6)
    assert 0 < sw.b <= 0.5


def test_sw_huge_epsilon_returns_input():
    sw = SquareWave(1e6)
    x = np.linspace(0, 1, 11)
    assert np.allclose(sw.perturb(x, rng=np.random.default_rng(0)), x)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), "x"])
def test_primitives_reject_bad_epsilon(bad, grid_space):
    for make in (lambda: KRR(4, bad), lambda: SquareWave(bad),
                 lambda: ExponentialMechanism(grid_space, bad)):
        with pytest.raises(InvalidParameterError, match="epsilon"):
            make()


def _oracle_probs(sp, true, c, anchor, radius, pp, ps, np_, ns, k):
    """Exact EM law on the DESIGN fallback chain, by brute force over P (independent oracle)."""
    base = np.ones(sp.n, bool) if anchor is None else (sp.dist[anchor] <= radius)
    if anchor is not None:
        base[anchor] = True
    prev = sp.sector12[pp] // k == ps
    nxt = sp.sector12[np_] // k == ns
    for dom in (base & prev & nxt, base & prev, base):
        if dom.any():
            break
    logw = np.where(dom, -c * sp.dist[true].astype(float), -np.inf)
    p = np.exp(logw - logw.max())
    return p / p.sum(), dom


@pytest.mark.parametrize("with_ids", [False, True])
@pytest.mark.parametrize("case", ["both_no_region", "region_kills_level0", "bits_empty_region",
                                  "next_only", "prev_only"])
def test_em_bitset_path_matches_oracle(case, with_ids):
    """The bitset rejection path (both sector constraints; proposals uniform over
    sector(prev) ∩ sector(next)) and its hand-off to level 1 / the explicit stage draw exactly
    the EM law of the fallback chain. 200 random points so words span several uint64s.
    with_ids: rows carry region ids and sizes, so small regions use exact region bitsets
    (`sampling.region_bits`) and the level is decided exactly in the bitset stage."""
    from udfs.space import LocationSpace

    rng = np.random.default_rng(11)
    sp = LocationSpace.from_latlon(41.8 + 0.2 * rng.random(200), -87.7 + 0.2 * rng.random(200))
    true, c, k = 5, 6.0 / (2 * sp.diameter), 3  # g = 4 quadrants
    anchor, radius = None, None
    pp, np_ = 17, 42
    ps = int(sp.sector12[pp, true] // k)
    ns = int(sp.sector12[np_, true] // k)
    if case == "region_kills_level0":
        # a region holding prev-sector points but none of X = prev ∩ next: level 1 applies
        ps = 2  # from pivot 17: 68 points, 38 of them in sector 2 from pivot 42
        prev = sp.sector12[pp] // k == ps
        ns = next(s for s in range(4) if (prev & (sp.sector12[np_] // k == s)).any()
                  and (prev & (sp.sector12[np_] // k != s)).sum() > 20)
        x = prev & (sp.sector12[np_] // k == ns)
        cand = np.flatnonzero(prev & ~x)
        gap = sp.dist[np.ix_(cand, np.flatnonzero(x))].min(1) * 0.999  # ball misses X
        inside = ((sp.dist[cand] <= gap[:, None]) & prev).sum(1)
        anchor, radius = int(cand[inside.argmax()]), float(gap[inside.argmax()])
    elif case == "bits_empty_region":
        anchor, radius = true, float(np.median(sp.dist[true]))
        ns = (int(sp.sector12[np_, pp] // k) + 2) % 4  # pick a next sector disjoint from prev
        while ((sp.sector12[pp] // k == ps) & (sp.sector12[np_] // k == ns)).any():
            ns = (ns + 1) % 4
    elif case in ("next_only", "prev_only"):  # one constraint, small region around the truth
        anchor, radius = true, float(np.quantile(sp.dist[true], 0.2))
    has_prev, has_next = case != "next_only", case != "prev_only"
    if not has_prev:  # an absent side: repeat the present constraint (same fallback chain)
        p, dom = _oracle_probs(sp, true, c, anchor, radius, np_, ns, np_, ns, k)
    elif not has_next:
        p, dom = _oracle_probs(sp, true, c, anchor, radius, pp, ps, pp, ps, k)
    else:
        p, dom = _oracle_probs(sp, true, c, anchor, radius, pp, ps, np_, ns, k)
    assert dom.sum() >= 2
    n = 100_000
    d = Domains(prev_pivot=np.full(n, pp), prev_sector=np.full(n, ps),
                has_prev=np.full(n, has_prev), next_pivot=np.full(n, np_),
                next_sector=np.full(n, ns), has_next=np.full(n, has_next), k=k)
    if anchor is not None:
        d.region_anchor, d.region_radius = np.full(n, anchor), np.full(n, radius)
        if with_ids:
            d.region_size = np.full(n, int((sp.dist[anchor] <= radius).sum()))
            d.region_id = np.arange(n) % 7
    out = em_sample(sp, np.full(n, true), c, np.random.default_rng(12), d)
    assert dom[out].all()
    assert gof_pvalue(np.bincount(out, minlength=sp.n), p) > ALPHA

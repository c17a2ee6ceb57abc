"""Peers of TP/ATP: NGram (udfs/mechanisms/ngram.py) and TraCS-D / TraCS-C
(udfs/mechanisms/tracs.py, piecewise.py), each against its exact law, with broken variants.

Every GOF assertion rejects at p < ALPHA = 1e-4 (false-failure rate 1e-4 per assertion at a
fixed seed, so a pass stays a pass); each broken variant must give p < ALPHA on the same check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from stats_util import gof_pvalue

from jobs.config import CollectConfig, StudyConfig
from udfs.collect import MECHANISMS, perturb
from udfs.errors import InvalidParameterError
from udfs.mechanisms.ngram import NGram
from udfs.mechanisms.piecewise import CircularPiecewise, LinearPiecewise
from udfs.mechanisms.tracs import TraCSC, TraCSD
from udfs.space import LocationSpace

ALPHA = 1e-4
N = 200_000


@pytest.fixture(scope="module")
def pairs_space() -> LocationSpace:
    """4 points: two pairs 1.1 km apart, the pairs about 111 km apart."""
    return LocationSpace.from_latlon([0.0, 0.0, 0.0, 0.0], [0.0, 0.01, 1.0, 1.01])


# ------------------------------------------------------------------ NGram
def _codes(out: np.ndarray, n_loc: int) -> np.ndarray:
    return (out * n_loc ** np.arange(out.shape[1] - 1, -1, -1)).sum(1)


def exact_ngram_law(m: NGram, x: np.ndarray) -> np.ndarray:
    """Law of the whole NGram output (grams and reconstruction) by enumeration."""
    length, n_loc = x.size, m.space.n
    g, k = m.grams(length)
    laws = [m.gram_log_probabilities(x[i:i + k], length) for i in range(g)]
    grids = np.meshgrid(*[np.arange(len(lp)) for _, lp in laws], indexing="ij")
    idx = [gr.ravel() for gr in grids]
    z = np.stack([laws[i][0][idx[i]] for i in range(g)], axis=1)  # (combos, G, m)
    logp = sum(laws[i][1][idx[i]] for i in range(g))
    outs = m.reconstruct(z, length)
    return np.bincount(_codes(outs, n_loc), weights=np.exp(logp), minlength=n_loc ** length)


@pytest.mark.parametrize("reach", [None, 5.0])
def test_ngram_gram_sampler_matches_exact_law(pairs_space, reach):
    m = NGram(pairs_space, 2.0, reach_km=reach)
    x = np.array([0, 2])
    ys, logp = m.gram_log_probabilities(x, 3)
    out = m.perturb_grams(np.tile(x, (N, 1)), m.scale(3), np.random.default_rng(1))
    code, ycode = _codes(out, 4), _codes(ys, 4)
    assert np.isin(code, ycode).all(), "a released gram is not plausible"
    counts = np.array([(code == c).sum() for c in ycode])
    assert gof_pvalue(counts, np.exp(logp)) > ALPHA


@pytest.mark.parametrize("reach", [None, 5.0])
def test_ngram_output_law_matches_exact_formula(pairs_space, reach):
    m = NGram(pairs_space, 3.0, reach_km=reach)
    x = np.array([0, 2, 3])
    law = exact_ngram_law(m, x)
    out = m.perturb_batch(np.tile(x, (N, 1)), np.full(N, 3), rng=np.random.default_rng(2))
    assert gof_pvalue(np.bincount(_codes(out, 4), minlength=64), law) > ALPHA


def test_gof_rejects_ngram_that_spends_eps_on_every_gram(pairs_space):
    """Broken: each of the G = 2 grams at the whole eps (no split): the same check rejects."""
    good = NGram(pairs_space, 3.0, reach_km=5.0)
    broken = NGram(pairs_space, 6.0, reach_km=5.0)  # = eps per gram for length 3
    x = np.array([0, 2, 3])
    out = broken.perturb_batch(np.tile(x, (N, 1)), np.full(N, 3), rng=np.random.default_rng(2))
    assert gof_pvalue(np.bincount(_codes(out, 4), minlength=64), exact_ngram_law(good, x)) < ALPHA


@pytest.mark.parametrize("reach", [None, 5.0])
def test_ngram_exact_output_law_within_e_eps_for_every_input_pair(pairs_space, reach):
    eps = 1.5
    m = NGram(pairs_space, eps, reach_km=reach)
    inputs = np.stack(np.unravel_index(np.arange(64), (4, 4, 4)), 1)
    laws = np.stack([exact_ngram_law(m, x) for x in inputs])
    assert np.allclose(laws.sum(1), 1.0)
    seen = laws.max(0) > 0  # outputs the reconstruction can produce
    assert (laws[:, seen] > 0).all()  # ... under every input (same support)
    ratio = laws[:, seen].max(0) / laws[:, seen].min(0)
    assert ratio.max() <= math.exp(eps) * (1 + 1e-9)
    assert ratio.max() > 1.5  # the law does depend on the input


def test_ngram_budget_sums_to_at_most_eps_every_length(pairs_space):
    m = NGram(pairs_space, 2.7, n=3)
    for length in range(1, 17):
        g, _ = m.grams(length)
        assert m.record(length).spent <= 2.7
        assert len(m.record(length).steps) == g
        assert g * m.gram_epsilon(length) <= 2.7 * (1 + 1e-12)
    assert m.epsilon <= 2.7


def test_ngram_short_trajectory_is_one_em_over_p(pairs_space):
    """L = 1 < n: one gram of length 1 with the whole eps, i.e. EM over P."""
    m = NGram(pairs_space, 2.0, reach_km=5.0)
    ys, logp = m.gram_log_probabilities(np.array([1]), 1)
    d = pairs_space.dist[1].astype(float)
    want = np.exp(-2.0 / (2 * pairs_space.diameter) * d)
    assert np.allclose(np.exp(logp), want / want.sum())


def test_ngram_reconstruction_rebuilds_a_consistent_trajectory(pairs_space):
    m = NGram(pairs_space, 1.0, reach_km=5.0)
    z = np.array([[[0, 1], [1, 0]], [[2, 3], [3, 3]]])  # two trajectories' released bigrams
    out = m.reconstruct(z, 3)
    assert out[:, 0].tolist() == [0, 2] and out[:, 2].tolist() == [0, 3]
    assert out[1, 1] == 3  # both views agree


def test_ngram_rejects_bad_parameters(pairs_space):
    with pytest.raises(InvalidParameterError, match="n=0"):
        NGram(pairs_space, 1.0, n=0)
    with pytest.raises(InvalidParameterError, match="reach_km"):
        NGram(pairs_space, 1.0, reach_km=-1.0)


# ------------------------------------------------------------------ piecewise primitives
def _binned(values, cdf, edges):
    counts = np.histogram(values, bins=edges)[0]
    return counts, np.diff(cdf(edges))


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_circular_piecewise_matches_exact_cdf(eps):
    mech = CircularPiecewise(eps)
    y = mech.perturb(np.full(N, 6.0), rng=np.random.default_rng(3))
    edges = np.linspace(0, 2 * math.pi, 61)
    counts, probs = _binned(y, lambda e: mech.cdf(e, 6.0), edges)
    assert gof_pvalue(counts, probs) > ALPHA
    assert mech.epsilon == pytest.approx(eps, rel=1e-9)
    assert mech.pdf(6.0, 6.0) / mech.pdf(6.0 + math.pi, 6.0) == pytest.approx(math.exp(eps))


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_linear_piecewise_matches_exact_cdf(eps):
    mech = LinearPiecewise(eps)
    for t in (0.02, 0.5):
        y = mech.perturb(np.full(N, t), rng=np.random.default_rng(4))
        edges = np.linspace(0, 1, 61)
        counts, probs = _binned(y, lambda e, t=t: mech.cdf(e, t), edges)
        assert gof_pvalue(counts, probs) > ALPHA
    assert mech.epsilon == pytest.approx(eps, rel=1e-9)
    assert mech.pdf(0.0, 0.0) / mech.pdf(0.0, 1.0) == pytest.approx(math.exp(eps))


def test_gof_rejects_piecewise_built_with_twice_the_budget():
    good, broken = LinearPiecewise(1.0), LinearPiecewise(2.0)
    y = broken.perturb(np.full(N, 0.5), rng=np.random.default_rng(5))
    counts, probs = _binned(y, lambda e: good.cdf(e, 0.5), np.linspace(0, 1, 61))
    assert gof_pvalue(counts, probs) < ALPHA
    good_c, broken_c = CircularPiecewise(1.0), CircularPiecewise(2.0)
    y = broken_c.perturb(np.full(N, 1.0), rng=np.random.default_rng(5))
    edges = np.linspace(0, 2 * math.pi, 61)
    counts, probs = _binned(y, lambda e: good_c.cdf(e, 1.0), edges)
    assert gof_pvalue(counts, probs) < ALPHA


def test_piecewise_huge_epsilon_no_nan():
    for mech in (LinearPiecewise(1e6), CircularPiecewise(1e6)):
        y = mech.perturb(np.full(10, 0.3), rng=np.random.default_rng(0))
        assert np.all(np.abs(y - 0.3) < 1e-6)
        assert math.isfinite(mech.epsilon)


# ------------------------------------------------------------------ TraCS
def _first_point_law_pvalues(mech_built: TraCSD, mech_claimed: TraCSD, length: int, seed: int):
    """p-values of the first point's released (direction, normalised distance) against the
    claimed mechanism's exact laws. The reference of point 1 is the rectangle's south-west
    corner, so a released direction outside [0, pi/2] has reach 0: the output is the corner
    (one cell of the direction check, probability 1 - Pr[phi' in the quarter])."""
    sp = mech_claimed.space
    x = np.tile(np.arange(length) % sp.n, (N, 1))
    raw = mech_built.perturb_raw(x, rng=np.random.default_rng(seed))[:, 0]
    pl = mech_claimed.plane
    corner = np.hypot(raw[:, 0], raw[:, 1]) == 0
    phi2 = np.arctan2(raw[~corner, 1], raw[~corner, 0]) % (2 * math.pi)
    t2 = np.hypot(raw[~corner, 0], raw[~corner, 1]) / pl.reach(np.zeros((phi2.size, 2)), phi2)
    p0 = pl.to_xy(sp.coords[0, 0], sp.coords[0, 1])
    phi = math.atan2(p0[1], p0[0])
    t = float(np.hypot(*p0) / pl.reach(np.zeros(2), phi))
    ed, er = mech_claimed.split(length)
    counts, probs = _binned(phi2, lambda e: CircularPiecewise(ed).cdf(e, phi),
                            np.linspace(0, math.pi / 2, 31))
    counts, probs = np.r_[counts, corner.sum()], np.r_[probs, 1 - probs.sum()]
    counts_t, probs_t = _binned(t2, lambda e: LinearPiecewise(er).cdf(e, t), np.linspace(0, 1, 31))
    return gof_pvalue(counts, probs), gof_pvalue(counts_t, probs_t)


@pytest.fixture(scope="module")
def grid_rect() -> LocationSpace:
    lat, lon = np.meshgrid(41.85 + 0.01 * np.arange(5), -87.65 + 0.01 * np.arange(5))
    return LocationSpace.from_latlon(lat.ravel()[::-1], lon.ravel()[::-1])  # id 0 = NE corner


def test_tracs_d_first_point_matches_exact_laws(grid_rect):
    m = TraCSD(grid_rect, 6.0)
    p_dir, p_dist = _first_point_law_pvalues(m, m, 3, seed=6)
    assert p_dir > ALPHA and p_dist > ALPHA


def test_gof_rejects_tracs_d_without_the_per_point_split(grid_rect):
    """Broken: eps per point instead of eps / L (L = 3)."""
    p_dir, p_dist = _first_point_law_pvalues(TraCSD(grid_rect, 18.0), TraCSD(grid_rect, 6.0), 3,
                                             seed=6)
    assert min(p_dir, p_dist) < ALPHA


def test_tracs_c_coordinates_match_exact_law(grid_rect):
    m = TraCSC(grid_rect, 4.0)
    x = np.tile([3, 7], (N, 1))
    raw = m.perturb_raw(x, rng=np.random.default_rng(7))
    pl = m.plane
    true = pl.to_xy(grid_rect.coords[3, 0], grid_rect.coords[3, 1])
    lin = LinearPiecewise(4.0 / 4)
    for axis, size in ((0, pl.w), (1, pl.h)):
        counts, probs = _binned(raw[:, 0, axis] / size,
                                lambda e, a=axis, s=size: lin.cdf(e, true[a] / s),
                                np.linspace(0, 1, 41))
        assert gof_pvalue(counts, probs) > ALPHA
    broken = TraCSC(grid_rect, 8.0).perturb_raw(x, rng=np.random.default_rng(7))
    counts, probs = _binned(broken[:, 0, 0] / pl.w, lambda e: lin.cdf(e, true[0] / pl.w),
                            np.linspace(0, 1, 41))
    assert gof_pvalue(counts, probs) < ALPHA


def test_tracs_budgets_and_raw_outputs_stay_in_the_rectangle(grid_rect):
    for cls in (TraCSD, TraCSC):
        m = cls(grid_rect, 2.0)
        for length in range(1, 17):
            assert m.record(length).spent <= 2.0
        raw = m.perturb_raw(np.tile(np.arange(8), (500, 1)), rng=np.random.default_rng(8))
        assert raw.min() >= 0
        assert (raw[..., 0] <= m.plane.w).all() and (raw[..., 1] <= m.plane.h).all()
    with pytest.raises(InvalidParameterError, match="direction_share"):
        TraCSD(grid_rect, 1.0, direction_share=1.5)


def test_tracs_d_point_on_its_reference_is_still_perturbed():
    """A point equal to its reference (the corner) has no direction: still random output."""
    sp = LocationSpace.from_latlon([0.0, 0.01, 0.02], [0.0, 0.01, 0.02])  # id 0 = the corner
    out = TraCSD(sp, 1.0).perturb_raw(np.zeros((2000, 1), np.int64),
                                      rng=np.random.default_rng(9))
    assert np.unique(out.round(9), axis=0).shape[0] > 100


# ------------------------------------------------------------------ registry
@pytest.mark.parametrize("mech", ["ngram", "tracs_d", "tracs_c"])
def test_peers_run_through_collect_perturb(grid_rect, mech):
    assert mech in MECHANISMS
    trajs = [np.array([0, 1, 2]), np.array([5]), np.array([3, 4, 9, 8, 7, 6, 5, 1])]
    out, recs = perturb(trajs, grid_rect, 2.0, mech, 11, return_budget=True)
    again = perturb(trajs, grid_rect, 2.0, mech, 11)
    assert [len(o) for o in out] == [3, 1, 8]
    assert all(np.array_equal(a, b) for a, b in zip(out, again, strict=True))
    assert all(o.min() >= 0 and o.max() < grid_rect.n for o in out)
    assert all(r.spent <= 2.0 for r in recs)
    assert mech in StudyConfig(mechanisms=[mech]).mechanisms
    assert CollectConfig(mechanism=mech).mechanism == mech

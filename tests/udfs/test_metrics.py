"""Metrics on hand-computed examples (independent oracle: explicit loops / arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.metrics_oracle import reference_figures
from udfs import metrics


def test_ne_prq_by_hand(grid_space):
    sp = grid_space
    true = [np.array([0, 1]), np.array([5])]
    pert = [np.array([0, 7]), np.array([35])]
    e1, e2 = sp.dist[1, 7], sp.dist[5, 35]
    assert metrics.ne(true, pert, sp) == pytest.approx(((0 + e1) / 2 + e2) / 2 / sp.diameter)
    delta = float(e1) + 1e-6
    assert metrics.prq(true, pert, sp, delta) == pytest.approx((2 + (e2 <= delta)) / 3)


def test_acd_and_kendall(grid_space):
    sp = grid_space
    true = [np.array([0, 0, 1]), np.array([1]), np.array([2, 1])]
    pert = [np.array([0, 3, 1]), np.array([2]), np.array([2, 2])]
    # true counts: 0:1, 1:3, 2:1 ; pert counts: 0:1, 1:1, 2:2, 3:1 ; top 3 by true: 1, 0, 2
    ct = np.zeros(sp.n)
    ct[[0, 1, 2]] = [1, 3, 1]
    assert metrics.acd(true, pert, sp, top=3 / sp.n) == pytest.approx((2 + 0 + 1) / 3)
    tau = metrics.kendall_tau(true, pert, sp, top=3 / sp.n)
    assert -1 <= tau <= 1


def test_metrics_reject_mismatch(grid_space):
    from udfs.errors import InvalidTrajectoryError

    with pytest.raises(InvalidTrajectoryError, match="as long as"):
        metrics.ne([np.array([0, 1])], [np.array([0])], grid_space)


@pytest.mark.parametrize("seed", range(4))
def test_utility_from_counts_equals_the_definitions_and_counts_add_up(grid_space, seed):
    """`utility` (the counts path production uses) equals the definitions, and the counts of
    any split of the pairs add up to the counts of the whole."""
    sp = grid_space
    rng = np.random.default_rng(seed)
    true = [rng.integers(0, sp.n, n) for n in rng.integers(1, 9, 200)]
    pert = [np.where(rng.random(t.size) < 0.4, t, rng.integers(0, sp.n, t.size)) for t in true]
    got = metrics.utility(true, pert, sp, (0.5, 1.0), 0.25)
    want = reference_figures(true, pert, sp, (0.5, 1.0), 0.25)
    assert list(got) == ["NE", "PRQ@0.5km", "PRQ@1km", "ACD", "KendallTau"] == list(want)
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-15, nan_ok=True), name

    def counts(ts, ps):
        return metrics.flat_counts(np.concatenate(ts), np.concatenate(ps),
                                   [t.size for t in ts], sp.coords, (0.5, 1.0))

    cut = sorted(rng.choice(np.arange(1, 200), 3, replace=False))
    parts = [counts(true[a:b], pert[a:b]) for a, b in zip([0, *cut], [*cut, 200], strict=True)]
    whole, summed = counts(true, pert), parts[0] + parts[1] + parts[2] + parts[3]
    assert summed.trajectories == whole.trajectories == 200
    assert summed.points == whole.points
    assert summed.error_km == pytest.approx(whole.error_km, rel=1e-12)
    for field in ("within", "true_visits", "pert_visits"):
        assert np.array_equal(getattr(summed, field), getattr(whole, field)), field


def test_counts_refuse_no_pairs_and_mismatched_lengths(grid_space):
    from udfs.errors import InvalidTrajectoryError

    with pytest.raises(InvalidTrajectoryError, match="as long as"):
        metrics.flat_counts(np.array([0, 1]), np.array([0]), [2], grid_space.coords)
    empty = metrics.flat_counts(np.array([], int), np.array([], int), [], grid_space.coords)
    with pytest.raises(InvalidTrajectoryError, match="no trajectories"):
        empty.figures(grid_space.diameter)

"""Metrics on hand-computed examples (independent oracle: explicit loops / arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

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

"""Utility metrics of LDP output (numpy reference; the Spark evaluation job must agree).

All functions take `true` and `perturbed`: equal-length lists of 1-D location-id arrays with
perturbed[i].size == true[i].size, and the LocationSpace they index. Distances are the space's
haversine km (float32 matrix widened to float64).

- NE  = (1/T) sum_t [ (1/n_t) sum_i D[true_t[i], pert_t[i]] ] / Delta_u   (mean of per-trajectory
        means, then divided by the diameter of P).
- PRQ(delta) = #{points (t, i) : D[true_t[i], pert_t[i]] <= delta} / sum_t n_t   (pooled over all
        points, delta in km, boundary inclusive).
- Visit counts: c(l) = number of trajectories containing location l at least once.
- ACD(top) = mean over the top-k locations by TRUE count of |c_true(l) - c_pert(l)|, with
        k = max(1, ceil(top * |P|)), ranking by count descending, ties by lower id.
- Kendall tau = scipy.stats.kendalltau (tau-b) between c_true and c_pert over those same top-k
        locations (NaN if either side is constant).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import kendalltau

from udfs.errors import InvalidTrajectoryError
from udfs.space import LocationSpace


def _pairs(true, perturbed):
    if len(true) != len(perturbed):
        raise InvalidTrajectoryError(
            f"{len(true)} true vs {len(perturbed)} perturbed trajectories; pass matching lists")
    if len(true) == 0:
        raise InvalidTrajectoryError("no trajectories to evaluate; pass at least one")
    lens = np.array([len(t) for t in true])
    if any(len(p) != n for p, n in zip(perturbed, lens, strict=True)) or (lens == 0).any():
        raise InvalidTrajectoryError(
            "each perturbed trajectory must be non-empty and as long as its true one")
    return np.concatenate(true).astype(np.int64), np.concatenate(perturbed).astype(np.int64), lens


def point_errors_km(true, perturbed, space: LocationSpace) -> np.ndarray:
    """Per-point haversine error in km, all trajectories concatenated."""
    t, p, _ = _pairs(true, perturbed)
    return space.dist[t, p].astype(np.float64)


def ne(true, perturbed, space: LocationSpace) -> float:
    """Normalised error: mean over trajectories of the mean point error, / Delta_u."""
    _, _, lens = _pairs(true, perturbed)
    err = point_errors_km(true, perturbed, space)
    traj = np.repeat(np.arange(lens.size), lens)
    per_traj = np.bincount(traj, weights=err) / lens
    return float(per_traj.mean() / space.diameter) if space.diameter > 0 else 0.0


def prq(true, perturbed, space: LocationSpace, delta_km: float) -> float:
    """Share of all points perturbed within delta_km of the truth (pooled over points)."""
    err = point_errors_km(true, perturbed, space)
    return float((err <= delta_km).mean())


def visit_counts(trajectories, n_loc: int) -> np.ndarray:
    """c(l) = number of trajectories visiting l at least once."""
    rows = np.concatenate([np.unique(np.asarray(t, dtype=np.int64)) for t in trajectories])
    return np.bincount(rows, minlength=n_loc)


def top_locations(counts: np.ndarray, top: float) -> np.ndarray:
    k = max(1, math.ceil(top * counts.size))
    order = np.lexsort((np.arange(counts.size), -counts))  # count desc, id asc
    return order[:k]


def acd(true, perturbed, space: LocationSpace, top: float = 0.1) -> float:
    """Mean |c_true - c_pert| over the top fraction of locations by true count."""
    _pairs(true, perturbed)
    ct, cp = visit_counts(true, space.n), visit_counts(perturbed, space.n)
    sel = top_locations(ct, top)
    return float(np.abs(ct[sel] - cp[sel]).mean())


def kendall_tau(true, perturbed, space: LocationSpace, top: float = 0.1) -> float:
    """Kendall tau-b between true and perturbed visit counts over the true top locations."""
    _pairs(true, perturbed)
    ct, cp = visit_counts(true, space.n), visit_counts(perturbed, space.n)
    sel = top_locations(ct, top)
    if sel.size < 2 or np.all(ct[sel] == ct[sel][0]) or np.all(cp[sel] == cp[sel][0]):
        return float("nan")
    return float(kendalltau(ct[sel], cp[sel]).statistic)


def prq_name(delta_km: float) -> str:
    """The metric name of PRQ at `delta_km` (as written to the evaluation table)."""
    return f"PRQ@{float(delta_km):g}km"


def utility(true, perturbed, space: LocationSpace, prq_km=(), top: float = 0.1
            ) -> dict[str, float]:
    """Every utility figure of one set of pairs, by metric name: NE, PRQ@delta for each delta
    in `prq_km`, ACD and KendallTau (the rows a release's or a study setting's figures hold)."""
    return {"NE": ne(true, perturbed, space),
            **{prq_name(d): prq(true, perturbed, space, d) for d in prq_km},
            "ACD": acd(true, perturbed, space, top),
            "KendallTau": kendall_tau(true, perturbed, space, top)}

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

The functions above are the definitions. Production (collect's release figures, the study)
computes the same figures from :class:`UtilityCounts`: sums that add up over any split of the
pairs (trajectory count, summed per-trajectory mean errors, points, points within each delta,
both visit-count vectors), so a Spark job sums the counts of its partitions and the figures are
computed once from the total (`jobs.collect.metrics`). :func:`utility` is that path on one set
of pairs; tests check it against the definitions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.errors import InvalidTrajectoryError
from udfs.space import LocationSpace, distances_from_coords


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
    return acd_of_counts(visit_counts(true, space.n), visit_counts(perturbed, space.n), top)


def kendall_tau(true, perturbed, space: LocationSpace, top: float = 0.1) -> float:
    """Kendall tau-b between true and perturbed visit counts over the true top locations."""
    _pairs(true, perturbed)
    return kendall_of_counts(visit_counts(true, space.n), visit_counts(perturbed, space.n), top)


def acd_of_counts(ct: np.ndarray, cp: np.ndarray, top: float) -> float:
    """ACD from the two visit-count vectors c_true, c_pert."""
    sel = top_locations(ct, top)
    return float(np.abs(ct[sel] - cp[sel]).mean())


def kendall_of_counts(ct: np.ndarray, cp: np.ndarray, top: float) -> float:
    """Kendall tau-b from the two visit-count vectors (NaN if either side is constant)."""
    sel = top_locations(ct, top)
    if sel.size < 2 or np.all(ct[sel] == ct[sel][0]) or np.all(cp[sel] == cp[sel][0]):
        return float("nan")
    from scipy.stats import kendalltau  # here: Spark workers import this module, not scipy

    return float(kendalltau(ct[sel], cp[sel]).statistic)


def prq_name(delta_km: float) -> str:
    """The metric name of PRQ at `delta_km` (as written to the evaluation table)."""
    return f"PRQ@{float(delta_km):g}km"


@dataclass
class UtilityCounts:
    """Sums the utility figures are computed from, additive over any split of the pairs.

    `error_km`: sum over trajectories of each one's mean point error (km); `within[i]`: points
    with error <= prq_km[i] (the deltas the counts were made for); `true_visits` /
    `pert_visits`: c_true(l) and c_pert(l), length |P|.
    """

    trajectories: int
    error_km: float
    points: int
    within: np.ndarray
    true_visits: np.ndarray
    pert_visits: np.ndarray

    def __add__(self, other: UtilityCounts) -> UtilityCounts:
        return UtilityCounts(self.trajectories + other.trajectories,
                             self.error_km + other.error_km, self.points + other.points,
                             self.within + other.within, self.true_visits + other.true_visits,
                             self.pert_visits + other.pert_visits)

    def figures(self, diameter: float, prq_km=(), top: float = 0.1) -> dict[str, float]:
        """NE, PRQ@delta (`prq_km`: the deltas `within` counts), ACD and KendallTau."""
        if self.trajectories == 0:
            raise InvalidTrajectoryError("no trajectories to evaluate; pass at least one")
        mean_error = self.error_km / self.trajectories
        return {"NE": float(mean_error / diameter) if diameter > 0 else 0.0,
                **{prq_name(d): float(w / self.points)
                   for d, w in zip(prq_km, self.within.tolist(), strict=True)},
                "ACD": acd_of_counts(self.true_visits, self.pert_visits, top),
                "KendallTau": kendall_of_counts(self.true_visits, self.pert_visits, top)}


def flat_counts(true_ids: np.ndarray, pert_ids: np.ndarray, lengths: np.ndarray,
                coords: np.ndarray, prq_km=()) -> UtilityCounts:
    """UtilityCounts of trajectories given flat: the ids of all points concatenated and each
    trajectory's length (the layout of an Arrow list column). `coords`: P's (lat, lon) rows;
    the errors are `distances_from_coords`, the numbers of `LocationSpace.dist`, so a Spark
    worker needs P's coordinates only, not its n x n matrices."""
    t = np.asarray(true_ids, dtype=np.int64)
    p = np.asarray(pert_ids, dtype=np.int64)
    lens = np.asarray(lengths, dtype=np.int64)
    n_loc = int(coords.shape[0])
    if t.size != p.size or t.size != int(lens.sum()) or (lens <= 0).any():
        raise InvalidTrajectoryError(
            "each perturbed trajectory must be non-empty and as long as its true one")
    err = distances_from_coords(coords, t, p)
    traj = np.repeat(np.arange(lens.size), lens)
    per_traj = np.bincount(traj, weights=err, minlength=lens.size) / lens
    within = np.array([np.count_nonzero(err <= d) for d in prq_km], dtype=np.int64)

    def visits(ids: np.ndarray) -> np.ndarray:  # trajectories containing l at least once
        return np.bincount(np.unique(traj * n_loc + ids) % n_loc, minlength=n_loc)

    return UtilityCounts(int(lens.size), float(per_traj.sum()), int(t.size), within,
                         visits(t).astype(np.int64), visits(p).astype(np.int64))


def utility(true, perturbed, space: LocationSpace, prq_km=(), top: float = 0.1
            ) -> dict[str, float]:
    """Every utility figure of one set of pairs, by metric name: NE, PRQ@delta for each delta
    in `prq_km`, ACD and KendallTau (the rows a release's or a study setting's figures hold),
    computed from their :class:`UtilityCounts` as the distributed path computes them."""
    t, p, lens = _pairs(true, perturbed)
    return flat_counts(t, p, lens, space.coords, prq_km).figures(space.diameter, prq_km, top)

"""Per-day mobility statistics of 48-slot days, vectorised over days (no Python loop over days).

Every function takes `days`, an integer array (n, 48) of location ids, or coordinate arrays of
that shape. `summarize_days` reduces a set of days to a `DaySummary`: small integer histograms
from which `udfs.mobility.compare_summaries` computes the divergences. The Spark evaluation
(`jobs/evaluate/summaries.py`) runs `summarize_days` itself per batch and only adds up its
integer counts, so both give the same summary.
Distances are `udfs.geo.haversine_km` (the project's one numpy haversine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.errors import InvalidTrajectoryError
from udfs.geo import haversine_km
from udfs.mobility_bins import IRANK_TOP_K, SLOTS, MetricBins, histogram

#: Lanes of numpy's pairwise summation (float64 add reduce unrolls 8 partial sums).
SUM_LANES = 8


def row_mean48(a: np.ndarray) -> np.ndarray:
    """Mean of each row of a (n, 48) array, summed in one fixed, documented order.

    Order: eight lane sums r_j = ((((a_j + a_{j+8}) + a_{j+16}) + a_{j+24}) + a_{j+32}) + a_{j+40}
    (left to right), total = ((r_0 + r_1) + (r_2 + r_3)) + ((r_4 + r_5) + (r_6 + r_7)), mean =
    total / 48. This is exactly the order of numpy's pairwise summation for 48 float64 values, so
    results are bit-identical to `np.mean(row)` in the reference code, and Spark reproduces it.
    """
    r = a[:, 0:SUM_LANES]
    for k in range(1, SLOTS // SUM_LANES):
        r = r + a[:, k * SUM_LANES : (k + 1) * SUM_LANES]
    left = (r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])
    total = left + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    return total / SLOTS


def paper_step_distances(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """(n, 47) squared coordinate differences (deg^2) between consecutive slots, stays = 0."""
    dx = lat[:, :-1] - lat[:, 1:]
    dy = lon[:, :-1] - lon[:, 1:]
    return dx * dx + dy * dy


def paper_radius(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """(n,) mean squared coordinate distance (deg^2) of a day's 48 slots to their centroid."""
    dx = lat - row_mean48(lat)[:, None]
    dy = lon - row_mean48(lon)[:, None]
    return row_mean48(dx * dx + dy * dy)


def geo_step_distances(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """(n, 47) haversine km between consecutive slots, stays = 0."""
    return haversine_km(lat[:, :-1], lon[:, :-1], lat[:, 1:], lon[:, 1:])


def geo_radius(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """(n,) radius of gyration (km): sqrt of the mean squared haversine distance of the 48 slots
    to the centroid (mean latitude, mean longitude, in degrees)."""
    d = haversine_km(row_mean48(lat)[:, None], row_mean48(lon)[:, None], lat, lon)
    return np.sqrt(row_mean48(d * d))


def location_counts(days: np.ndarray) -> np.ndarray:
    """(n, 48) slots spent at each distinct location of the day, in descending order, 0-padded."""
    n = days.shape[0]
    s = np.sort(days, axis=1)
    new = np.ones(s.shape, dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    group = np.cumsum(new, axis=1) - 1 + SLOTS * np.arange(n)[:, None]
    counts = np.bincount(group.ravel(), minlength=n * SLOTS).reshape(n, SLOTS)
    return -np.sort(-counts, axis=1)


def run_length_counts(days: np.ndarray) -> np.ndarray:
    """(49,) number of runs (maximal stays at one location, in slots) of each length 0..48."""
    n = days.shape[0]
    new = np.ones(days.shape, dtype=bool)
    new[:, 1:] = days[:, 1:] != days[:, :-1]
    run = np.cumsum(new, axis=1) - 1 + SLOTS * np.arange(n)[:, None]
    lengths = np.bincount(run.ravel(), minlength=n * SLOTS)
    return np.bincount(lengths[lengths > 0], minlength=SLOTS + 1)


@dataclass(frozen=True)
class DaySummary:
    """Everything the metrics need from one set of days; small whatever the number of days.

    distance / radius: counts per bin of the mode's spec (and how many values were dropped, paper
    mode only); distinct_days[k]: days with k distinct locations; run_lengths[l]: runs of l slots;
    visits[i]: slots spent at location i; rank_slots[r]: sum over days of the slots spent at the
    day's (r+1)-th most visited location (0 when the day has fewer locations).
    """

    n_days: int
    distance: np.ndarray
    distance_dropped: int
    radius: np.ndarray
    radius_dropped: int
    distinct_days: np.ndarray
    run_lengths: np.ndarray
    visits: np.ndarray
    rank_slots: np.ndarray


def validate_days(days: np.ndarray, n_locations: int, name: str) -> np.ndarray:
    """`days` as int64 (n, 48), or InvalidTrajectoryError saying what is wrong."""
    a = np.asarray(days)
    if a.ndim != 2 or a.shape[1] != SLOTS or a.shape[0] < 1:
        raise InvalidTrajectoryError(
            f"{name} must have shape (n >= 1, {SLOTS}) (one row of {SLOTS} slot location ids per "
            f"day), got {a.shape}"
        )
    if not np.issubdtype(a.dtype, np.integer):
        raise InvalidTrajectoryError(f"{name} must hold integer location ids, got {a.dtype}")
    if a.min() < 0 or a.max() >= n_locations:
        raise InvalidTrajectoryError(
            f"{name} holds location ids in [{a.min()}, {a.max()}] but coords has {n_locations} "
            f"rows: ids must lie in [0, {n_locations - 1}] (row i of coords = location id i)"
        )
    return a.astype(np.int64, copy=False)


def summarize_days(days: np.ndarray, coords: np.ndarray, bins: MetricBins) -> DaySummary:
    """Reduce validated days (n, 48) with coords (L, 2) = (lat, lon) to a DaySummary."""
    lat, lon = coords[days, 0], coords[days, 1]
    if bins.mode == "paper":
        step, rad = paper_step_distances(lat, lon), paper_radius(lat, lon)
    else:
        step, rad = geo_step_distances(lat, lon), geo_radius(lat, lon)
    dist, dist_drop = histogram(step.ravel(), bins.distance)
    radius, rad_drop = histogram(rad, bins.radius)
    counts = location_counts(days)
    distinct = np.count_nonzero(counts, axis=1)
    return DaySummary(
        n_days=int(days.shape[0]),
        distance=dist,
        distance_dropped=dist_drop,
        radius=radius,
        radius_dropped=rad_drop,
        distinct_days=np.bincount(distinct, minlength=SLOTS + 1),
        run_lengths=run_length_counts(days),
        visits=np.bincount(days.ravel(), minlength=coords.shape[0]),
        rank_slots=counts[:, :IRANK_TOP_K].sum(axis=0),
    )

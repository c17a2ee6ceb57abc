"""Mobility statistics of 48-slot days compared as Jensen-Shannon divergences (docs/architecture.md
s. 7).

`jsd_metrics(real_days, generated_days, coords, mode)` returns {distance, radius, duration,
dailyloc, grank, irank}: each the JSD (natural log, in [0, ln 2]) between the real and the
generated histogram (or vector) of one statistic. Days are integer arrays (n, 48) of location ids;
`coords[i]` = (lat, lon) in degrees of location id i.

Definitions (a "day" is one row; slots t = 0..47):
- Distance: for each day and t = 0..46 the distance between slots t and t+1; stays (distance 0)
  are included, so each day contributes 47 values.
- Radius: one value per day, the spread of its 48 slot positions around their centroid
  (centroid = mean latitude, mean longitude over the 48 slots, repeats counted).
- Duration: lengths (in slots, 1..48) of the day's runs, a run being a maximal stretch of
  consecutive slots at one location; a day contributes one value per run.
- DailyLoc: one value per day from k = number of distinct locations of the day (1..48).
- G-rank: visit probability of each location over all slots of all days (visits / (48 n)); the
  K = min(50, L) largest probabilities (each side's own top K, sorted) are binned.
- I-rank: for each day, the slots spent at its most, 2nd, ..., 20th most visited location
  (0 past its number of locations); summed over days and normalised to a 20-vector; the JSD is
  taken on these vectors directly (no bins). Ties in rank do not matter (only counts are used).

mode="paper" reproduces the PateGail evaluation code (tsinghua-fib-lab/PateGail,
utils/evaluations.py), quirks included, so numbers compare with the papers:
- Distance = squared coordinate difference (dlat^2 + dlon^2, degrees^2), no metric conversion.
- Radius = mean over the 48 slots of the squared coordinate distance (degrees^2) to the centroid
  (not its square root). Means are summed in numpy's pairwise order (see `row_mean48`).
- Distance and Radius share the edges np.arange(0, max_distance, max_distance / 1000): 1000 edges,
  999 bins of width max_distance/1000; max_distance defaults to 2101.45 (the constant of the
  published code for the shared Geolife split, not computed from the data).
- DailyLoc value = k / 48 on edges np.arange(0, 1, 1/48) (48 edges, 47 bins): k = 1..45 each
  get a bin, k = 46 and 47 share the last (closed) bin, k = 48 (1.0) is dropped; bin 0 is empty.
- Duration edges np.arange(1, 49, 1) (47 bins): lengths 1..46 each get a bin, 47 and 48 share
  the last bin.
- G-rank: the top-50 probabilities binned on np.arange(0, 1, 1/50) (49 bins of 0.02; a
  probability above 0.98 is dropped). Each side uses its own top 50, so the metric is symmetric.
- All bins follow np.histogram: [e_i, e_i+1), last bin closed, values outside dropped. A metric
  whose histogram is left empty raises InputDataError (the reference would return NaN).
- JSD normalises each histogram to sum 1 (the reference's optional 1e-10 smoothing is omitted:
  it changes the golden values by < 1e-8).

mode="geo" (use for Telecom-scale and any new figures): kilometres, nothing dropped.
- Distance = haversine km (Earth radius 6371.0088) between consecutive slots.
- Radius = radius of gyration, sqrt(mean over the 48 slots of haversine_km(slot, centroid)^2).
- Distance and Radius bins: 400 bins of 0.25 km on [0, 100) km plus an overflow bin [100, inf)
  (`geo_bins(width_km, n_bins)` to change them).
- DailyLoc: k itself, one bin per k = 1..48. Duration: one bin per length 1..48.
- G-rank: top-50 probabilities on 13 bins: [0, 1e-4), then 12 log-spaced bins from 1e-4 to 1,
  three a decade (last bin closed: nothing dropped; why: `mobility_bins.GEO_GRANK_EDGES`).
- I-rank: as above.
"""

from __future__ import annotations

import numpy as np

from udfs.errors import InputDataError, InvalidParameterError, InvalidTrajectoryError
from udfs.mobility_bins import (
    GEOLIFE_MAX_DISTANCE_DEG2,
    GRANK_TOP_K,
    SLOTS,
    HistogramSpec,
    MetricBins,
    geo_bins,
    histogram,
    jsd,
    paper_bins,
)
from udfs.mobility_stats import DaySummary, summarize_days, validate_days

__all__ = [
    "GEOLIFE_MAX_DISTANCE_DEG2",
    "METRICS",
    "MODES",
    "DaySummary",
    "compare_summaries",
    "jsd",
    "jsd_metrics",
    "metric_bins",
    "validate_coords",
]

MODES = ("paper", "geo")
METRICS = ("distance", "radius", "duration", "dailyloc", "grank", "irank")


def metric_bins(mode: str, max_distance: float = GEOLIFE_MAX_DISTANCE_DEG2) -> MetricBins:
    """The bins of `mode` ("paper" uses max_distance in degrees^2; "geo" ignores it)."""
    if mode == "paper":
        return paper_bins(max_distance)
    if mode == "geo":
        return geo_bins()
    raise InvalidParameterError(f"mode must be one of {MODES}, got {mode!r}")


def validate_coords(coords: np.ndarray, mode: str) -> np.ndarray:
    """coords as float64 (L, 2) = (lat, lon) degrees, or InvalidTrajectoryError saying why."""
    c = np.asarray(coords, dtype=np.float64)
    if c.ndim != 2 or c.shape[1] != 2 or c.shape[0] < 1:
        raise InvalidTrajectoryError(
            f"coords must have shape (L >= 1, 2) = (lat, lon), got {c.shape}"
        )
    if not np.all(np.isfinite(c)):
        raise InvalidTrajectoryError("coords must be finite (no NaN/inf latitude or longitude)")
    if mode == "geo" and (np.abs(c[:, 0]).max() > 90 or np.abs(c[:, 1]).max() > 180):
        raise InvalidTrajectoryError(
            "geo mode needs coords in degrees: |lat| <= 90 and |lon| <= 180 (columns lat, lon)"
        )
    return c


def jsd_metrics(
    real_days: np.ndarray,
    generated_days: np.ndarray,
    coords: np.ndarray,
    mode: str,
    *,
    max_distance: float = GEOLIFE_MAX_DISTANCE_DEG2,
) -> dict[str, float]:
    """JSD of each mobility statistic between real and generated days (definitions above).

    max_distance: upper end (degrees^2) of the paper-mode Distance/Radius bins; the default
    2101.45 is the published constant for the Geolife split. Ignored in geo mode.
    Runtime: O(n log 48) numpy per side; memory about 1 KB per day.
    """
    bins = metric_bins(mode, max_distance)
    c = validate_coords(coords, mode)
    real = validate_days(real_days, c.shape[0], "real_days")
    gen = validate_days(generated_days, c.shape[0], "generated_days")
    return compare_summaries(summarize_days(real, c, bins), summarize_days(gen, c, bins), bins)


def compare_summaries(real: DaySummary, gen: DaySummary, bins: MetricBins) -> dict[str, float]:
    """The six JSDs from two DaySummary (numpy or Spark made); see the module docstring."""
    values = np.arange(SLOTS + 1, dtype=np.float64)  # k or run length 0..48 (0 has weight 0)
    out: dict[str, float] = {}
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {
        "distance": (real.distance, gen.distance),
        "radius": (real.radius, gen.radius),
        "duration": _both(values, bins.duration, real.run_lengths, gen.run_lengths),
        "dailyloc": _both(
            values / bins.dailyloc_divisor, bins.dailyloc, real.distinct_days, gen.distinct_days
        ),
        "grank": (_grank(real.visits, bins.grank), _grank(gen.visits, bins.grank)),
        "irank": (real.rank_slots, gen.rank_slots),
    }
    for metric in METRICS:
        p, q = pairs[metric]
        for side, h in (("real", p), ("generated", q)):
            if not np.sum(h) > 0:
                raise InputDataError(
                    f"{bins.mode}-mode {metric} histogram of the {side} days is empty: every "
                    "value fell outside the bins and was dropped; use mode='geo' (nothing is "
                    "dropped) or, for distance/radius, a larger max_distance"
                )
        out[metric] = jsd(p, q)
    return out


def _both(
    values: np.ndarray, spec: HistogramSpec, w_real: np.ndarray, w_gen: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    return histogram(values, spec, w_real)[0], histogram(values, spec, w_gen)[0]


def _grank(visits: np.ndarray, spec: HistogramSpec) -> np.ndarray:
    probs = visits / np.sum(visits.astype(np.float64))
    top = np.sort(probs)[::-1][: min(GRANK_TOP_K, probs.size)]
    return histogram(top, spec)[0]

"""Histogram bins and the Jensen-Shannon divergence of the mobility metrics.

One `HistogramSpec` describes every histogram of the mobility metrics (its edges, lower bound,
step and overflow flag); the numpy core bins with `histogram` / `bucket_index`, and the Spark
evaluation (`jobs/evaluate/summaries.py`) runs that same core per batch.

Two bin semantics, chosen by `overflow`:
- `overflow=False` (paper mode): exactly `np.histogram(values, edges)`: bin i holds
  edges[i] <= v < edges[i+1], the last bin also holds v == edges[-1]; values below edges[0] or above
  edges[-1] are dropped (counted apart as `dropped`, never binned).
- `overflow=True` (geo mode): bin i holds edges[i] <= v < edges[i+1] for every i, and one extra last
  bin holds v >= edges[-1]; nothing is dropped (a value below edges[0] is an error).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.errors import InvalidParameterError

#: Slots per day (half-hour slots).
SLOTS = 48
#: G-rank: number of most visited locations whose visit probabilities are compared.
GRANK_TOP_K = 50
#: I-rank: number of ranks in the per-day rank-frequency profile.
IRANK_TOP_K = 20
#: Upper end (degrees^2) of the paper-mode Distance/Radius histograms for the shared Geolife split;
#: a constant of the published PateGail evaluation, not computed from the data.
GEOLIFE_MAX_DISTANCE_DEG2 = 2101.45


@dataclass(frozen=True)
class HistogramSpec:
    """Bin edges plus the semantics of values on or past the last edge (see module docstring)."""

    edges: np.ndarray
    overflow: bool

    def __post_init__(self) -> None:
        edges = np.asarray(self.edges, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or not np.all(np.diff(edges) > 0):
            raise InvalidParameterError(
                f"histogram edges must be a strictly increasing 1-D array of >= 2 values, got "
                f"{edges!r}"
            )
        edges.setflags(write=False)
        object.__setattr__(self, "edges", edges)

    @classmethod
    def arange(cls, lo: float, hi: float, bins: int) -> HistogramSpec:
        """The reference code's edges `np.arange(lo, hi, (hi - lo) / bins)` (bins - 1 bins)."""
        if not hi > lo or bins < 2:
            raise InvalidParameterError(f"need hi > lo and bins >= 2, got {lo=}, {hi=}, {bins=}")
        return cls(np.arange(lo, hi, float(hi - lo) / bins), overflow=False)

    @classmethod
    def uniform(cls, width: float, n_bins: int) -> HistogramSpec:
        """`n_bins` bins of `width` on [0, n_bins*width), then overflow [n_bins*width, inf)."""
        if not width > 0 or n_bins < 1:
            raise InvalidParameterError(f"need width > 0 and n_bins >= 1, got {width=}, {n_bins=}")
        return cls(width * np.arange(n_bins + 1, dtype=np.float64), overflow=True)

    @property
    def n_bins(self) -> int:
        """Number of counted bins (the overflow bin included)."""
        return self.edges.size - 1 + int(self.overflow)

    @property
    def step(self) -> float:
        """Spacing used for a first guess of the bin (edges are equally spaced up to rounding)."""
        return float(self.edges[1] - self.edges[0])


def bucket_index(values: np.ndarray, spec: HistogramSpec) -> np.ndarray:
    """Bin index of each value under `spec`; -1 marks a value dropped (paper semantics only)."""
    v = np.asarray(values, dtype=np.float64)
    edges = spec.edges
    idx = np.searchsorted(edges, v, side="right") - 1  # edges[idx] <= v < edges[idx + 1]
    last = edges.size - 1
    if spec.overflow:
        if np.any(idx < 0) or np.any(np.isnan(v)):
            raise InvalidParameterError(
                f"values below the first edge {edges[0]} (or NaN) cannot be binned with an "
                "overflow histogram; statistics binned this way must be non-negative"
            )
        return idx  # idx == last is the overflow bin
    idx = np.where(v == edges[-1], last - 1, idx)
    return np.where((idx < 0) | (idx >= last) | np.isnan(v), -1, idx)


def histogram(
    values: np.ndarray, spec: HistogramSpec, weights: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """(counts per bin, number of values dropped) of `values` (optionally weighted counts)."""
    idx = bucket_index(values, spec)
    w = np.ones(idx.shape, dtype=np.int64) if weights is None else np.asarray(weights)
    kept = idx >= 0
    counts = np.bincount(idx[kept], weights=w[kept], minlength=spec.n_bins)
    return counts.astype(np.int64), int(w[~kept].sum())


def jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (natural log, in [0, ln 2]) of two non-negative vectors.

    Each vector is normalised to sum 1 first (counts are fine). Equals
    `scipy.spatial.distance.jensenshannon(p, q) ** 2` with base e.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape or p.ndim != 1:
        raise InvalidParameterError(
            f"JSD needs two 1-D vectors of one length, got {p.shape}, {q.shape}"
        )
    if np.any(p < 0) or np.any(q < 0) or not (p.sum() > 0 and q.sum() > 0):
        raise InvalidParameterError(
            "JSD needs non-negative vectors with a positive sum (an empty histogram has no "
            "distribution: every value fell outside the bins)"
        )
    p = p / p.sum()
    q = q / q.sum()
    m = (p + q) / 2
    return float(0.5 * _kl(p, m) + 0.5 * _kl(q, m))


def _kl(p: np.ndarray, m: np.ndarray) -> float:
    nz = p > 0  # 0 log 0 = 0; m > 0 wherever p > 0
    return float(np.sum(p[nz] * np.log(p[nz] / m[nz])))


@dataclass(frozen=True)
class MetricBins:
    """The histograms of one evaluation mode (see `udfs.mobility` for the definitions).

    `dailyloc_divisor` turns a day's number of distinct locations k into the binned value
    k / dailyloc_divisor (paper: 48, the reference's share of distinct locations; geo: 1).
    """

    mode: str
    distance: HistogramSpec
    radius: HistogramSpec
    dailyloc: HistogramSpec
    dailyloc_divisor: int
    duration: HistogramSpec
    grank: HistogramSpec


def paper_bins(max_distance: float = GEOLIFE_MAX_DISTANCE_DEG2) -> MetricBins:
    """Bins of the PateGail evaluation code (np.arange edges, np.histogram semantics)."""
    if not max_distance > 0:
        raise InvalidParameterError(f"max_distance must be > 0 (degrees^2), got {max_distance}")
    dist = HistogramSpec.arange(0.0, max_distance, 1000)
    return MetricBins(
        mode="paper",
        distance=dist,
        radius=dist,
        dailyloc=HistogramSpec.arange(0.0, 1.0, SLOTS),
        dailyloc_divisor=SLOTS,
        duration=HistogramSpec.arange(1.0, SLOTS + 1.0, SLOTS),
        grank=HistogramSpec.arange(0.0, 1.0, GRANK_TOP_K),
    )


#: Geo mode: width (km) and count of the Distance/Radius bins before the overflow bin.
GEO_KM_BIN_WIDTH = 0.25
GEO_KM_N_BINS = 400


#: Geo mode G-rank edges: [0, 1e-4), then 12 log-spaced bins from 1e-4 to 1, three a decade
#: (last closed). Uniform bins of 0.02 (the paper's) put every top-50 probability of a map with
#: thousands of locations in the first bin (at Telecom scale the largest is about 0.005), so
#: every method scored 0 there; log bins resolve probabilities from 1e-4 up whatever the map's
#: size. Three a decade: on Geolife real.data against test.data scores 0.016 (paper bins
#: 0.037), where 49 log bins scored 0.126 from the sampling noise of 50 values alone.
GEO_GRANK_EDGES = np.r_[0.0, np.geomspace(1e-4, 1.0, 13)]


def geo_bins(width_km: float = GEO_KM_BIN_WIDTH, n_bins: int = GEO_KM_N_BINS) -> MetricBins:
    """Geo-mode bins: uniform km bins plus an overflow bin; one bin per integer count."""
    km = HistogramSpec.uniform(width_km, n_bins)
    per_value = HistogramSpec(np.arange(1.0, SLOTS + 2.0), overflow=False)  # k in [k, k+1)
    return MetricBins(
        mode="geo",
        distance=km,
        radius=km,
        dailyloc=per_value,
        dailyloc_divisor=1,
        duration=per_value,
        grank=HistogramSpec(GEO_GRANK_EDGES, overflow=False),
    )

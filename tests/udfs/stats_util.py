"""Statistical helpers for sampler tests (chi-square GOF, Clopper-Pearson)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def gof_pvalue(counts, probs, min_expected: float = 5.0) -> float:
    """Chi-square goodness-of-fit p-value; cells with expected < min_expected are pooled."""
    counts = np.asarray(counts, float)
    probs = np.asarray(probs, float)
    exp = probs * counts.sum()
    small = exp < min_expected
    if small.any():
        counts = np.r_[counts[~small], counts[small].sum()]
        exp = np.r_[exp[~small], exp[small].sum()]
        if exp[-1] == 0:
            counts, exp = counts[:-1], exp[:-1]
    return float(stats.chisquare(counts, exp * counts.sum() / exp.sum()).pvalue)


def cp_bounds(k, n, alpha):
    """Two-sided Clopper-Pearson interval at level 1 - alpha (vectorised)."""
    k = np.asarray(k, float)
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def max_ratio_lower_bound(c1, c2, n, alpha) -> float:
    """Largest lower confidence bound on p1(o)/p2(o) or p2(o)/p1(o) over outputs o.

    Each ratio bound uses CP intervals at alpha / (2 * #outputs) per side (Bonferroni), so the
    probability that ANY reported bound exceeds the true ratio is <= alpha.
    """
    m = 2 * 2 * max(1, len(c1))
    lo1, hi1 = cp_bounds(c1, n, alpha / m)
    lo2, hi2 = cp_bounds(c2, n, alpha / m)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.maximum(np.where(hi2 > 0, lo1 / hi2, 0), np.where(hi1 > 0, lo2 / hi1, 0))
    return float(np.nanmax(r))

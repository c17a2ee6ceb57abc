"""DP start-location distribution of synthetic days: a coarse-to-fine hierarchy of noisy counts.

Mechanism (central model, `HierarchicalStarts`). A public k-d tree over the location
coordinates (`kd_levels`: median splits on alternating axes; no user data) groups the L
locations into coarse cells above the locations themselves (depths 5 and 9 on Geolife: 32 and
512 cells). Each user contributes its normalised slot-0 histogram (mass 1 in all, however many
days it has) to every level. Every level is released with Laplace noise; the distribution is
built top down: a kept cell's children get its probability in proportion to their soft-
thresholded noisy mass max(noisy - tau * scale, 0); when no child passes, the one with the largest
noisy mass inherits it all. Only children of kept cells are ever looked at, so a few candidates
compete at each step (not all 4,210 cells, as a flat threshold must), and no cell can be kept
unless its ancestors' noisy masses were the largest or passed the threshold.
Guarantee: user-level (replace one user's whole data). Replacing a user moves each level's summed
histogram by at most 2 in L1, so Laplace(2 * levels / epsilon) per cell of a level is
(epsilon / levels)-DP; the levels compose to epsilon (one LaplaceDpEvent per level, multiplier
levels / epsilon). Everything after the noisy counts is post-processing.
Budget: epsilon split equally over the levels.
Local model (`LocalStarts`, for ldp / ldp++): each user adds Laplace(2 / epsilon) to its own
normalised histogram over the coarse cells of depth `ldp_depth` before anything is summed
(epsilon-LDP: two histograms differ by at most 2 in L1); the server sums the reports, soft-
thresholds them and spreads each cell's mass uniformly over its locations (the server never sees
finer positions, so a cell's share cannot follow where in it days start).
Citations: Hay et al. 2010 (hierarchical histograms); Cormode et al. 2012 (differentially private
spatial decompositions); Dwork & Roth 2014 (Laplace mechanism).
Runtime: O(L * levels + days). Utility: a cell's mass is found when it stands about tau noise
scales above zero at its level; mass then concentrates on the start cells inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import numpy as np
import torch

from models.aggregation.base import laplace
from udfs.errors import InvalidParameterError


def kd_codes(coords: np.ndarray, depth: int) -> np.ndarray:
    """(L,) cell codes of a k-d tree of `depth` median splits (lat first, then lon, ...); a cell
    with one location is not split further (its code keeps doubling)."""
    coords = np.asarray(coords, dtype=np.float64)
    n = len(coords)
    code = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    for d in range(depth):
        axis = coords[:, d % 2]
        order = np.lexsort((idx, axis, code))  # by cell, then coordinate (ties by index)
        sorted_code = code[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_code)) + 1]
        sizes = np.diff(np.r_[starts, n])
        first = np.repeat(starts, sizes)
        rank = np.arange(n) - first
        upper = rank >= np.repeat(sizes // 2, sizes)
        upper &= np.repeat(sizes, sizes) > 1
        new = np.empty(n, dtype=np.int64)
        new[order] = 2 * sorted_code + upper
        code = new
    return code


def kd_levels(coords: np.ndarray, depths: tuple[int, ...] | None = None) -> list[np.ndarray]:
    """Cell ids (0..G-1, dense) of each location at each level, coarse to fine; the last level
    is the locations themselves. Default depths: 5, 9, ... while a level's cells hold 2 or more
    locations on average (measured on Geolife, bench/reproduce_pategail.py --starts-only)."""
    n = len(coords)
    if depths is None:
        depths = tuple(d for d in range(5, 64, 4) if n / 2 ** d >= 2)
    levels = []
    for d in depths:
        _, dense = np.unique(kd_codes(coords, d), return_inverse=True)
        levels.append(dense.astype(np.int64))
    levels.append(np.arange(n, dtype=np.int64))
    return levels


def start_mass(days_per_user: list[np.ndarray], n_locations: int) -> torch.Tensor:
    """(L,) sum over users of each user's normalised slot-0 histogram (what ranks all-reduce)."""
    hist = torch.zeros(n_locations, dtype=torch.float64)
    for days in days_per_user:  # setup-time loop over users, O(days)
        starts = torch.as_tensor(np.asarray(days)[:, 0], dtype=torch.long)
        hist += torch.bincount(starts, minlength=n_locations).double() / len(starts)
    return hist


def _split(parent_p: np.ndarray, parent_of: np.ndarray, noisy: np.ndarray, thr: float
           ) -> np.ndarray:
    """Probabilities of the children (noisy: (C,)) of parents with probabilities parent_p."""
    live = parent_p[parent_of] > 0
    w = np.where(live, np.maximum(noisy - thr, 0.0), 0.0)
    tot = np.bincount(parent_of, weights=w, minlength=len(parent_p))
    out = np.zeros(len(noisy))
    pos = tot[parent_of] > 0
    out[pos] = parent_p[parent_of[pos]] * w[pos] / tot[parent_of[pos]]
    # kept parents whose children all fell below the threshold: the largest child inherits
    lost = (parent_p > 0) & (tot <= 0)
    if lost.any():
        cand = np.flatnonzero(lost[parent_of])
        order = cand[np.lexsort((-noisy[cand], parent_of[cand]))]  # per parent, largest first
        firsts = order[np.r_[True, np.diff(parent_of[order]) != 0]]
        out[firsts] = parent_p[parent_of[firsts]]
    return out


def spread(levels: list[np.ndarray], noisy: list[torch.Tensor], thresholds: list[float]
           ) -> torch.Tensor:
    """Top-down post-processing of noisy level counts into (L,) probabilities."""
    p = np.ones(1)
    parent = np.zeros(len(levels[0]), dtype=np.int64)  # every top cell's parent is the root
    for lvl, nz, thr in zip(levels, noisy, thresholds, strict=True):
        parent_of = np.zeros(int(lvl.max()) + 1, dtype=np.int64)
        parent_of[lvl] = parent
        p = _split(p, parent_of, nz.double().numpy(), thr)
        parent = lvl
    return torch.as_tensor(p / p.sum())


def level_sums(mass: torch.Tensor, levels: list[np.ndarray]) -> list[torch.Tensor]:
    return [torch.zeros(int(lv.max()) + 1, dtype=torch.float64)
            .index_add_(0, torch.as_tensor(lv), mass) for lv in levels]


@dataclass(frozen=True)
class HierarchicalStarts:
    epsilon: float
    n_levels: int
    tau: float = 2.0

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or self.n_levels < 1 or self.tau < 0:
            raise InvalidParameterError(
                f"start distribution: need epsilon > 0, levels >= 1, tau >= 0; got "
                f"{self.epsilon}, {self.n_levels}, {self.tau}")

    @property
    def scale(self) -> float:
        """Laplace scale per cell of every level (L1 sensitivity 2, epsilon / levels each)."""
        return 2.0 * self.n_levels / self.epsilon

    def events(self) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.LaplaceDpEvent(self.n_levels / self.epsilon), self.n_levels)

    def release(self, mass: torch.Tensor, levels: list[np.ndarray], *, gen: torch.Generator,
                spend: Callable[[dp_accounting.DpEvent], object]) -> torch.Tensor:
        """mass: (L,) summed normalised start histograms; returns (L,) probabilities."""
        if len(levels) != self.n_levels:
            raise InvalidParameterError(f"{len(levels)} levels given, {self.n_levels} planned")
        spend(self.events())
        sums = level_sums(mass.double(), levels)
        noisy = [s + self.scale * laplace(tuple(s.shape), gen) for s in sums]
        return spread(levels, noisy, [self.tau * self.scale] * self.n_levels)


@dataclass(frozen=True)
class LocalStarts:
    epsilon: float
    tau: float = 1.0

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or self.tau < 0:
            raise InvalidParameterError(f"local start reports: need epsilon > 0, tau >= 0; got "
                                        f"{self.epsilon}, {self.tau}")

    @property
    def scale(self) -> float:
        return 2.0 / self.epsilon

    def event(self) -> dp_accounting.DpEvent:
        return dp_accounting.LaplaceDpEvent(1.0 / self.epsilon)

    def reports(self, days_per_user: list[np.ndarray], cells: np.ndarray, noise_rows: torch.Tensor
                ) -> torch.Tensor:
        """(A, G) perturbed reports of A users (user side); noise_rows: their (A, G) standard
        Laplace rows."""
        g = noise_rows.shape[1]
        own = torch.stack([torch.bincount(torch.as_tensor(cells[np.asarray(d)[:, 0]]),
                                          minlength=g).double() / len(d)
                           for d in days_per_user]) if days_per_user else torch.zeros(0, g)
        return own + self.scale * noise_rows

    def estimate(self, report_sum: torch.Tensor, n_users: int, cells: np.ndarray) -> torch.Tensor:
        """Server side: (L,) probabilities from the summed reports of n_users users: cells
        soft-thresholded at tau standard deviations of the summed noise, each cell's share
        spread uniformly over its locations."""
        sd = self.scale * float(np.sqrt(2 * n_users))
        coarse = spread([cells], [report_sum], [self.tau * sd]).numpy()
        per_loc = coarse[cells] / np.bincount(cells)[cells]
        return torch.as_tensor(per_loc / per_loc.sum())


def start_jsd(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon divergence (natural log) of two distributions over locations."""
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    q = np.asarray(q, dtype=np.float64) / np.sum(q)
    m = (p + q) / 2

    def kl(a: np.ndarray) -> float:
        nz = a > 0
        return float(np.sum(a[nz] * np.log(a[nz] / m[nz])))

    return 0.5 * kl(p) + 0.5 * kl(q)

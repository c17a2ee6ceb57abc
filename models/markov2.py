"""An adaptive second-order DP Markov generator: the first-order chain of `models.markov`, whose
moves go to the next coarse cell by (cell of the place before, current cell) where the released
counts support it, and by the current cell alone elsewhere (PrivTrace's idea, Wang et al. 2023).

Model. Everything of `models.markov` (start hierarchy, action table, (G, G) move cells,
destination hierarchy), plus one release: the (G, G, G) table of MOVEs by (cell of the place
before, current cell, next cell). "The place before" is the location held just before the
current stay began (the day's first place has none: its moves use the first-order row). At
sampling, a move from (b, c) uses row (b, c) of the second-order table where that row's noisy
total clears `threshold` times its noise sd (sd sqrt(G)), and where, after the soft threshold of
`models.markov` (each count minus `tau` sds, clipped at 0), some mass is left; else the
first-order row of c. Why cells and not locations: a (L, L, L) table is 7e10 counts at
Geolife's L = 4,210; (G, G, G) at G = 32 is 32,768, and the rows that matter (where people go
next depends on where they came from: to work and back, A -> B -> C against D -> B -> E) hold
most of the moves.

Guarantee: user-level, replace one user's whole data (as `models.markov`). The releases are
those of `models.markov` (its docstring: starts, actions, transitions, destinations, each a
per-user normalised statistic), and
  second        its (G, G, G) second-order move counts / (its number of moves     L1 2, L2 sqrt(2)
                with a place before)
(a non-negative vector of L1 mass <= 1 per user, so replacing the user moves the sum by <= 2 in
L1 and <= sqrt(2) in L2). Noise: Gaussian N(0, (m Delta2)^2) or Laplace(m Delta1) per cell, one
GaussianDpEvent(m) / LaplaceDpEvent(m) for the release, beside the first-order releases' events.
Budget: the second-order release takes the share `second_share` w2; the first-order components
keep their `SHARES` scaled by 1 - w2, so the shares still sum to 1 and `markov.calibrate` finds
the smallest scale s whose accounted epsilon stays <= the target (Gaussian: the releases compose
to exactly one Gaussian of multiplier s). Everything after the noisy counts (the row choice by
`threshold`, soft thresholds, normalisation, the fallback to first order, sampling) reads only
the released tables: post-processing. So the model is (epsilon, delta)-DP at the spent epsilon
by composition of the releases, whatever `threshold` and `tau` are.
Citations: Wang, Yang, Kotsogiannis, Hay, Machanavajjhala, Li, "PrivTrace: Differentially private
trajectory synthesis by adaptive Markov model" (USENIX Security 2023); Chen et al. 2012.
Runtime: fit as `models.markov` plus O(days * 48 + G^3); sample as `models.markov`.
Utility: each first-order release gets 1 / sqrt(1 - w2) times the noise sd of `models.markov`
at the same epsilon (w2 = 0.2: 12% more); the second-order rows help where moves depend on the
place before and their mass stands above the noise.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass

import numpy as np

from models.accounting import PrivacyAccountant
from models.config import MECHANISMS, MarkovSettings
from models.markov import (
    MOVE,
    SHARES,
    MarkovModel,
    Plan,
    Stats,
    _model_of,
    add_stats,
    calibrate,
    fit_markov,
    label_actions,
    move_cells,
    noised,
    perturb,
    user_stats,
)
from models.starts import kd_levels
from udfs.errors import InvalidParameterError

SECOND = "second"  # the release's name in the plan
SENSITIVITY2 = (2.0, math.sqrt(2.0))  # L1, L2 of one user's normalised second-order counts
# the accountant's default has one home: `markov.fit_markov`'s keyword
_ACCOUNTANT = inspect.signature(fit_markov).parameters["accountant"].default


@dataclass(frozen=True)
class Markov2Settings:
    """The release's settings: the first-order release's (`models.config.MarkovSettings`:
    noise, move-cell depth, soft threshold `tau` in noise sds, action-table pooling), the
    accountant, the second-order release's budget share and the row threshold (in sds of a
    row's noisy total). Utility choices only."""

    first: MarkovSettings = MarkovSettings()
    accountant: str = _ACCOUNTANT
    second_share: float = 0.2
    threshold: float = 3.0

    def __post_init__(self) -> None:
        if self.first.mechanism not in MECHANISMS:
            raise InvalidParameterError(f"mechanism must be one of {MECHANISMS}; got "
                                        f"{self.first.mechanism}")
        if not 0 < self.second_share < 1 or not self.threshold >= 0:
            raise InvalidParameterError(f"need 0 < second_share < 1 and threshold >= 0; got "
                                        f"{self.second_share}, {self.threshold}")


def shares_of(second_share: float) -> tuple[tuple[str, float], ...]:
    """The plan's shares: `markov.SHARES` scaled by 1 - w2, then the second-order w2."""
    return (*((k, w * (1 - second_share)) for k, w in SHARES.items()), (SECOND, second_share))


def place_before(days: np.ndarray) -> np.ndarray:
    """(n, 48): the location held just before the stay that slot t belongs to began (-1 in the
    day's first stay)."""
    d = np.asarray(days)
    slot = np.arange(d.shape[1])
    new = np.ones(d.shape, bool)
    new[:, 1:] = d[:, 1:] != d[:, :-1]
    began = np.maximum.accumulate(np.where(new, slot, 0), axis=1)
    return np.where(began > 0, np.take_along_axis(d, np.maximum(began - 1, 0), 1), -1)


def second_moves(days: np.ndarray, cell_of: np.ndarray) -> np.ndarray:
    """(k, 3) (cell before, current cell, next cell) of each MOVE that has a place before."""
    d = np.asarray(days, dtype=np.int64)
    act = label_actions(d)[0]
    before = place_before(d)[:, :-1]
    keep = (act == MOVE) & (before >= 0)
    return np.column_stack([cell_of[before[keep]], cell_of[d[:, :-1][keep]],
                            cell_of[d[:, 1:][keep]]])


@dataclass(frozen=True)
class Stats2:
    """The first-order statistics and the summed per-user normalised second-order table."""

    first: Stats
    second: np.ndarray  # (G, G, G)


def user_stats2(days_per_user: list[np.ndarray], cell_of: np.ndarray, n_loc: int) -> Stats2:
    """`markov.user_stats`, and the sum over users of each user's second-order move counts
    divided by its number of such moves (mass 1 per user with any)."""
    g = int(cell_of.max()) + 1
    second = np.zeros((g, g, g))
    for days in days_per_user:
        moves = second_moves(days, cell_of)
        if len(moves):
            np.add.at(second, tuple(moves.T), 1 / len(moves))
    return Stats2(user_stats(days_per_user, cell_of, n_loc), second)


def add_stats2(a: Stats2, b: Stats2) -> Stats2:
    """The sum of two partial sums over disjoint users."""
    return Stats2(add_stats(a.first, b.first), a.second + b.second)


@dataclass(frozen=True)
class Markov2Model(MarkovModel):
    # (G, G, G): P(next cell | cell before, current cell): the first-order row where unused
    cell_trans2: np.ndarray | None = None
    second_used: np.ndarray | None = None  # (G, G): the rows that cleared the threshold

    TABLES = (*MarkovModel.TABLES, "cell_trans2", "second_used")

    def move_probs(self, loc: np.ndarray, before: np.ndarray) -> np.ndarray:
        cur = self.cell_of[loc]
        rows = self.cell_trans[cur]
        has = before >= 0
        if has.any():
            rows = rows.copy()
            rows[has] = self.cell_trans2[self.cell_of[before[has]], cur[has]]
        return rows

    def first_order(self) -> MarkovModel:
        """The first-order chain of the same release (its moves ignore the place before)."""
        return MarkovModel(*(getattr(self, name) for name in MarkovModel.TABLES),
                           accountant=self.accountant)


def second_rows(noisy: np.ndarray, sd: float, first: np.ndarray, threshold: float, tau: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """(cell_trans2, used) from the noisy (G, G, G) table of noise sd `sd`: row (b, c) is used
    where its noisy total exceeds threshold * sd * sqrt(G) and mass is left after the soft
    threshold; elsewhere it is the first-order row `first[c]`. Post-processing."""
    g = noisy.shape[0]
    kept = np.clip(noisy - tau * sd, 0, None)
    mass = kept.sum(-1)
    used = (noisy.sum(-1) > threshold * sd * math.sqrt(g)) & (mass > 0)
    rows = kept / np.where(mass > 0, mass, 1.0)[..., None]
    return np.where(used[..., None], rows, first[None]), used


def fit_markov2(days_per_user: list[np.ndarray], coords: np.ndarray, epsilon: float,
                delta: float, seed: int, settings: Markov2Settings = Markov2Settings()
                ) -> Markov2Model:
    """Release the model's statistics at (epsilon, delta) (see the module docstring)."""
    if not days_per_user:
        raise InvalidParameterError("no users")
    cell_of = move_cells(coords, settings.first.cell_depth)
    stats = user_stats2(days_per_user, cell_of, len(coords))
    return release_markov2(stats, coords, cell_of, epsilon, delta, seed, settings)


def release_markov2(stats: Stats2, coords: np.ndarray, cell_of: np.ndarray, epsilon: float,
                    delta: float, seed: int, settings: Markov2Settings) -> Markov2Model:
    """Noise the summed statistics (`user_stats2`, summed over disjoint users with
    `add_stats2`) once, charged before any noise is drawn, and build the model."""
    if not (0 < epsilon < math.inf and 0 < delta < 1):
        raise InvalidParameterError(f"need 0 < epsilon < inf and 0 < delta < 1; got {epsilon}, "
                                    f"{delta}")
    s, f = settings, settings.first
    levels = kd_levels(np.asarray(coords, dtype=np.float64))
    plan = calibrate(f.mechanism, len(levels), epsilon, delta, s.accountant,
                     shares=shares_of(s.second_share))
    acc = PrivacyAccountant(delta, epsilon, s.accountant)
    acc.spend(plan.events())  # checked before any noise is drawn
    noisy = perturb2(stats, plan, levels, np.random.default_rng(seed))
    second, sd = noisy.pop(SECOND)
    first = _model_of(noisy, levels, cell_of, f.tau, f.smooth, {})
    trans2, used = second_rows(second, sd, first.cell_trans, s.threshold, f.tau)
    summary = {**acc.summary(), "mechanism": f.mechanism, "scale": plan.scale,
               "second_share": s.second_share, "second_rows_used": int(used.sum())}
    tables = {f.name: getattr(first, f.name) for f in dataclasses.fields(first)}
    return Markov2Model(**{**tables, "accountant": summary}, cell_trans2=trans2, second_used=used)


def perturb2(stats: Stats2, plan: Plan, levels: list[np.ndarray], rng: np.random.Generator
             ) -> dict[str, tuple[np.ndarray, float]]:
    """Every release of `plan`: `markov.perturb`'s (name -> (noisy vector, noise sd)), then
    `second`, the second-order table with the noise of its multiplier and `SENSITIVITY2`."""
    noisy = perturb(stats.first, plan, levels, rng)
    noisy[SECOND] = noised(stats.second, plan.multipliers()[SECOND], SENSITIVITY2,
                           plan.mechanism, rng)
    return noisy

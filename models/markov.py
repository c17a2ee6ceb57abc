"""A DP first-order Markov generator of 48-slot days: the simple baseline private synthesis must
beat.

Model. A day starts at home h = x_0 (drawn from a start distribution) and takes one of four
actions per transition t -> t+1 (47 a day), with probabilities P(a | t, at home, can return)
from a table of (47, 2, 2, 4) ("can return": some place other than home and the current one was
visited earlier that day, so RETURN is possible): STAY (same location), HOME
(back to h; only when away), RETURN (to a place visited earlier that day other than h and the
current one, in proportion to the slots spent there: the environment's RETURN), MOVE (to a
place new that day: a coarse destination cell c' ~ P(c' | cell(x_t)), then a location
x ~ P(x | c') inside it, redrawn while it was visited already, up to `MOVE_TRIES` times).
The chain is first order in (location, home, places seen today).
Public reduction, and why: a location-to-location table per slot is 48 x L x L = 8.5e8 counts
at Geolife's L = 4,210, against 83 users' ~5,600 days: almost every count would be noise. Three
things carry most of a day's shape and are small: when people stay, go home, go back or move on
(47 x 2 x 2 x 4), where a move goes at a coarse scale (the cells of the public k-d tree of
`models.starts`, depth `cell_depth`: 32 cells on Geolife, a 32 x 32 table pooled over slots) and
where inside a cell (the noisy destination counts of the public k-d hierarchy, released top down
like the start distribution). Going home and going back are symbols of their own because days
start and end at home and revisit few places; a location-level chain would have to learn each
user's places from noise.

Guarantee: user-level, replace one user's whole data (as `HierarchicalStarts`). Each user
contributes normalised statistics, so a user's influence is bounded however many days it has:
  starts        its slot-0 histogram / n_u, at every level of the hierarchy  L1 2, L2 sqrt(2)
                per level
  actions       its (47, 2, 2, 4) action counts / n_u (mass 1 per slot)       L1 94, L2 sqrt(94)
  transitions   its (G, G) move counts / (its number of moves)                L1 2, L2 sqrt(2)
  destinations  its move-destination histogram / (its moves), every level     L1 2, L2 sqrt(2)
                per level
(two non-negative vectors of L1 mass <= 1 differ by <= 2 in L1 and <= sqrt(2) in L2; the action
table is 47 such slots). Noise: Gaussian N(0, (m_k Delta2_k)^2) or Laplace(m_k Delta1_k) per
cell of release k, recorded as one GaussianDpEvent(m_k) / LaplaceDpEvent(m_k) per release (the
Laplace convention of `HierarchicalStarts`: a vector with L1 sensitivity Delta1 and Laplace
scale b is charged as LaplaceDpEvent(b / Delta1)). Everything after the noisy counts
(thresholds, smoothing over neighbouring slots, normalisation, fallbacks) is post-processing.
Budget: release k gets the share w_k of the total (`SHARES`, split equally over a component's
levels): Gaussian 1/m_k^2 = w_k / s^2 (the releases compose to exactly one Gaussian of
multiplier s), Laplace 1/m_k = w_k / s (pure epsilon 1/s); s is the smallest scale whose
accounted epsilon (`PrivacyAccountant`, grid rounding toward larger epsilon) stays <= epsilon,
found by bisection on log s, so the spent epsilon equals the target up to the grid.
Citations: Chen et al. 2012 (DP n-gram / Markov models of sequences); Hay et al. 2010
(hierarchical histograms); Dwork & Roth 2014.
Runtime: fit O(days * 48 + L * levels + G^2) plus a bisection of ~40 accountant calls; sample
O(n * 48 * (G + log L)). Utility: the start, stay/home/move timing and coarse moves are learnt;
no day-level memory beyond home (a day may revisit places only by chance or by going home).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import dp_accounting
import numpy as np
import torch

from models.accounting import PrivacyAccountant
from models.config import MarkovSettings
from models.env import SLOTS
from models.starts import kd_levels, level_sums, spread
from udfs.errors import InvalidParameterError

STAY, HOME, RETURN, MOVE = 0, 1, 2, 3
N_ACT = 4
T = SLOTS - 1
# budget shares of the four components (utility choice; the guarantee holds for any shares)
SHARES = {"starts": 0.15, "actions": 0.35, "transitions": 0.25, "destinations": 0.25}
LEVELLED = ("starts", "destinations")  # released at every level of the k-d hierarchy
DEFAULT_SETTINGS = MarkovSettings()
MOVE_TRIES = 8  # draws of a MOVE's place before a visited one is accepted


def label_actions(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(n, 47) each: the action of each transition t -> t+1 (STAY: same location; HOME: to the
    slot-0 location; RETURN: to another location visited earlier that day; MOVE: to a location
    new that day), whether slot t is at home, and whether RETURN was possible at t."""
    d = np.asarray(days)
    cur, nxt, home = d[:, :-1], d[:, 1:], d[:, :1]
    seen = np.stack([(d[:, :t + 1] == d[:, t + 1:t + 2]).any(1) for t in range(T)], 1)
    can = np.stack([((d[:, :t + 1] != home) & (d[:, :t + 1] != d[:, t:t + 1])).any(1)
                    for t in range(T)], 1)
    act = np.where(nxt == cur, STAY, np.where(nxt == home, HOME, np.where(seen, RETURN, MOVE)))
    return act, cur == home, can


@dataclass(frozen=True)
class Stats:
    """Summed per-user normalised statistics (the released vectors, before noise)."""

    starts: np.ndarray  # (L,)
    actions: np.ndarray  # (47, 2, 2, 4)
    transitions: np.ndarray  # (G, G)
    destinations: np.ndarray  # (L,)


def user_stats(days_per_user: list[np.ndarray], cell_of: np.ndarray, n_loc: int) -> Stats:
    """Sum over users of each user's normalised contribution (see the module docstring)."""
    g = int(cell_of.max()) + 1
    starts, dest = np.zeros(n_loc), np.zeros(n_loc)
    actions, trans = np.zeros((T, 2, 2, N_ACT)), np.zeros((g, g))
    slot = np.broadcast_to(np.arange(T), (1, T))
    for days in days_per_user:  # O(days) per user
        d = np.asarray(days, dtype=np.int64)
        n = len(d)
        starts += np.bincount(d[:, 0], minlength=n_loc) / n
        act, home, can = label_actions(d)
        np.add.at(actions, (np.broadcast_to(slot, act.shape), home.astype(np.int64),
                            can.astype(np.int64), act), 1 / n)
        mv = act == MOVE
        k = int(mv.sum())
        if k:
            src, dst = cell_of[d[:, :-1][mv]], d[:, 1:][mv]
            np.add.at(trans, (src, cell_of[dst]), 1 / k)
            dest += np.bincount(dst, minlength=n_loc) / k
    return Stats(starts, actions, trans, dest)


@dataclass(frozen=True)
class Plan:
    """Per-release noise multipliers at scale s, and their dp_accounting events."""

    mechanism: str
    scale: float
    n_levels: int
    # (component, share) pairs summing to 1; another model adds releases of its own
    shares: tuple[tuple[str, float], ...] = tuple(SHARES.items())

    def multipliers(self) -> dict[str, float]:
        """Multiplier of each release: component share split over its levels."""
        out = {}
        for name, w in self.shares:
            per = self.n_levels if name in LEVELLED else 1
            share = w / per
            m = self.scale / (math.sqrt(share) if self.mechanism == "gaussian" else share)
            for i in range(per):
                out[f"{name}{i}" if name in LEVELLED else name] = m
        return out

    def events(self) -> dp_accounting.DpEvent:
        ev = (dp_accounting.GaussianDpEvent if self.mechanism == "gaussian"
              else dp_accounting.LaplaceDpEvent)
        return dp_accounting.ComposedDpEvent([ev(m) for m in self.multipliers().values()])


def _accounted(plan: Plan, delta: float, method: str) -> float:
    acc = PrivacyAccountant(delta, None, method)
    acc.spend(plan.events())
    return acc.epsilon()


def calibrate(mechanism: str, n_levels: int, epsilon: float, delta: float, method: str,
              rel_tol: float = 1e-4, shares: tuple[tuple[str, float], ...] = Plan.shares) -> Plan:
    """The smallest scale s (bisection on log s) whose accounted epsilon is <= epsilon."""
    lo, hi = 1e-6, 1.0
    while _accounted(Plan(mechanism, hi, n_levels, shares), delta, method) > epsilon:
        lo, hi = hi, hi * 10
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if _accounted(Plan(mechanism, mid, n_levels, shares), delta, method) > epsilon:
            lo = mid
        else:
            hi = mid
    return Plan(mechanism, hi, n_levels, shares)


@dataclass(frozen=True)
class MarkovModel:
    start_probs: np.ndarray  # (L,)
    # (47, 2, 2, 4): P(STAY, HOME, RETURN, MOVE | slot, at home, RETURN possible)
    action_probs: np.ndarray
    cell_of: np.ndarray  # (L,) public coarse cell of each location
    cell_trans: np.ndarray  # (G, G): P(destination cell | current cell) of a move
    within: np.ndarray  # (L,): P(location | its cell) of a move's destination
    accountant: dict = field(default_factory=dict)  # summary of the spent budget

    @property
    def epsilon(self) -> float:
        return float(self.accountant.get("epsilon", 0.0))

    # the released tables, in field order: what a saved model holds (jobs/train/markov.py)
    TABLES = ("start_probs", "action_probs", "cell_of", "cell_trans", "within")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """(n, 48) int64 synthetic days (post-processing of the released tables)."""
        n_loc, g = len(self.cell_of), self.cell_trans.shape[0]
        order = np.argsort(self.cell_of, kind="stable")  # locations grouped by cell
        cells = self.cell_of[order]
        first = np.searchsorted(cells, np.arange(g), "left")
        last = np.searchsorted(cells, np.arange(g), "right") - 1
        cum_within = np.cumsum(self.within[order])  # each cell sums to 1: cell c spans (c, c+1]
        days = np.empty((n, SLOTS), dtype=np.int64)
        loc = rng.choice(n_loc, size=n, p=self.start_probs)
        home = loc.copy()
        before = np.full(n, -1)  # the place before the current one (-1: none yet today)
        days[:, 0] = loc
        rows = np.arange(n)
        for t in range(T):
            past = days[:, :t + 1]
            back = (past != home[:, None]) & (past != loc[:, None])  # RETURN candidates
            p = self.action_probs[t, (loc == home).astype(np.int64), back.any(1).astype(np.int64)]
            a = (rng.random(n)[:, None] >= np.cumsum(p, 1)).sum(1).clip(max=MOVE)
            nxt = loc.copy()
            nxt[a == HOME] = home[a == HOME]
            r = np.flatnonzero(a == RETURN)  # a past slot, uniformly among the candidates
            if r.size:
                pick = np.argmax(rng.random((r.size, t + 1)) * back[r], axis=1)
                nxt[r] = past[r, pick]
            mv = np.flatnonzero(a == MOVE)
            if mv.size:
                cum = np.cumsum(self.move_probs(loc[mv], before[mv]), axis=1)
                dst = (rng.random(mv.size)[:, None] >= cum).sum(1).clip(max=g - 1)
                todo = np.arange(mv.size)  # a MOVE goes somewhere new: redraw visited places
                for _ in range(MOVE_TRIES):
                    i = np.searchsorted(cum_within, dst[todo] + rng.random(todo.size), "right")
                    nxt[mv[todo]] = order[np.clip(i, first[dst[todo]], last[dst[todo]])]
                    todo = todo[(past[mv[todo]] == nxt[mv[todo], None]).any(1)]
                    if not todo.size:
                        break
            before = np.where(nxt != loc, loc, before)
            days[rows, t + 1] = loc = nxt
        return days

    def move_probs(self, loc: np.ndarray, before: np.ndarray) -> np.ndarray:
        """(k, G) P(destination cell) of k moves from `loc`; `before` (the place before each,
        -1 if none) is for a higher-order chain (models/markov2.py): a first-order chain's row
        is its current cell's."""
        return self.cell_trans[self.cell_of[loc]]


def _normalise_rows(x: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    tot = x.sum(-1, keepdims=True)
    return np.where(tot > 0, x / np.where(tot > 0, tot, 1.0), fallback)


def _within(dest_p: np.ndarray, cell_of: np.ndarray) -> np.ndarray:
    """P(location | cell) from a (L,) distribution; a cell with no mass: uniform inside it."""
    g = int(cell_of.max()) + 1
    tot = np.bincount(cell_of, weights=dest_p, minlength=g)
    size = np.bincount(cell_of, minlength=g)
    return np.where(tot[cell_of] > 0, dest_p / np.where(tot > 0, tot, 1.0)[cell_of],
                    1.0 / size[cell_of])


def move_cells(coords: np.ndarray, cell_depth: int = 5) -> np.ndarray:
    """(L,) public coarse cell of each location: the k-d tree of `models.starts` at depth
    `cell_depth`, capped so cells hold >= 2 locations on average."""
    n_loc = len(coords)
    depth = max(1, min(cell_depth, int(math.log2(max(2, n_loc // 2)))))
    return kd_levels(np.asarray(coords, dtype=np.float64), (depth,))[0]


def add_stats(a: Stats, b: Stats) -> Stats:
    """The sum of two partial sums (users are disjoint: the sums add)."""
    return Stats(a.starts + b.starts, a.actions + b.actions, a.transitions + b.transitions,
                 a.destinations + b.destinations)


def fit_markov(days_per_user: list[np.ndarray], coords: np.ndarray, epsilon: float,
               delta: float, seed: int, *, settings: MarkovSettings = DEFAULT_SETTINGS,
               accountant: str = "rdp") -> MarkovModel:
    """Release the model's statistics at (epsilon, delta) (see the module docstring) with the
    release's `settings` (`models.config.MarkovSettings`: the noise, the move cells' depth,
    capped so cells hold >= 2 locations on average, the soft threshold and the pooling)."""
    if not days_per_user:
        raise InvalidParameterError("no users")
    cell_of = move_cells(coords, settings.cell_depth)
    stats = user_stats(days_per_user, cell_of, len(coords))
    return release_markov(stats, coords, cell_of, epsilon, delta, seed, settings=settings,
                          accountant=accountant)


def release_markov(stats: Stats, coords: np.ndarray, cell_of: np.ndarray, epsilon: float,
                   delta: float, seed: int, *, settings: MarkovSettings = DEFAULT_SETTINGS,
                   accountant: str = "rdp",
                   spend: Callable[[dp_accounting.DpEvent], float] | None = None) -> MarkovModel:
    """Noise the summed per-user statistics (`user_stats`, summed over disjoint sets of users
    with `add_stats`) and build the model: the only step that sees private data, so a
    distributed fit sums the statistics where the users are and releases once here.
    `spend`: charge the release's events to a caller's accountant (private pre-training
    composes it with the rounds) instead of a fresh one; either way the release is calibrated
    to cost at most `epsilon` on its own and is charged before any noise is drawn. The
    cells `cell_of` are the caller's (`move_cells`), so `settings.cell_depth` is not read here."""
    mechanism, tau, smooth = settings.mechanism, settings.tau, settings.smooth
    if mechanism not in ("gaussian", "laplace"):
        raise InvalidParameterError(f"mechanism must be 'gaussian' or 'laplace'; got {mechanism}")
    if not 0 < epsilon < math.inf or not 0 < delta < 1:
        raise InvalidParameterError(f"need 0 < epsilon < inf and 0 < delta < 1; got {epsilon}, "
                                    f"{delta}")
    coords = np.asarray(coords, dtype=np.float64)
    levels = kd_levels(coords)
    plan = calibrate(mechanism, len(levels), epsilon, delta, accountant)
    acc = PrivacyAccountant(delta, epsilon, accountant)
    acc.spend(plan.events())  # checked before any noise is drawn
    if spend is not None:
        spend(plan.events())  # the caller's ledger, checked against its own target
    noisy = perturb(stats, plan, levels, np.random.default_rng(seed))
    return _model_of(noisy, levels, cell_of, tau, smooth,
                     {**acc.summary(), "mechanism": mechanism, "scale": plan.scale})


def _model_of(noisy: dict, levels: list[np.ndarray], cell_of: np.ndarray, tau: float,
              smooth: int, accountant: dict) -> MarkovModel:
    """Post-processing of the noisy releases into the model's probability tables."""

    def hierarchy(name: str) -> np.ndarray:
        ys = [torch.as_tensor(noisy[f"{name}{i}"][0]) for i in range(len(levels))]
        return spread(levels, ys, [tau * noisy[f"{name}{i}"][1]
                                   for i in range(len(levels))]).numpy()

    start_p, dest_p = hierarchy("starts"), hierarchy("destinations")
    act = np.clip(noisy["actions"][0], 0, None)
    act[:, 1, :, HOME] = 0.0  # impossible actions (post-processing): HOME at home,
    act[:, :, 0, RETURN] = 0.0  # RETURN with nothing to return to
    pooled = np.stack([act[max(0, t - smooth):t + smooth + 1].sum(0) for t in range(T)])
    overall = _normalise_rows(act.sum(0), np.eye(N_ACT)[STAY])
    act_p = _normalise_rows(pooled, overall[None])
    tr, sd = noisy["transitions"]
    kept = np.clip(tr - tau * sd, 0, None)
    g = kept.shape[0]
    # a row with nothing above the noise: the cells of the released destination distribution
    marg = _normalise_rows(np.bincount(cell_of, weights=dest_p, minlength=g), np.full(g, 1 / g))
    trans_p = _normalise_rows(kept, marg[None])
    return MarkovModel(start_p, act_p, cell_of, trans_p, _within(dest_p, cell_of), accountant)


# L1 and L2 sensitivity of each release under replacing one user (module docstring)
SENSITIVITY = {"starts": (2.0, math.sqrt(2.0)), "actions": (2.0 * T, math.sqrt(2.0 * T)),
               "transitions": (2.0, math.sqrt(2.0)), "destinations": (2.0, math.sqrt(2.0))}


def perturb(stats: Stats, plan: Plan, levels: list[np.ndarray], rng: np.random.Generator
            ) -> dict[str, tuple[np.ndarray, float]]:
    """Every release of `plan`: name -> (noisy vector, noise sd). The hierarchies are released
    per level (`starts0`, `starts1`, ...); Gaussian sd m * Delta2, Laplace scale m * Delta1."""
    mult = plan.multipliers()
    exact = {"actions": stats.actions, "transitions": stats.transitions}
    for name in LEVELLED:
        for i, s in enumerate(level_sums(torch.as_tensor(getattr(stats, name)), levels)):
            exact[f"{name}{i}"] = s.numpy()
    return {key: noised(x, mult[key], SENSITIVITY[key.rstrip("0123456789")], plan.mechanism, rng)
            for key, x in exact.items()}


def noised(x: np.ndarray, m: float, sensitivity: tuple[float, float], mechanism: str,
           rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """(x + noise, noise sd) of one release of multiplier m and (L1, L2) `sensitivity`:
    Gaussian sd m * Delta2, Laplace scale m * Delta1 (sd sqrt(2) times the scale)."""
    d1, d2 = sensitivity
    if mechanism == "gaussian":
        return x + m * d2 * rng.standard_normal(x.shape), m * d2
    return x + rng.laplace(0.0, m * d1, x.shape), math.sqrt(2) * m * d1

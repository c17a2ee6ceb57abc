"""Budget plan of LDP collection, vectorised over users (pure pandas/numpy, no pyspark).

Why a module of its own: planning decides which trajectories may spend budget, before any noise
is drawn (docs/architecture.md section 9, "plan, then spend"). A walk over every trajectory with
`fractions.Fraction` would dominate the stage at scale, so here the only exact (Fraction)
arithmetic is per (user, window) that has prior ledger
spend; every per-trajectory quantity is integer arithmetic on numpy arrays.

Rules (docs/architecture.md section 4, privacy rules of collection):
- Budget windows are fixed calendar blocks of `window_days` days starting on Monday
  1970-01-05 (so windows never depend on which dates a run happens to collect).
- Spend composes sequentially within a window: a valid trajectory is released when
  ``prior + released_before * cost + cost <= user_budget``, evaluated exactly on the float
  values (nothing rounded in the user's disfavour). With one cost per run this means: per user
  and window, the first ``k = floor((user_budget - prior) / cost)`` valid trajectories in time
  order (date, traj_id) are released and every later one is refused.
- One trajectory is released under every setting of the sweep or under none, so `cost` is the
  sum of the sweep's charges (0 for a UNIFORM-only sweep: then everything valid is released
  unless the window is already overspent).
- Invalid trajectories (empty, n disagreeing with loc_ids, an id outside P, longer than
  max_len) are refused and spend nothing. A cost above the whole budget refuses every valid one.

Row shape: (user_id, date, traj_id, loc_ids, n) + ledger (user_id, epsilon, window_start)
-> PLAN_COLUMNS in (user_id, date, traj_id) order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from udfs.budget import round_down_exact
from udfs.errors import InvalidParameterError

EPOCH = dt.date(1970, 1, 5)  # a Monday: budget windows are aligned to it
UNIX_EPOCH = dt.date(1970, 1, 1)  # day 0 of the epoch-day numbers the kernels carry
EPOCH_DAY = (EPOCH - UNIX_EPOCH).days

RELEASED = "released"
WINDOW_EXHAUSTED = "window_budget_exhausted"
COST_OVER_BUDGET = "cost_exceeds_user_budget"
INVALID = "invalid_trajectory"
REASONS = (RELEASED, WINDOW_EXHAUSTED, COST_OVER_BUDGET, INVALID)

PLAN_COLUMNS = (
    "user_id", "date", "traj_id", "loc_ids", "n",
    "window_start", "cost", "remaining", "released", "reason",
)
_NO_LIMIT = np.iinfo(np.int64).max  # "every valid trajectory fits" (a zero-cost sweep)


@dataclass(frozen=True)
class BudgetPolicy:
    """A user may spend at most `user_budget` per window of `window_days` days."""

    user_budget: float
    window_days: int

    def __post_init__(self):
        if not (np.isfinite(self.user_budget) and self.user_budget > 0):
            raise InvalidParameterError(f"user_budget={self.user_budget!r} must be > 0")
        if not (isinstance(self.window_days, int) and self.window_days >= 1):
            raise InvalidParameterError(f"window_days={self.window_days!r} must be an int >= 1")

    def window_starts(self, dates) -> np.ndarray:
        """datetime64[D] start of the budget window each date falls in (vectorised)."""
        days = pd.to_datetime(pd.Series(dates)).to_numpy(dtype="datetime64[D]").astype(np.int64)
        return window_start_days(days, self.window_days).astype("datetime64[D]")

    def window_start(self, date: dt.date) -> dt.date:
        return self.window_starts([date])[0].astype(object)


def window_start_days(days, window_days: int) -> np.ndarray:
    """The one window rule: epoch day (days since 1970-01-01) of the start of the budget window
    each epoch day in `days` falls in; windows are `window_days` long and aligned to EPOCH."""
    days = np.asarray(days, dtype=np.int64)
    return EPOCH_DAY + np.floor_divide(days - EPOCH_DAY, window_days) * window_days


def window_start_of(date: dt.date, window_days: int) -> dt.date:
    """:func:`window_start_days` of one `datetime.date`."""
    start = window_start_days((date - UNIX_EPOCH).days, window_days)
    return UNIX_EPOCH + dt.timedelta(days=int(start))


# ----------------------------------------------------------------------------- validity
def _valid_one(loc_ids, n, n_locations: int, max_len: int | None) -> bool:
    """The row rule, for rows the vectorised path cannot take (lists, odd dtypes)."""
    if loc_ids is None:
        return False
    try:
        a = np.asarray(loc_ids)
        if a.ndim != 1 or a.size == 0 or a.size != n:
            return False
        if max_len is not None and a.size > max_len:
            return False
        return bool(a.min() >= 0 and a.max() < n_locations)
    except (TypeError, ValueError):  # None inside the array, strings, ...
        return False


def valid_rows(loc_ids: pd.Series, n: pd.Series, n_locations: int,
               max_len: int | None) -> np.ndarray:
    """Boolean per row: a trajectory the mechanisms accept (see the module docstring).

    What Spark hands over (1-D integer numpy arrays) is checked with one `len` per row and the
    min/max of all points at once (`reduceat` over the concatenated arrays); anything else
    (lists, None, nested or non-numeric arrays) takes the per-row rule.
    """
    cells = loc_ids.to_numpy(dtype=object)
    want = pd.to_numeric(pd.Series(n), errors="coerce").to_numpy(dtype=np.float64)
    if not all(type(a) is np.ndarray for a in cells):
        return _valid_by_row(cells, want, n_locations, max_len)
    try:
        sizes = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
    except TypeError:  # a 0-d array has no len()
        return _valid_by_row(cells, want, n_locations, max_len)
    ok = (sizes > 0) & (sizes == want)
    if max_len is not None:
        ok &= sizes <= max_len
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return ok
    try:
        flat = np.concatenate(cells[idx].tolist())
    except ValueError:  # arrays of different dimensions
        return _valid_by_row(cells, want, n_locations, max_len)
    if flat.ndim != 1 or flat.size != sizes[idx].sum() or flat.dtype.kind not in "iuf":
        return _valid_by_row(cells, want, n_locations, max_len)
    starts = np.concatenate([[0], np.cumsum(sizes[idx])[:-1]])
    lo = np.minimum.reduceat(flat, starts)
    hi = np.maximum.reduceat(flat, starts)
    ok[idx] = (lo >= 0) & (hi < n_locations)  # NaN compares False: invalid
    return ok


def _valid_by_row(cells: np.ndarray, want: np.ndarray, n_locations: int,
                  max_len: int | None) -> np.ndarray:
    return np.fromiter((_valid_one(a, w, n_locations, max_len) for a, w in zip(cells, want,
                                                                               strict=True)),
                       dtype=bool, count=len(cells))


# ----------------------------------------------------------------------------- prior spend
def _prior_per_window(ledger: pd.DataFrame, policy: BudgetPolicy) -> dict[tuple, Fraction]:
    """Exact prior spend per (user_id, window start): one Fraction sum per distinct epsilon.

    A ledger row stands for `spends` equal spends (1 when the column is absent): the Spark job
    sends the ledger pre-aggregated per (user, window, epsilon).
    """
    if ledger is None or ledger.empty:
        return {}
    led = pd.DataFrame({
        "user_id": ledger["user_id"].astype(str).to_numpy(),
        "window": policy.window_starts(ledger["window_start"]),
        "epsilon": ledger["epsilon"].to_numpy(dtype=np.float64),
        "spends": (ledger["spends"].to_numpy(dtype=np.int64) if "spends" in ledger
                   else np.ones(len(ledger), dtype=np.int64)),
    })
    counts = led.groupby(["user_id", "window", "epsilon"], sort=False)["spends"].sum()
    exact: dict[float, Fraction] = {}
    spent: dict[tuple, Fraction] = {}
    for (user, window, eps), count in counts.items():
        f = exact.get(eps)
        if f is None:
            f = exact[eps] = Fraction(float(eps))
        key = (user, np.datetime64(window, "D"))
        spent[key] = spent.get(key, Fraction(0)) + f * int(count)
    return spent


def _releasable(left: Fraction, cost: Fraction, budget: Fraction) -> int:
    """How many releases of `cost` fit in `left` (exact floor; capped to int64)."""
    if cost > budget:
        return 0
    if cost == 0:
        return _NO_LIMIT if left >= 0 else 0
    return int(min(max(left // cost, 0), _NO_LIMIT))


# ----------------------------------------------------------------------------- the plan
def plan_users(
    trajectories: pd.DataFrame,
    ledger: pd.DataFrame | None,
    *,
    cost: float,
    policy: BudgetPolicy,
    n_locations: int,
    max_len: int | None = None,
) -> pd.DataFrame:
    """Budget plan of the trajectories of any number of users (rules: module docstring).

    Args:
        trajectories: rows (user_id, date, traj_id, loc_ids, n) of whole users, any order.
        ledger: those users' prior spend (user_id, epsilon, window_start[, spends]), any stage;
            may be None or empty. Its window starts are re-aligned to this policy's windows.
        cost: epsilon one released trajectory spends (the whole sweep).
        policy: the per-window budget.
        n_locations: |P|, to refuse trajectories with unknown location ids.
    Returns:
        PLAN_COLUMNS rows in (user_id, date, traj_id) order; `remaining` is the budget left in
        the window before each trajectory, rounded down (for the explain report only).
    """
    if trajectories.empty:
        return pd.DataFrame({c: [] for c in PLAN_COLUMNS})
    t = trajectories.assign(user_id=trajectories["user_id"].astype(str))
    t = t.sort_values(["user_id", "date", "traj_id"], kind="stable").reset_index(drop=True)
    users = t["user_id"].to_numpy()
    win = policy.window_starts(t["date"])
    valid = valid_rows(t["loc_ids"], t["n"], n_locations, max_len)

    # One group per (user, window): rows are sorted by user then date, so windows are runs.
    new = np.ones(len(t), dtype=bool)
    new[1:] = (users[1:] != users[:-1]) | (win[1:] != win[:-1])
    starts = np.flatnonzero(new)
    gid = np.cumsum(new) - 1
    seen = np.cumsum(valid) - valid  # valid rows before each row, over the whole frame
    valid_before = seen - seen[starts][gid]

    budget, c = Fraction(float(policy.user_budget)), Fraction(float(cost))
    prior = _prior_per_window(ledger, policy)
    lefts = [budget] * len(starts)
    for g, i in enumerate(starts):  # Fraction only where a window already has spend
        spent = prior.get((users[i], win[i]))
        if spent is not None:
            lefts[g] = budget - spent
    k0 = _releasable(budget, c, budget)
    k = np.array([k0 if left == budget else _releasable(left, c, budget) for left in lefts],
                 dtype=np.int64)
    released_before = np.minimum(valid_before, k[gid])
    released = valid & (valid_before < k[gid])

    reasons = np.full(len(t), WINDOW_EXHAUSTED, dtype=object)
    reasons[released] = RELEASED
    if c > budget:
        reasons[:] = COST_OVER_BUDGET
    reasons[~valid] = INVALID
    return pd.DataFrame(
        {
            "user_id": t["user_id"],
            "date": t["date"],
            "traj_id": t["traj_id"],
            "loc_ids": t["loc_ids"],
            "n": t["n"],
            "window_start": win.astype(object),
            "cost": float(cost),
            "remaining": round_down_exact(lefts, gid, c, released_before),
            "released": released,
            "reason": reasons,
        }
    )


def plan_user(
    trajectories: pd.DataFrame,
    ledger: pd.DataFrame,
    *,
    cost: float,
    policy: BudgetPolicy,
    n_locations: int,
    max_len: int | None = None,
) -> pd.DataFrame:
    """:func:`plan_users` for one user's rows; `ledger` (epsilon, window_start) is that user's."""
    if not trajectories.empty and ledger is not None and not ledger.empty:
        user = str(trajectories["user_id"].iloc[0])
        ledger = ledger.assign(user_id=user)
    return plan_users(trajectories, ledger, cost=cost, policy=policy,
                      n_locations=n_locations, max_len=max_len)

"""Per-user kernels of LDP collection: plan the budget, then release (pure pandas, no pyspark).

The Spark stage (`jobs/collect.py`) groups trajectories by user and calls these kernels through
`applyInPandas`; unit tests call them on plain DataFrames. Two kernels, run one after the other
so that the whole budget plan exists (and is validated) before the first noise is drawn:

1. :func:`plan_user` (no randomness): walks one user's trajectories in time order, adds the
   cost of the release (the sum of the sweep's epsilons) to what the user already spent in the
   same budget window (prior ledger rows + earlier trajectories of this collection) and marks
   each trajectory released or refused with a reason. Row shape:
   (user_id, date, traj_id, loc_ids, n) + ledger (user_id, epsilon, window_start)
   -> (user_id, date, traj_id, loc_ids, n, window_start, cost, remaining, released, reason).
2. :class:`ReleaseKernel` (the only randomness): perturbs one user's released trajectories for
   every setting of the sweep with `udfs.collect.perturb`, seeded by the user's secret
   SeedSequence of that setting's scope. Row shape:
   (user_id, date, traj_id, loc_ids) -> (pseudonym, traj_key, date, mechanism, epsilon,
   loc_ids, n). No raw user id, traj id, timestamp or raw location leaves this kernel.

Budget rules (DESIGN.md section 4, privacy rules of collection):
- Budget windows are fixed calendar blocks of `window_days` days starting on Monday
  1970-01-05 (so windows never depend on which dates a run happens to collect).
- Spend composes sequentially within a window; sums are exact (fractions) and the comparison
  is ``prior + earlier + cost <= user_budget`` with nothing rounded in the user's disfavour.
- One trajectory is released under every setting of the sweep or under none, so every setting
  of a run is evaluated on the same trajectories. Once a trajectory is refused for budget,
  every later trajectory of that window is refused too (time order is the priority order).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from udfs.budget import total_up
from udfs.collect import MECHANISMS, perturb
from udfs.errors import InvalidParameterError
from udfs.space import LocationSpace

EPOCH = dt.date(1970, 1, 5)  # a Monday: budget windows are aligned to it
_EPOCH_DAY = (EPOCH - dt.date(1970, 1, 1)).days

RELEASED = "released"
WINDOW_EXHAUSTED = "window_budget_exhausted"
COST_OVER_BUDGET = "cost_exceeds_user_budget"
INVALID = "invalid_trajectory"
REASONS = (RELEASED, WINDOW_EXHAUSTED, COST_OVER_BUDGET, INVALID)

PLAN_COLUMNS = (
    "user_id", "date", "traj_id", "loc_ids", "n",
    "window_start", "cost", "remaining", "released", "reason",
)
RELEASE_COLUMNS = ("pseudonym", "traj_key", "date", "mechanism", "epsilon", "loc_ids", "n")


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """One release of a sweep: mechanism at epsilon, `release_no`-th release of its collection.

    `scope` names the collection (dataset, period, run label, mechanism, epsilon, release
    counter) and is the domain of the user's seed; it holds no secret and no user data.
    """

    mechanism: str
    epsilon: float
    release_no: int = 0
    collection: str = ""

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise InvalidParameterError(
                f"mechanism {self.mechanism!r} is not one of {', '.join(MECHANISMS)}"
            )
        eps = float(self.epsilon)
        if not (np.isfinite(eps) and eps > 0):
            raise InvalidParameterError(f"epsilon={self.epsilon!r} must be finite and > 0")
        if self.release_no < 0:
            raise InvalidParameterError(f"release_no={self.release_no} must be >= 0")

    @property
    def charge(self) -> float:
        """Epsilon the ledger records for one trajectory released under this setting.

        The mechanism's guarantee: `epsilon` for TP, ATP and EXP (their step records sum to at
        most epsilon for every length); 0 for UNIFORM, whose output ignores the input.
        """
        return 0.0 if self.mechanism == "uniform" else float(self.epsilon)

    @property
    def scope(self) -> str:
        return (
            f"collect\x1f{self.collection}\x1f{self.mechanism}\x1f{float(self.epsilon)!r}"
            f"\x1f{self.release_no}"
        )


def sweep_cost(settings: Sequence[Setting]) -> float:
    """Epsilon one trajectory spends when released under every setting (rounded up)."""
    return total_up([s.charge for s in settings])


# ----------------------------------------------------------------------------- windows
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
        start = _EPOCH_DAY + np.floor_divide(days - _EPOCH_DAY, self.window_days) * self.window_days
        return start.astype("datetime64[D]")

    def window_start(self, date: dt.date) -> dt.date:
        return self.window_starts([date])[0].astype(object)


# ----------------------------------------------------------------------------- planning
def _valid(loc_ids, n, n_locations: int, max_len: int | None) -> bool:
    if loc_ids is None:
        return False
    a = np.asarray(loc_ids)
    if a.ndim != 1 or a.size == 0 or a.size != n:
        return False
    if max_len is not None and a.size > max_len:
        return False
    return bool(a.min() >= 0 and a.max() < n_locations)


def plan_user(
    trajectories: pd.DataFrame,
    ledger: pd.DataFrame,
    *,
    cost: float,
    policy: BudgetPolicy,
    n_locations: int,
    max_len: int | None = None,
) -> pd.DataFrame:
    """Budget plan of one user's trajectories (see the module docstring for the rules).

    Args:
        trajectories: one user's rows (user_id, date, traj_id, loc_ids, n), any order.
        ledger: that user's prior spend (epsilon, window_start), any stage; may be empty.
        cost: epsilon one released trajectory spends (the whole sweep).
        policy: the per-window budget.
        n_locations: |P|, to refuse trajectories with unknown location ids.
    Returns:
        PLAN_COLUMNS rows in time order (date, traj_id); `remaining` is the budget left in the
        window before this trajectory (a float, rounded down; for the explain report only).
    """
    if trajectories.empty:
        return pd.DataFrame({c: [] for c in PLAN_COLUMNS})
    t = trajectories.sort_values(["date", "traj_id"], kind="stable").reset_index(drop=True)
    win = policy.window_starts(t["date"])
    spent: dict[np.datetime64, Fraction] = {}
    if not ledger.empty:
        prior_win = policy.window_starts(ledger["window_start"])
        for w, eps in zip(prior_win, ledger["epsilon"].to_numpy(dtype=np.float64), strict=True):
            spent[w] = spent.get(w, Fraction(0)) + Fraction(float(eps))
    budget = Fraction(float(policy.user_budget))
    c = Fraction(float(cost))
    exhausted: set[np.datetime64] = set()
    released = np.zeros(len(t), dtype=bool)
    reasons = np.empty(len(t), dtype=object)
    remaining = np.empty(len(t), dtype=np.float64)
    for i, (w, ids, n) in enumerate(zip(win, t["loc_ids"], t["n"], strict=True)):
        used = spent.get(w, Fraction(0))
        left = budget - used
        remaining[i] = _round_down(left)
        if not _valid(ids, n, n_locations, max_len):
            reasons[i] = INVALID
        elif c > budget:
            reasons[i] = COST_OVER_BUDGET
        elif w in exhausted or used + c > budget:
            exhausted.add(w)
            reasons[i] = WINDOW_EXHAUSTED
        else:
            spent[w] = used + c
            released[i] = True
            reasons[i] = RELEASED
    return pd.DataFrame(
        {
            "user_id": t["user_id"].astype(str),
            "date": t["date"],
            "traj_id": t["traj_id"],
            "loc_ids": t["loc_ids"],
            "n": t["n"],
            "window_start": win.astype(object),
            "cost": float(cost),
            "remaining": remaining,
            "released": released,
            "reason": reasons,
        }
    )


def _round_down(x: Fraction) -> float:
    f = float(x)
    return float(np.nextafter(f, -np.inf)) if Fraction(f) > x else f


# ----------------------------------------------------------------------------- release
def hmac_hex(key: bytes, message: str, chars: int = 16) -> str:
    """HMAC-SHA256(key, message) as hex, truncated (the traj_key default)."""
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()[:chars]


def traj_message(dataset: str, user_id: str, date: str, traj_id: int) -> str:
    """What a traj_key authenticates; keyed, so published keys reveal none of it."""
    return f"traj\x1f{dataset}\x1f{user_id}\x1f{date}\x1f{int(traj_id)}"


def iso_dates(dates) -> list[str]:
    return pd.to_datetime(pd.Series(dates)).dt.strftime("%Y-%m-%d").tolist()


@dataclass(frozen=True)
class ReleaseKernel:
    """Perturb one user's released trajectories for every setting (the only random step).

    `seed_for(scope, user_id)` returns the user's secret SeedSequence for a setting (HMAC of the
    run key: independent of partitioning and task attempts); `pseudonym_of(user_id)` and
    `traj_key_of(message)` are keyed hashes. Options go to `udfs.collect.perturb`
    (granularity, r_dir, calibrated, max_len).
    """

    dataset: str
    settings: tuple[Setting, ...]
    seed_for: Callable[[str, str], np.random.SeedSequence]
    pseudonym_of: Callable[[str], str]
    traj_key_of: Callable[[str], str]
    options: dict[str, Any] = field(default_factory=dict)

    def __call__(self, trajectories: pd.DataFrame, space: LocationSpace) -> pd.DataFrame:
        """One user's rows (user_id, date, traj_id, loc_ids) -> RELEASE_COLUMNS rows."""
        if trajectories.empty:
            return pd.DataFrame({c: [] for c in RELEASE_COLUMNS})
        users = trajectories["user_id"].astype(str).unique()
        if users.size != 1:
            raise InvalidParameterError(
                f"ReleaseKernel got {users.size} users in one group; group by user_id first"
            )
        user = str(users[0])
        # Time order fixes which draw of the user's random stream each trajectory gets, so the
        # output does not depend on how Spark ordered the group's rows.
        t = trajectories.sort_values(["date", "traj_id"], kind="stable").reset_index(drop=True)
        trajs = [np.asarray(x, dtype=np.int64) for x in t["loc_ids"]]
        lengths = np.array([a.size for a in trajs], dtype=np.int32)
        dates = iso_dates(t["date"])
        keys = [
            self.traj_key_of(traj_message(self.dataset, user, d, k))
            for d, k in zip(dates, t["traj_id"], strict=True)
        ]
        pseudonym = self.pseudonym_of(user)
        frames = []
        for s in self.settings:
            out = perturb(trajs, space, s.epsilon, s.mechanism, self.seed_for(s.scope, user),
                          **self.options)
            frames.append(
                pd.DataFrame(
                    {
                        "pseudonym": pseudonym,
                        "traj_key": keys,
                        "date": t["date"].to_numpy(),
                        "mechanism": s.mechanism,
                        "epsilon": float(s.epsilon),
                        "loc_ids": [a.astype(np.int32) for a in out],
                        "n": lengths,
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- explain
def explain_settings(
    space: LocationSpace, settings: Sequence[Setting], lengths: Sequence[int], options: dict
) -> list[dict[str, Any]]:
    """Where each setting's epsilon goes inside one trajectory, per length present.

    Uses the mechanisms' own step records (`udfs.collect.perturb(..., return_budget=True)`
    reports the same), so the report shows computed spend, not the configured number echoed.
    """
    from udfs.collect import make_mechanism

    mech_opts = {k: v for k, v in options.items() if k in ("granularity", "r_dir", "calibrated")}
    report = []
    for s in settings:
        mech = make_mechanism(space, s.epsilon, s.mechanism, **mech_opts)
        per_len = {}
        for n in sorted({int(x) for x in lengths}):
            rec = mech.record(n)
            by_kind: dict[str, float] = {}
            for step in rec.steps:
                by_kind[step.kind] = by_kind.get(step.kind, 0.0) + step.epsilon
            per_len[str(n)] = {
                "spent": rec.spent,
                "steps": len(rec.steps),
                "by_kind": {k: round(v, 12) for k, v in sorted(by_kind.items())},
            }
        report.append(
            {
                "mechanism": s.mechanism,
                "epsilon": float(s.epsilon),
                "release_no": s.release_no,
                "per_length": per_len,
            }
        )
    return report

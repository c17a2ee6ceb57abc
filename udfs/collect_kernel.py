"""Per-user kernels of LDP collection: plan the budget, then release (pure pandas, no pyspark).

The Spark stage (`jobs/collect/stage.py`) groups trajectories by user and calls these kernels
through `applyInPandas`; unit tests call them on plain DataFrames. Two kernels, run one after the
other so that the whole budget plan exists (and is validated) before the first noise is drawn:

1. :func:`plan_users` (no randomness; in `udfs.collect_plan`, re-exported here): marks each
   trajectory released or refused with a reason, per user and budget window in time order,
   against what the user already spent (prior ledger rows + earlier trajectories of this
   collection). Row shape:
   (user_id, date, traj_id, loc_ids, n) + ledger (user_id, epsilon, window_start)
   -> (user_id, date, traj_id, loc_ids, n, window_start, cost, remaining, released, reason).
2. :class:`ReleaseKernel` (the only randomness): perturbs one user's released trajectories for
   every setting of the sweep with `udfs.collect.perturb`, seeded by the user's secret
   SeedSequence of that setting's scope. Row shape:
   (user_id, date, traj_id, loc_ids) -> (pseudonym, traj_key, date, mechanism, epsilon,
   loc_ids, n). No raw user id, traj id, timestamp or raw location leaves this kernel.

The budget rules (windows, exact sums, all settings or none, time order as priority) are
written down in `udfs.collect_plan`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from udfs.budget import total_up
from udfs.collect import MECHANISMS, perturb
from udfs.collect_plan import (  # noqa: F401  (re-exported: the kernels' public names)
    COST_OVER_BUDGET,
    EPOCH,
    INVALID,
    PLAN_COLUMNS,
    REASONS,
    RELEASED,
    WINDOW_EXHAUSTED,
    BudgetPolicy,
    plan_user,
    plan_users,
)
from udfs.derive import hex_digest
from udfs.errors import InvalidParameterError
from udfs.space import LocationSpace

RELEASE_COLUMNS = ("pseudonym", "traj_key", "date", "mechanism", "epsilon", "loc_ids", "n")


# ----------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Setting:
    """One setting of a release: mechanism at epsilon, within the release `release_id`.

    `release_id` names the release (a collection run's commit unit, or a study) and is part of
    the domain of every user's seed, so two releases never share noise; it holds no secret and
    no user data.
    """

    mechanism: str
    epsilon: float
    release_id: str = ""

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise InvalidParameterError(
                f"mechanism {self.mechanism!r} is not one of {', '.join(MECHANISMS)}"
            )
        eps = float(self.epsilon)
        if not (np.isfinite(eps) and eps > 0):
            raise InvalidParameterError(f"epsilon={self.epsilon!r} must be finite and > 0")

    @property
    def charge(self) -> float:
        """Epsilon the ledger records for one trajectory released under this setting.

        The mechanism's guarantee: `epsilon` for TP, ATP and EXP (their step records sum to at
        most epsilon for every length); 0 for UNIFORM, whose output ignores the input.
        """
        return 0.0 if self.mechanism == "uniform" else float(self.epsilon)

    @property
    def scope(self) -> str:
        return f"collect\x1f{self.release_id}\x1f{self.mechanism}\x1f{float(self.epsilon)!r}"


def sweep_cost(settings: Sequence[Setting]) -> float:
    """Epsilon one trajectory spends when released under every setting (rounded up)."""
    return total_up([s.charge for s in settings])


# ----------------------------------------------------------------------------- publication
@dataclass(frozen=True)
class PublishOptions:
    """How much linkage metadata a published row carries (README, "What a published row
    reveals"). `date`: day | week (Monday of the ISO week) | none; `traj_key`: stable (one key
    per trajectory) | per_release (the release id enters the keyed hash); `pseudonym`: stable |
    per_window (the budget window's start enters the keyed hash) | none; `window_days`: the
    privacy window the pseudonyms rotate with."""

    date: str = "day"
    traj_key: str = "per_release"
    pseudonym: str = "per_window"
    window_days: int = 7

    def __post_init__(self):
        for name, allowed in (("date", ("day", "week", "none")),
                              ("traj_key", ("stable", "per_release")),
                              ("pseudonym", ("stable", "per_window", "none"))):
            if getattr(self, name) not in allowed:
                raise InvalidParameterError(f"publish.{name}={getattr(self, name)!r}: use one "
                                            f"of {', '.join(allowed)}")

    def key_message(self, dataset: str, user_id: str, date: str, traj_id: int,
                    release_id: str) -> str:
        """The message the published traj_key authenticates (see `traj_message`)."""
        rel = release_id if self.traj_key == "per_release" else None
        return traj_message(dataset, user_id, date, traj_id, rel)

    def pseudonym_message(self, user_id: str, date: dt.date) -> str | None:
        """The message the published pseudonym authenticates, None when none is published."""
        if self.pseudonym == "none":
            return None
        if self.pseudonym == "stable":
            return str(user_id)
        return f"{user_id}\x1fwindow\x1f{window_start_of(date, self.window_days).isoformat()}"

    def published_dates(self, dates: np.ndarray) -> np.ndarray:
        """The `date` column as published: the day, its week's Monday, or nothing."""
        if self.date == "day":
            return dates
        if self.date == "none":
            return np.full(len(dates), None, dtype=object)
        return np.array([d - dt.timedelta(days=d.weekday()) for d in dates], dtype=object)


def window_start_of(date: dt.date, window_days: int) -> dt.date:
    """Start of the budget window `date` falls in (windows aligned to EPOCH, a Monday)."""
    return EPOCH + dt.timedelta(days=((date - EPOCH).days // window_days) * window_days)


# ----------------------------------------------------------------------------- release
def hmac_hex(key: bytes, message: str, chars: int = 16) -> str:
    """HMAC-SHA256(key, message) as hex, truncated (the traj_key default; `udfs.derive`)."""
    return hex_digest(key, message, chars=chars)


def traj_message(dataset: str, user_id: str, date: str, traj_id: int,
                 release_id: str | None = None) -> str:
    """What a traj_key authenticates; keyed, so published keys reveal none of it. With a
    `release_id` the key differs per release (no linkage of a trajectory across releases)."""
    base = f"traj\x1f{dataset}\x1f{user_id}\x1f{date}\x1f{int(traj_id)}"
    return base if release_id is None else f"{base}\x1frelease\x1f{release_id}"


def _plain_dates(values: list) -> bool:
    return all(type(d) is dt.date for d in values)  # not datetime, a subclass with a time


def iso_dates(dates) -> list[str]:
    """'YYYY-MM-DD' per date. Spark hands DateType over as datetime.date: format those
    directly (pandas' to_datetime + strftime cost ~2 ms per call, i.e. per user)."""
    values = list(dates)
    if _plain_dates(values):
        return [d.isoformat() for d in values]
    return pd.to_datetime(pd.Series(values)).dt.strftime("%Y-%m-%d").tolist()


def day_numbers(dates) -> np.ndarray:
    """A sortable int64 day number per date (the order of the dates; units are days)."""
    values = list(dates)
    if _plain_dates(values):
        return np.fromiter((d.toordinal() for d in values), dtype=np.int64, count=len(values))
    days = pd.to_datetime(pd.Series(values)).to_numpy(dtype="datetime64[D]")
    return days.astype(np.int64)


def _as_dates(values: np.ndarray) -> np.ndarray:
    if _plain_dates(list(values)):
        return values
    return np.array([d.date() if hasattr(d, "date") else d
                     for d in pd.to_datetime(pd.Series(values))], dtype=object)


@dataclass(frozen=True)
class ReleaseKernel:
    """Perturb one user's trajectories of one release for every setting (the only random step).

    `seed_for(scope, user_id)` returns the user's secret SeedSequence for a setting of the
    release (HMAC of the run key over dataset, release id, setting and user: independent of
    partitioning and task attempts, so a retried task or a rolled-forward release redraws the
    same noise); `pseudonym_of(message)` and `traj_key_of(message)` are keyed hashes. The
    trajectories of a user in a release are fixed by the ledger before any noise is drawn, and
    the draw order is their time order (date, traj_id), so the output depends only on the
    key, the release and those trajectories. Options go to `udfs.collect.perturb`
    (granularity, r_dir, calibrated, max_len).
    """

    dataset: str
    settings: tuple[Setting, ...]
    seed_for: Callable[[str, str], np.random.SeedSequence]
    pseudonym_of: Callable[[str], str]
    traj_key_of: Callable[[str], str]
    options: dict[str, Any] = field(default_factory=dict)
    publish: PublishOptions = field(default_factory=PublishOptions)

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
        # Time order (date, traj_id; a stable sort) fixes which draw of the user's random
        # stream each trajectory gets, so the output does not depend on how Spark ordered the
        # group's rows. Plain arrays, not DataFrame.sort_values: this runs once per user.
        traj_ids = trajectories["traj_id"].to_numpy()
        order = np.lexsort((traj_ids, day_numbers(trajectories["date"])))
        date_col = _as_dates(trajectories["date"].to_numpy()[order])
        iso = iso_dates(date_col)
        trajs = [np.asarray(x, dtype=np.int64) for x in trajectories["loc_ids"].to_numpy()[order]]
        lengths = np.array([a.size for a in trajs], dtype=np.int32)
        pseudonyms = [self._pseudonym(user, d) for d in date_col]
        shown_dates = self.publish.published_dates(date_col)
        cols: dict[str, list] = {c: [] for c in RELEASE_COLUMNS}
        for s in self.settings:
            out = perturb(trajs, space, s.epsilon, s.mechanism,
                          self.seed_for(f"{self.dataset}\x1f{s.scope}", user), **self.options)
            cols["loc_ids"].extend(a.astype(np.int32) for a in out)
            cols["traj_key"].extend(
                self.traj_key_of(self.publish.key_message(self.dataset, user, d, k, s.release_id))
                for d, k in zip(iso, traj_ids[order], strict=True))
            cols["pseudonym"].extend(pseudonyms)
            cols["date"].extend(shown_dates)
            cols["mechanism"].extend([s.mechanism] * len(trajs))
            cols["epsilon"].extend([float(s.epsilon)] * len(trajs))
            cols["n"].extend(lengths.tolist())
        return pd.DataFrame(cols)

    def _pseudonym(self, user: str, date: dt.date) -> str | None:
        message = self.publish.pseudonym_message(user, date)
        return None if message is None else self.pseudonym_of(message)


# ----------------------------------------------------------------------------- explain
def explain_settings(
    space: LocationSpace, settings: Sequence[Setting], lengths: Sequence[int], options: dict
) -> list[dict[str, Any]]:
    """Where each setting's epsilon goes inside one trajectory, per length present.

    Uses the mechanisms' own step records (`udfs.collect.perturb(..., return_budget=True)`
    reports the same), so the report shows computed spend, not the configured number echoed.
    """
    from udfs.collect import make_mechanism

    mech_keys = ("granularity", "r_dir", "calibrated", "combiner")
    mech_opts = {k: v for k, v in options.items() if k in mech_keys}
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
                "release_id": s.release_id,
                "per_length": per_len,
            }
        )
    return report

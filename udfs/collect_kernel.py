"""Per-user kernels of LDP collection: plan the budget, then release (pure pandas, no pyspark).

The Spark stage (`jobs/collect/stage.py`) groups trajectories by user and calls these kernels
on whole users through `jobs.spark.per_user`; unit tests call them on plain DataFrames. Two
kernels, run one after the other so that the whole budget plan exists (and is validated)
before the first noise is drawn:

1. :func:`plan_users` (no randomness; in `udfs.collect_plan`, re-exported here): marks each
   trajectory released or refused with a reason, per user and budget window in time order,
   against what the user already spent (prior ledger rows + earlier trajectories of this
   collection). Row shape:
   (user_id, date, traj_id, loc_ids, n) + ledger (user_id, epsilon, window_start)
   -> (user_id, date, traj_id, loc_ids, n, window_start, cost, remaining, released, reason).
2. :class:`ReleaseKernel` (the only randomness): perturbs the released trajectories of whole
   users (all users of an Arrow batch in one batched call per setting) with
   `udfs.collect.perturb_padded`, each trajectory with its own secret stream key derived from
   the user's secret seed of that setting's scope and the trajectory (:func:`trajectory_keys`),
   so the release is the same for any partitioning. Row shape:
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
import pyarrow as pa

from udfs.budget import check_epsilon, total_up
from udfs.collect import INPUT_FREE, MECHANISM_OPTIONS, MECHANISMS, perturb_padded
from udfs.collect_plan import (  # noqa: F401  (re-exported: the kernels' public names)
    COST_OVER_BUDGET,
    EPOCH,
    INVALID,
    PLAN_COLUMNS,
    REASONS,
    RELEASED,
    UNIX_EPOCH,
    WINDOW_EXHAUSTED,
    BudgetPolicy,
    plan_user,
    plan_users,
    window_start_days,
    window_start_of,
)
from udfs.derive import hex_digest
from udfs.errors import InvalidParameterError
from udfs.space import LocationSpace
from udfs.streams import mix64

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
        check_epsilon(self.epsilon)

    @property
    def charge(self) -> float:
        """Epsilon the ledger records for one trajectory released under this setting.

        The mechanism's guarantee: `epsilon` for TP, ATP and EXP (their step records sum to at
        most epsilon for every length); 0 for UNIFORM, whose output ignores the input.
        """
        return 0.0 if self.mechanism in INPUT_FREE else float(self.epsilon)

    @property
    def scope(self) -> str:
        return f"collect\x1f{self.release_id}\x1f{self.mechanism}\x1f{float(self.epsilon)!r}"


def sweep_cost(settings: Sequence[Setting]) -> float:
    """Epsilon one trajectory spends when released under every setting (rounded up)."""
    return total_up([s.charge for s in settings])


# ----------------------------------------------------------------------------- publication
#: The one list of publication choices (the `publish:` config section reads it).
PUBLISH_CHOICES: dict[str, tuple[str, ...]] = {
    "date": ("day", "week", "none"),
    "traj_key": ("stable", "per_release"),
    "pseudonym": ("stable", "per_window", "none"),
}


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
        for name, allowed in PUBLISH_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise InvalidParameterError(f"publish.{name}={getattr(self, name)!r}: use one "
                                            f"of {', '.join(allowed)}")

    def key_message(self, dataset: str, user_id: str, date: str, traj_id: int,
                    release_id: str) -> str:
        """The message the published traj_key authenticates (see `traj_message`)."""
        rel = release_id if self.traj_key == "per_release" else None
        return traj_message(dataset, user_id, date, traj_id, rel)



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
    """'YYYY-MM-DD' per date. Spark hands DateType over as datetime.date: those are formatted
    directly, without a pandas conversion per call."""
    values = list(dates)
    if _plain_dates(values):
        return [d.isoformat() for d in values]
    return pd.to_datetime(pd.Series(values)).dt.strftime("%Y-%m-%d").tolist()


_MASK64 = (1 << 64) - 1


def epoch_days(dates) -> np.ndarray:
    """Days since 1970-01-01 (int64) of dates given as datetime.date objects, numpy datetime64,
    pandas timestamps or an Arrow date32 column: one day number whatever the carrier type."""
    if isinstance(dates, pa.ChunkedArray | pa.Array):
        return np.asarray(dates.cast(pa.int32()).to_numpy(zero_copy_only=False), np.int64)
    values = list(dates)
    if _plain_dates(values):
        return np.fromiter((d.toordinal() for d in values), dtype=np.int64,
                           count=len(values)) - UNIX_EPOCH.toordinal()
    return pd.to_datetime(pd.Series(values)).to_numpy(dtype="datetime64[D]").astype(np.int64)


def _iso(days: np.ndarray) -> np.ndarray:
    return days.astype("datetime64[D]").astype(str)


def _entropy(seed) -> int:
    if isinstance(seed, np.random.SeedSequence):
        ent = seed.entropy
        return int(ent) if not isinstance(ent, list | tuple) else int.from_bytes(
            b"".join(int(x).to_bytes(4, "little") for x in ent), "little")
    return int(seed)


def trajectory_keys(user_entropy: Sequence[int], user_index: np.ndarray, days: np.ndarray,
                    traj_ids: np.ndarray) -> np.ndarray:
    """One secret 64-bit stream key per trajectory (`udfs.streams`).

    `user_entropy[u]`: the user's secret seed for the setting (the HMAC of the run key over
    dataset, release, setting and user: `seed_for`); row i belongs to user `user_index[i]`
    and is the trajectory (`days[i]`, `traj_ids[i]`) of that user. key = mix64(w0 ^
    mix64(w1 ^ mix64(w2 ^ day) ^ mix64(traj_id))) over the seed's first three 64-bit words:
    for a fixed user and day, distinct traj ids get distinct keys (each mix64 is a bijection);
    any other pair of trajectories shares a key with probability 2^-64. Secret because the
    words are: public ids alone determine nothing (docs/architecture.md section 9).
    """
    words = np.array([[(e >> (64 * i)) & _MASK64 for i in range(3)] for e in user_entropy],
                     dtype=np.uint64).reshape(-1, 3)
    w = words[np.asarray(user_index, dtype=np.int64)]
    d = np.asarray(days, dtype=np.int64).view(np.uint64)
    t = np.asarray(traj_ids, dtype=np.int64).view(np.uint64)
    return mix64(w[:, 0] ^ mix64(w[:, 1] ^ mix64(w[:, 2] ^ d) ^ mix64(t)))


@dataclass(frozen=True)
class Batch:
    """Whole users' trajectories in (user, date, traj_id) order, as flat arrays."""

    users: np.ndarray  # (U,) distinct user ids (str), sorted
    user_index: np.ndarray  # (N,) index into users
    days: np.ndarray  # (N,) epoch days
    traj_ids: np.ndarray  # (N,) int64
    pad: np.ndarray  # (N, L) int64 loc ids, row i valid in its first lengths[i]
    lengths: np.ndarray  # (N,) int64
    traj_keys: np.ndarray | None = None  # (N,) str: the input's traj_key column, if it has one

    @staticmethod
    def of(frame) -> Batch:
        """From a pandas DataFrame or pyarrow Table with user_id, date, traj_id, loc_ids
        (and optionally traj_key)."""
        arrow = isinstance(frame, pa.Table | pa.RecordBatch)
        given = None
        if "traj_key" in (frame.column_names if arrow else frame.columns):
            col = frame.column("traj_key") if arrow else frame["traj_key"]
            given = np.asarray(col.to_numpy(zero_copy_only=False) if arrow else col.to_numpy(),
                               object)
            if pd.isna(given).any():  # a charge written before charges named their keys
                given = None  # derive them all (the same keys: the plan's derivation)
        if arrow:
            users = np.asarray(frame.column("user_id").to_numpy(zero_copy_only=False), object)
            days = epoch_days(frame.column("date"))
            tids = np.asarray(frame.column("traj_id").to_numpy(zero_copy_only=False), np.int64)
            col = frame.column("loc_ids")
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            lengths = np.asarray(arr.value_lengths().to_numpy(zero_copy_only=False), np.int64)
            values = np.asarray(arr.flatten().to_numpy(zero_copy_only=False), np.int64)
        else:
            users = frame["user_id"].astype(str).to_numpy()
            days = epoch_days(frame["date"].to_numpy())
            tids = frame["traj_id"].to_numpy().astype(np.int64)
            locs = frame["loc_ids"].to_numpy()
            lengths = np.fromiter(map(len, locs), dtype=np.int64, count=len(locs))
            values = (np.concatenate([np.asarray(a, dtype=np.int64) for a in locs])
                      if len(locs) else np.empty(0, np.int64))
        uniq, uidx = np.unique(users.astype(str), return_inverse=True)
        order = np.lexsort((tids, days, uidx))  # time order within each user
        starts = np.cumsum(lengths) - lengths
        lens = lengths[order]
        width = int(lens.max()) if lens.size else 0
        cols = np.arange(width)
        valid = cols[None, :] < lens[:, None]
        src = starts[order][:, None] + np.minimum(cols[None, :], np.maximum(lens, 1)[:, None] - 1)
        pad = np.where(valid, values[np.minimum(src, max(values.size - 1, 0))]
                       if values.size else 0, 0)
        return Batch(uniq, uidx[order].reshape(-1), days[order], tids[order], pad, lens,
                     None if given is None else given[order])

    def flat(self, out: np.ndarray) -> np.ndarray:
        """The valid points of a padded (N, L) output, row after row."""
        return out[np.arange(out.shape[1])[None, :] < self.lengths[:, None]]


@dataclass(frozen=True)
class ReleaseKernel:
    """Perturb whole users' trajectories of one release for every setting (the only random
    step), all users of a call in one batched `udfs.collect.perturb_padded` per setting.

    `seed_for(scope, user_id)` returns the user's secret seed for a setting of the release
    (a SeedSequence or int: HMAC of the run key over dataset, release id, setting and user);
    each trajectory's stream key is derived from it and the trajectory's (date, traj_id)
    (:func:`trajectory_keys`), and every draw of a trajectory is a function of that key only
    (`udfs.streams`). So the output does not depend on how users are cut into partitions,
    Arrow batches or calls, on row order, or on task attempts: a retried task or a
    rolled-forward release redraws the same noise. `pseudonym_of(message)` and
    `traj_key_of(message)` are keyed hashes. Options go to `udfs.collect.perturb_padded`
    (granularity, r_dir, calibrated, combiner, max_len).
    """

    dataset: str
    settings: tuple[Setting, ...]
    seed_for: Callable[[str, str], Any]
    pseudonym_of: Callable[[str], str]
    traj_key_of: Callable[[str], str]
    options: dict[str, Any] = field(default_factory=dict)
    publish: PublishOptions = field(default_factory=PublishOptions)
    keep_true: bool = False  # trusted use only: rows also carry `true_ids` (see __call__)

    def __call__(self, trajectories, space: LocationSpace):
        """Whole users' rows (user_id, date, traj_id, loc_ids) -> RELEASE_COLUMNS rows, one
        block per setting, each in (user, date, traj_id) order. A pyarrow Table in gives a
        pyarrow Table out (no per-row Python objects for the points); pandas gives pandas.

        With a `traj_key` column (one setting only) the rows are published under those keys:
        `collect` passes the keys its plan computed and the ledger charged, so the charge
        and the published row carry the same key by construction and no key is derived twice
        (an HMAC per trajectory is a large share of the release's work).

        With `keep_true` each row also carries `true_ids`, the raw points it was perturbed
        from (raw data: trusted zone only). `collect` keeps them on its cached release to
        measure utility without joining the raw table back; it never writes them."""
        arrow = isinstance(trajectories, pa.Table | pa.RecordBatch)
        if len(trajectories) == 0:
            empty = _empty_release(self.keep_true)
            return pa.table(empty) if arrow else pd.DataFrame({c: [] for c in empty})
        b = Batch.of(trajectories)
        shown = self._published_days(b.days)
        pseud = self._pseudonyms(b)
        if b.traj_keys is not None and len(self.settings) != 1:
            raise ValueError("a traj_key column names one release's keys: pass it with "
                             "exactly one setting")
        parts = []
        for s, flat in self._perturbed(b, space):
            keys = b.traj_keys if b.traj_keys is not None else [
                self.traj_key_of(self.publish.key_message(self.dataset, u, d, k, s.release_id))
                for u, d, k in zip(b.users[b.user_index], _iso(b.days), b.traj_ids.tolist(),
                                   strict=True)]
            part = _columns(s, keys, pseud, shown, b.lengths, flat, arrow)
            if self.keep_true:
                part = _with_true(part, b.lengths, b.flat(b.pad), arrow)
            parts.append(part)
        if arrow:
            return pa.concat_tables(parts)
        return pd.concat(parts, ignore_index=True)

    def study_rows(self, trajectories, space: LocationSpace) -> pd.DataFrame:
        """Trusted zone only (`trajpriv study`): (user_id, date, traj_id, mechanism, epsilon,
        loc_ids) per setting, with the raw identity kept; the same noise as a release of the
        same settings."""
        if len(trajectories) == 0:
            return pd.DataFrame(columns=["user_id", "date", "traj_id", "mechanism", "epsilon",
                                         "loc_ids"])
        b = Batch.of(trajectories)
        dates = b.days.astype("datetime64[D]").astype(object)
        parts = []
        for s, flat in self._perturbed(b, space):
            parts.append(pd.DataFrame({
                "user_id": b.users[b.user_index], "date": dates, "traj_id": b.traj_ids,
                "mechanism": s.mechanism, "epsilon": float(s.epsilon),
                "loc_ids": np.split(flat.astype(np.int32), np.cumsum(b.lengths)[:-1])}))
        return pd.concat(parts, ignore_index=True)

    def _perturbed(self, b: Batch, space: LocationSpace):
        for s in self.settings:
            scope = f"{self.dataset}\x1f{s.scope}"
            entropy = [_entropy(self.seed_for(scope, str(u))) for u in b.users]
            keys = trajectory_keys(entropy, b.user_index, b.days, b.traj_ids)
            out = perturb_padded(b.pad, b.lengths, space, s.epsilon, s.mechanism, keys,
                                 **self.options)
            yield s, b.flat(out)

    def _published_days(self, days: np.ndarray) -> np.ndarray | None:
        """Epoch days as published (None: no date): the day or its week's Monday."""
        if self.publish.date == "none":
            return None
        if self.publish.date == "week":
            return days - (days + 3) % 7  # 1970-01-01 was a Thursday (weekday 3)
        return days

    def _pseudonyms(self, b: Batch) -> list | None:
        p = self.publish
        if p.pseudonym == "none":
            return None
        if p.pseudonym == "stable":
            per_user = [self.pseudonym_of(str(u)) for u in b.users]
            return [per_user[i] for i in b.user_index.tolist()]
        starts = _iso(window_start_days(b.days, p.window_days))
        cache: dict[tuple[int, str], str] = {}
        out = []
        for i, w in zip(b.user_index.tolist(), starts.tolist(), strict=True):
            got = cache.get((i, w))
            if got is None:
                got = cache[(i, w)] = self.pseudonym_of(f"{b.users[i]}\x1fwindow\x1f{w}")
            out.append(got)
        return out


_LOCS = pa.list_(pa.field("element", pa.int32()))  # Spark's Arrow form of array<int>


def _empty_release(keep_true: bool = False) -> dict:
    cols = {"pseudonym": pa.array([], pa.string()), "traj_key": pa.array([], pa.string()),
            "date": pa.array([], pa.date32()), "mechanism": pa.array([], pa.string()),
            "epsilon": pa.array([], pa.float64()), "loc_ids": pa.array([], _LOCS),
            "n": pa.array([], pa.int32())}
    return {**cols, "true_ids": pa.array([], _LOCS)} if keep_true else cols


def _locs(lengths: np.ndarray, flat: np.ndarray) -> pa.ListArray:
    """Spark's array<int> column of rows of `lengths` points from the row-after-row `flat`."""
    offsets = np.zeros(lengths.size + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat.astype(np.int32)),
                                    type=_LOCS)


def _with_true(part, lengths: np.ndarray, true_flat: np.ndarray, arrow: bool):
    """`part` plus `true_ids`: the raw points of each row (trusted zone only)."""
    if arrow:
        return part.append_column("true_ids", _locs(lengths, true_flat))
    return part.assign(true_ids=np.split(true_flat.astype(np.int32), np.cumsum(lengths)[:-1]))


def _columns(s: Setting, keys, pseud, shown, lengths, flat, arrow: bool):
    n = lengths.size
    if arrow:
        return pa.table({
            "pseudonym": pa.array(pseud if pseud is not None else [None] * n, pa.string()),
            "traj_key": pa.array(keys, pa.string()),
            "date": (pa.array(shown.astype(np.int32), pa.int32()).cast(pa.date32())
                     if shown is not None else pa.nulls(n, pa.date32())),
            "mechanism": pa.array([s.mechanism] * n, pa.string()),
            "epsilon": pa.array(np.full(n, float(s.epsilon)), pa.float64()),
            "loc_ids": _locs(lengths, flat),
            "n": pa.array(lengths.astype(np.int32)),
        })
    dates = (shown.astype("datetime64[D]").astype(object) if shown is not None
             else np.full(n, None, dtype=object))
    return pd.DataFrame({
        "pseudonym": pseud if pseud is not None else [None] * n,
        "traj_key": keys,
        "date": dates,
        "mechanism": [s.mechanism] * n,
        "epsilon": [float(s.epsilon)] * n,
        "loc_ids": np.split(flat.astype(np.int32), np.cumsum(lengths)[:-1]),
        "n": lengths.astype(np.int64).tolist(),
    }, columns=list(RELEASE_COLUMNS))


# ----------------------------------------------------------------------------- explain
def explain_settings(
    space: LocationSpace, settings: Sequence[Setting], lengths: Sequence[int], options: dict
) -> list[dict[str, Any]]:
    """Where each setting's epsilon goes inside one trajectory, per length present.

    Uses the mechanisms' own step records (`udfs.collect.perturb(..., return_budget=True)`
    reports the same), so the report shows computed spend, not the configured number echoed.
    """
    from udfs.collect import make_mechanism

    mech_opts = {k: v for k, v in options.items() if k in MECHANISM_OPTIONS}
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

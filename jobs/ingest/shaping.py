"""Shape accepted points into trajectories and 48-slot days (docs/architecture.md section 5). No
pyspark.

Pure, vectorised pandas/numpy kernels (no Python loop per row): the same functions run on a
whole small dataset in a unit test and on one hash bucket of users inside Spark's applyInPandas.

Trajectory rules (`ingest.segment`, `gap_hours`, `max_len`, `min_len`), per user and, with
`segment="day"` (the default), per user-day (the calendar day of the timestamp as written, UTC
for Geolife/Telecom); `segment="gap"` does not cut at midnight and `segment="none"` cuts only
by length (one run of stays per user):
1. order the points by time (or by input order, `order="file"`, for sources whose row order is
   the path, e.g. CPS);
2. consecutive records at the same location merge into one *stay* (its time = the first
   record's, its end = the latest start/end of its records);
3. except with `segment="none"`, a new trajectory starts where the next stay begins more than
   `gap_hours` after the previous stay ended;
4. each trajectory is cut into consecutive pieces of at most `max_len` stays;
5. pieces of fewer than `min_len` stays are not trajectories: they are returned apart (reason
   `shorter_than_min_len`) so ingest counts them; their points stay accepted records.
A trajectory's `date` is the day of its first stay; `traj_id` numbers the trajectories of a
user and date 0, 1, 2, ... in time order, so (user_id, date, traj_id) is a key in every mode.
This is the one trajectory rule set of the project: the benches build the paper's CHI and CPS
sets through it too (`jobs.ingest.local`).
Slot days: slot s covers [s*30 min, (s+1)*30 min) of the day; a slot takes the location seen
most often in it (ties: the one seen last); empty slots are forward-filled, then leading empty
slots back-filled from the first observed slot.

Row shapes: points (user_id, ts, [end_ts], loc_id, [source, line]) ->
trajectories (user_id, date, traj_id, loc_ids list[int], ts list[datetime64], n) and
slot days (user_id, date, slots list[int] of length 48).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from udfs.errors import InvalidParameterError

SLOTS_PER_DAY = 48
SLOT = pd.Timedelta(minutes=30)

TRAJECTORY_COLUMNS = ("user_id", "date", "traj_id", "loc_ids", "ts", "n")
SLOT_DAY_COLUMNS = ("user_id", "date", "slots")


def with_dates(points: pd.DataFrame) -> pd.DataFrame:
    """A copy with `date` (midnight of the point's day, datetime64[ns])."""
    out = points.copy()
    out["date"] = out["ts"].dt.normalize()
    return out


def mark_duplicates(points: pd.DataFrame) -> np.ndarray:
    """True for a record with the same user, timestamp and location as another that is kept.

    Of such a set the record with the longest stay is kept (the latest `end_ts`; none counts
    as the shortest), ties to the first in input order (source, then line), so a duplicate
    that ends later never cuts the stay short (on real Telecom records 4,031 of 4,952
    duplicates differed in their end; the first of them was kept before)."""
    keys = ["user_id", "ts", "loc_id"]
    order = [c for c in ("source", "line") if c in points.columns]
    ranked = points
    if "end_ts" in points.columns:
        end = points["end_ts"].to_numpy("datetime64[ns]").view(np.int64)
        longest_first = np.where(end == np.iinfo(np.int64).min, np.iinfo(np.int64).max, -end)
        ranked = points.assign(_longest_first=longest_first)
        order = ["_longest_first", *order]
    ranked = ranked.sort_values(order, kind="stable") if order else ranked
    dup = ranked.duplicated(subset=keys, keep="first")
    return dup.reindex(points.index).to_numpy(dtype=bool)


SEGMENTS = ("day", "gap", "none")
SHORTER_THAN_MIN_LEN = "shorter_than_min_len"  # the reason a piece is not a trajectory


def _sorted(points: pd.DataFrame, order: str, by_day: bool) -> pd.DataFrame:
    if order not in ("time", "file"):
        raise InvalidParameterError(f"order must be 'time' or 'file', got {order!r}")
    tie = [c for c in ("source", "line") if c in points.columns]
    day = ["date"] if by_day else []
    keys = ["user_id", *day, "ts", *tie] if order == "time" else ["user_id", *day, *tie, "ts"]
    return points.sort_values(keys, kind="stable").reset_index(drop=True)


def build_trajectories(points: pd.DataFrame, **rules) -> pd.DataFrame:
    """The trajectories of accepted points (`cut_trajectories` without the short pieces)."""
    return cut_trajectories(points, **rules)[0]


def _check_cut(max_len: int, gap_hours: float, segment: str, min_len: int) -> None:
    if max_len < 1:
        raise InvalidParameterError(f"max_len must be at least 1, got {max_len}")
    if not 1 <= min_len <= max_len:
        raise InvalidParameterError(f"min_len must be in 1..max_len ({max_len}), got {min_len}")
    if not gap_hours > 0:
        raise InvalidParameterError(f"gap_hours must be positive, got {gap_hours}")
    if segment not in SEGMENTS:
        raise InvalidParameterError(f"segment must be one of {SEGMENTS}, got {segment!r}")


def _point_ends(p: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """Each point's end (ns): its end_ts where given and not before its start, else its ts."""
    if "end_ts" not in p.columns:
        return ts
    end_raw = p["end_ts"].to_numpy(dtype="datetime64[ns]")
    return np.where(np.isnat(end_raw), ts, np.maximum(end_raw.astype(np.int64), ts))


def cut_trajectories(
    points: pd.DataFrame,
    *,
    max_len: int = 8,
    gap_hours: float = 3.0,
    order: str = "time",
    segment: str = "day",
    min_len: int = 1,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(trajectories, pieces shorter than `min_len`) of accepted points, both in the
    TRAJECTORY_COLUMNS shape (the short pieces' `traj_id` is -1: they are not trajectories)."""
    _check_cut(max_len, gap_hours, segment, min_len)
    if points.empty:
        return _empty_trajectories(), _empty_trajectories()
    p = _sorted(with_dates(points) if "date" not in points.columns else points, order,
                by_day=segment == "day")
    user = p["user_id"].to_numpy()  # text or integer codes: only compared for equality
    day = p["date"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
    loc = p["loc_id"].to_numpy(dtype=np.int64)
    ts = p["ts"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
    end = _point_ends(p, ts)

    # Stays: runs of the same location within a user (and a day, when cutting by day).
    bound = np.r_[True, user[1:] != user[:-1]]
    if segment == "day":
        bound |= np.r_[True, day[1:] != day[:-1]]
    new_stay = bound | np.r_[True, loc[1:] != loc[:-1]]
    starts = np.flatnonzero(new_stay)
    stay_loc, stay_ts = loc[starts], ts[starts]
    stay_end = np.maximum.reduceat(end, starts)

    # Segments: at every bound, and after a gap of more than gap_hours unless segment=none.
    new_seg = bound[starts].copy()
    if segment != "none":
        gap_ns = int(round(gap_hours * 3600 * 1e9))
        new_seg[1:] |= (stay_ts[1:] - stay_end[:-1]) > gap_ns
    seg_id = np.cumsum(new_seg) - 1
    seg_start = np.flatnonzero(new_seg)
    pos = np.arange(len(starts)) - seg_start[seg_id]
    piece_start = np.flatnonzero(new_seg | (pos % max_len == 0))
    offsets = np.r_[piece_start, len(starts)]
    n = np.diff(offsets).astype(np.int32)

    row_of_piece = starts[piece_start]
    frame = pd.DataFrame(
        {
            "user_id": user[row_of_piece],
            "date": p["date"].to_numpy()[row_of_piece],
            "traj_id": np.full(len(piece_start), -1, dtype=np.int32),
            "loc_ids": list_column(offsets, stay_loc.astype(np.int32)),
            "ts": list_column(offsets, stay_ts.astype("datetime64[ns]")),
            "n": n,
        }
    )
    long = n >= min_len
    kept = frame[long].reset_index(drop=True)
    # traj_id: ordinal of the trajectory within its (user, date), in the order built (time).
    kept["traj_id"] = kept.groupby(["user_id", "date"], sort=False).cumcount().astype(np.int32)
    return kept, frame[~long].reset_index(drop=True)


def list_column(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Object array of numpy arrays values[offsets[i]:offsets[i+1]], built by Arrow in C++
    (np.split costs a Python call per list: seconds for a million trajectories)."""
    import pyarrow as pa

    lists = pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return lists.to_pandas().to_numpy(dtype=object)


def _empty_trajectories() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user_id": pd.Series([], dtype=object),
            "date": pd.Series([], dtype="datetime64[ns]"),
            "traj_id": pd.Series([], dtype=np.int32),
            "loc_ids": pd.Series([], dtype=object),
            "ts": pd.Series([], dtype=object),
            "n": pd.Series([], dtype=np.int32),
        }
    )


def build_slot_days(points: pd.DataFrame) -> pd.DataFrame:
    """48-slot days of accepted points (mode per slot, forward- then back-filled).

    A slot's location is the one seen most often in it; a tie goes to the one seen last, then
    to the smaller location id (so the result never depends on the input's row order). Plain
    numpy over two sorts: this runs on every record of a dataset.
    """
    if points.empty:
        return pd.DataFrame(
            {
                "user_id": pd.Series([], dtype=object),
                "date": pd.Series([], dtype="datetime64[ns]"),
                "slots": pd.Series([], dtype=object),
            }
        )
    p = with_dates(points) if "date" not in points.columns else points
    user, users = pd.factorize(p["user_id"], sort=True)  # codes in id order
    day = p["date"].to_numpy("datetime64[ns]").view(np.int64)
    ts = p["ts"].to_numpy("datetime64[ns]").view(np.int64)
    slot = np.clip((ts - day) // SLOT.value, 0, SLOTS_PER_DAY - 1)
    loc = p["loc_id"].to_numpy(np.int64)

    # Runs of one (user, day, slot, location), times ascending inside: hits and last time.
    order = np.lexsort((ts, loc, slot, day, user))
    u, d, s, lc, t = user[order], day[order], slot[order], loc[order], ts[order]
    new = np.r_[
        True, (u[1:] != u[:-1]) | (d[1:] != d[:-1]) | (s[1:] != s[:-1]) | (lc[1:] != lc[:-1])
    ]
    first = np.flatnonzero(new)
    hits = np.diff(np.r_[first, len(t)])
    last = t[np.r_[first[1:], len(t)] - 1]
    gu, gd, gs, gl = u[first], d[first], s[first], lc[first]

    # Per (user, day, slot): most hits, then latest, then smallest location id (stable sort).
    best = np.lexsort((gl, -last, -hits, gs, gd, gu))
    bu, bd, bs, bl = gu[best], gd[best], gs[best], gl[best]
    top = np.r_[True, (bu[1:] != bu[:-1]) | (bd[1:] != bd[:-1]) | (bs[1:] != bs[:-1])]
    bu, bd, bs, bl = bu[top], bd[top], bs[top], bl[top]
    new_day = np.r_[True, (bu[1:] != bu[:-1]) | (bd[1:] != bd[:-1])]
    day_idx = np.cumsum(new_day) - 1
    grid = np.full((int(new_day.sum()), SLOTS_PER_DAY), -1, dtype=np.int64)
    grid[day_idx, bs] = bl
    return pd.DataFrame(
        {
            "user_id": np.asarray(users)[bu[new_day]],
            "date": bd[new_day].view("datetime64[ns]"),
            "slots": list(fill_slots(grid).astype(np.int32)),
        }
    )


def fill_slots(grid: np.ndarray) -> np.ndarray:
    """Forward-fill -1 entries along each row, then back-fill the leading ones."""
    cols = np.arange(grid.shape[1])
    seen = np.where(grid >= 0, cols, -1)
    last = np.maximum.accumulate(seen, axis=1)
    rows = np.arange(grid.shape[0])[:, None]
    filled = np.where(last >= 0, grid[rows, np.maximum(last, 0)], -1)
    first = np.argmax(grid >= 0, axis=1)
    lead = filled < 0
    filled[lead] = np.broadcast_to(grid[np.arange(grid.shape[0]), first][:, None], grid.shape)[lead]
    return filled


def points_from_slot_days(
    slot_days: pd.DataFrame, lat: np.ndarray, lon: np.ndarray, loc_index: np.ndarray
) -> pd.DataFrame:
    """One point per slot (ts = slot start) of 48-slot days; lat/lon from the location set
    (`loc_index` maps loc_id -> row of lat/lon). Used for the 48-slot Geolife format."""
    n = len(slot_days)
    slots = np.stack(slot_days["slots"].to_numpy()) if n else np.zeros((0, SLOTS_PER_DAY), int)
    dates = slot_days["date"].to_numpy(dtype="datetime64[ns]")
    ts = np.repeat(dates, SLOTS_PER_DAY) + np.tile(
        np.arange(SLOTS_PER_DAY) * SLOT.to_timedelta64(), n
    )
    flat = slots.reshape(-1).astype(np.int64)
    rows = loc_index[flat] if n else np.zeros(0, dtype=np.int64)
    return pd.DataFrame(
        {
            "user_id": np.repeat(slot_days["user_id"].to_numpy(dtype=object), SLOTS_PER_DAY),
            "ts": ts,
            "lat": lat[rows],
            "lon": lon[rows],
            "loc_id": flat,
            "date": np.repeat(dates, SLOTS_PER_DAY),
        }
    )

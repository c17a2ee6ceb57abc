"""Build trajectories from check-in records (the ingestion rules, as a pure-numpy kernel).

Rules: per user, records sorted by time (stable); split where consecutive records are more than
`gap` apart; inside a segment merge consecutive duplicate locations (keep the first); cut each
segment into pieces of at most `max_len` points (consecutive chunks, the last may be shorter).
"""

from __future__ import annotations

import numpy as np

from udfs.errors import InvalidParameterError, InvalidTrajectoryError


def build_trajectories(user, ts, loc, *, gap: float, max_len: int = 8) -> list[np.ndarray]:
    """Return the list of trajectories (int64 location-id arrays), ordered by (user, time).

    `ts` is numeric (seconds, minutes, ...) in the unit of `gap`.
    """
    user, ts, loc = np.asarray(user), np.asarray(ts, dtype=np.float64), np.asarray(loc)
    if not (user.shape == ts.shape == loc.shape) or user.ndim != 1:
        raise InvalidTrajectoryError("user, ts and loc must be 1-D arrays of equal length")
    if not np.isfinite(ts).all():
        raise InvalidTrajectoryError("timestamps contain NaN/inf; drop or repair those records")
    if not (isinstance(max_len, int) and max_len >= 1) or not gap > 0:
        raise InvalidParameterError("need max_len >= 1 (int) and gap > 0")
    if user.size == 0:
        return []
    o = np.lexsort((ts, user))
    user, ts, loc = user[o], ts[o], loc[o].astype(np.int64)
    new_seg = np.ones(user.size, bool)
    new_seg[1:] = (user[1:] != user[:-1]) | (ts[1:] - ts[:-1] > gap)
    dup = np.zeros(user.size, bool)
    dup[1:] = ~new_seg[1:] & (loc[1:] == loc[:-1])
    keep = ~dup
    seg_id = np.cumsum(new_seg)[keep]
    loc = loc[keep]
    starts = np.flatnonzero(np.r_[True, seg_id[1:] != seg_id[:-1]])
    ends = np.r_[starts[1:], loc.size]
    out = []
    for s, e in zip(starts, ends, strict=True):
        out.extend(loc[i:min(e, i + max_len)] for i in range(s, e, max_len))
    return out


def load_ldp_dataset(data_dir, name: str, max_len: int = 8):
    """Load CHI or CPS from ../shared/data/ldp_checkins as (LocationSpace, trajectories).

    CHI: P = distinct Location IDs (ids assigned in sorted Location ID order) with their
    coordinates; timestamps are datetimes, gap 3 h. CPS: P = cps_campus_locations.csv in file
    order; timestamps are minutes (floats), gap 180 min.
    """
    from pathlib import Path

    import pandas as pd

    from udfs.space import LocationSpace

    d = Path(data_dir) / "ldp_checkins"
    if name == "chi":
        df = pd.read_csv(d / "chi_checkins.csv")
        locs = df.groupby("Location ID")[["Latitude", "Longitude"]].first().sort_index()
        ts = pd.to_datetime(df["Timestamp"]).astype("int64").to_numpy() / 1e9
        gap = 3 * 3600.0
    elif name == "cps":
        df = pd.read_csv(d / "cps_campus_checkins.csv")
        locs = pd.read_csv(d / "cps_campus_locations.csv").set_index("Location ID")
        ts = df["Timestamp"].to_numpy(dtype=float)
        gap = 180.0
    else:
        raise InvalidParameterError(f"unknown dataset {name!r}; use 'chi' or 'cps'")
    ids = pd.Series(np.arange(len(locs)), index=locs.index)
    loc = ids.loc[df["Location ID"]].to_numpy()
    space = LocationSpace.from_latlon(locs["Latitude"].to_numpy(), locs["Longitude"].to_numpy())
    trajs = build_trajectories(df["User ID"].to_numpy(), ts, loc, gap=gap, max_len=max_len)
    return space, trajs

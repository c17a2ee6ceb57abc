"""Realism statistics of Telecom-style records, per user-day (docs/architecture.md section 5). No
pyspark.

Definitions (a user-day = one user's records on one calendar day of `start`):
- `n_records`: records of the user-day;
- `n_distinct`: distinct stations of the user-day;
- `rg_km`: radius of gyration, sqrt(mean over the records of d(record, centroid)^2), centroid =
  mean latitude and longitude of the records, d = haversine km (each record weighs the same);
- `jump_km`: haversine distance between two consecutive records (by start) of a user-day whose
  stations differ (stays at one station are not jumps).

`record_metrics` attaches them to the records (what the generator's kernel does), `user_day_metrics`
gives the per-day table and the jump distances; `summarise` turns them into the figures compared
with the targets of the real data; `realism_stats` does both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from udfs.geo import haversine_km

# Targets measured on a real sample of the Telecom Shanghai data (docs/architecture.md section 5).
TARGETS = {
    "distinct_median": 2.0,
    "distinct_p90": 6.0,
    "rg_median_km": 1.0,
    "rg_p90_km": 9.0,
    "rg_zero_share": 0.25,
    "jump_median_km": 2.4,
    "jump_p90_km": 15.0,
    "records_per_active_day_mean": 8.5,
    "active_share": 0.37,
}


def record_metrics(records: pd.DataFrame) -> pd.DataFrame:
    """The metrics attached to the records themselves, aligned with `records` (same index).

    On the first record (by start) of each user-day: `day_records`, `day_distinct`, `day_rg_km`
    (null on the other records); on a record whose station differs from the previous record of
    its user-day: `jump_km`, the distance of that jump (null elsewhere). Why per record: the
    generator computes them in the same pass that makes the records, so the realism figures
    never need a second pass over millions of rows. Plain numpy over one sort (no groupby).
    """
    n = len(records)
    user = records["user"].to_numpy()
    start = records["start"].to_numpy().astype("datetime64[us]")
    order = np.lexsort((start, user))  # stable: by user, then start, ties in input order
    u, day = user[order], start[order].astype("datetime64[D]")
    lat = records["lat"].to_numpy(float)[order]
    lon = records["lon"].to_numpy(float)[order]
    loc = records["loc_id"].to_numpy()[order]
    out = {
        "day_records": np.full(n, np.nan),
        "day_distinct": np.full(n, np.nan),
        "day_rg_km": np.full(n, np.nan),
        "jump_km": np.full(n, np.nan),
    }
    if n:
        new_day = np.r_[True, (u[1:] != u[:-1]) | (day[1:] != day[:-1])]
        first = np.flatnonzero(new_day)
        size = np.diff(np.r_[first, n])
        group = np.cumsum(new_day) - 1
        c_lat = np.add.reduceat(lat, first) / size
        c_lon = np.add.reduceat(lon, first) / size
        d2 = haversine_km(lat, lon, c_lat[group], c_lon[group]) ** 2
        by_loc = np.lexsort((loc, group))  # records of a day next to each other, by station
        g_s, l_s = group[by_loc], loc[by_loc]
        fresh = np.r_[True, (g_s[1:] != g_s[:-1]) | (l_s[1:] != l_s[:-1])]
        at_first = order[first]
        out["day_records"][at_first] = size
        out["day_distinct"][at_first] = np.add.reduceat(fresh.astype(np.int64), first)
        out["day_rg_km"][at_first] = np.sqrt(np.add.reduceat(d2, first) / size)
        moved = np.flatnonzero(~new_day[1:] & (loc[1:] != loc[:-1])) + 1
        dist = haversine_km(lat[moved - 1], lon[moved - 1], lat[moved], lon[moved])
        out["jump_km"][order[moved]] = dist
    return pd.DataFrame(out, index=records.index)


def user_day_metrics(records: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Per user-day `user, day, n_records, n_distinct, rg_km` (by user and day), and all jump
    distances in km (by user and start).

    `records` needs columns user, start, lat, lon, loc_id; the input is not modified.
    """
    metrics = record_metrics(records)
    rows = pd.DataFrame(
        {
            "user": records["user"].to_numpy(),
            "start": records["start"].to_numpy().astype("datetime64[us]"),
        }
    ).join(metrics.reset_index(drop=True))
    rows = rows.sort_values(["user", "start"], kind="stable")
    first = rows[rows["day_records"].notna()]
    per_day = pd.DataFrame(
        {
            "user": first["user"].to_numpy(),
            "day": first["start"].to_numpy().astype("datetime64[D]"),
            "n_records": first["day_records"].to_numpy(np.int64),
            "n_distinct": first["day_distinct"].to_numpy(np.int64),
            "rg_km": first["day_rg_km"].to_numpy(float),
        }
    )
    jumps = rows["jump_km"].to_numpy(float)
    return per_day, jumps[~np.isnan(jumps)]


def summarise(
    per_day: pd.DataFrame, jumps: np.ndarray, *, users: int | None = None, days: int | None = None
) -> dict[str, Any]:
    """Figures of the realism targets; `active_share` needs the users and days of the run."""
    if len(per_day) == 0:
        return {"user_days": 0, "records": 0}
    distinct = per_day["n_distinct"].to_numpy(float)
    rg = per_day["rg_km"].to_numpy(float)
    n_rec = per_day["n_records"].to_numpy(float)
    jumps = np.asarray(jumps, float)
    out: dict[str, Any] = {
        "records": int(n_rec.sum()),
        "user_days": int(len(per_day)),
        "distinct_median": float(np.median(distinct)),
        "distinct_p90": float(np.percentile(distinct, 90)),
        "rg_median_km": float(np.median(rg)),
        "rg_p90_km": float(np.percentile(rg, 90)),
        "rg_zero_share": float(np.mean(rg < 1e-9)),
        "jump_median_km": float(np.median(jumps)) if len(jumps) else 0.0,
        "jump_p90_km": float(np.percentile(jumps, 90)) if len(jumps) else 0.0,
        "jumps": int(len(jumps)),
        "records_per_active_day_mean": float(n_rec.mean()),
        "records_per_active_day_median": float(np.median(n_rec)),
    }
    if users and days:
        out["active_share"] = float(len(per_day) / (users * days))
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}


def realism_stats(
    records: pd.DataFrame, *, users: int | None = None, days: int | None = None
) -> dict[str, Any]:
    """`summarise(*user_day_metrics(records))`."""
    per_day, jumps = user_day_metrics(records)
    return summarise(per_day, jumps, users=users, days=days)


def format_stats(stats: dict[str, Any]) -> str:
    """One line per figure, with the real-data target beside it when there is one."""
    lines = []
    for key, value in stats.items():
        target = TARGETS.get(key)
        lines.append(f"  {key:<30} {value:>12}" + (f"   (target {target})" if target else ""))
    return "\n".join(lines)

"""Realism statistics of Telecom-style records, per user-day (DESIGN.md section 5). No pyspark.

Definitions (a user-day = one user's records on one calendar day of `start`):
- `n_records`: records of the user-day;
- `n_distinct`: distinct stations of the user-day;
- `rg_km`: radius of gyration, sqrt(mean over the records of d(record, centroid)^2), centroid =
  mean latitude and longitude of the records, d = haversine km (each record weighs the same);
- `jump_km`: haversine distance between two consecutive records (by start) of a user-day whose
  stations differ (stays at one station are not jumps).

`user_day_metrics` gives the per-day table and the jump distances; `summarise` turns them into
the figures compared with the targets of the real data; `realism_stats` does both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from jobs.datagen_stations import EARTH_RADIUS_KM

# Targets measured on a real sample of the Telecom Shanghai data (DESIGN.md section 5).
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


def haversine_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Vectorised great-circle distance in km (Earth radius 6371.0088 km, as `haversine`)."""
    lat1, lon1, lat2, lon2 = (np.radians(np.asarray(x, float)) for x in (lat1, lon1, lat2, lon2))
    a = (
        np.sin((lat2 - lat1) / 2) ** 2
        + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    )
    return 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def user_day_metrics(records: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """Per user-day `user, day, n_records, n_distinct, rg_km`, and all jump distances (km).

    `records` needs columns user, start, lat, lon, loc_id; the input is not modified.
    """
    rec = records[["user", "start", "lat", "lon", "loc_id"]].sort_values(
        ["user", "start"], kind="stable"
    )
    day = rec["start"].to_numpy().astype("datetime64[D]")
    rec = rec.assign(day=day)
    keys = ["user", "day"]
    grouped = rec.groupby(keys, sort=True)
    centre = grouped[["lat", "lon"]].transform("mean")
    d2 = haversine_km(rec["lat"], rec["lon"], centre["lat"], centre["lon"]) ** 2
    per_day = (
        rec.assign(d2=d2)
        .groupby(keys, sort=True)
        .agg(n_records=("loc_id", "size"), n_distinct=("loc_id", "nunique"), rg_km=("d2", "mean"))
        .reset_index()
    )
    per_day["rg_km"] = np.sqrt(per_day["rg_km"].to_numpy())
    user = rec["user"].to_numpy()
    loc = rec["loc_id"].to_numpy()
    same_day = (user[1:] == user[:-1]) & (day[1:] == day[:-1])
    moved = same_day & (loc[1:] != loc[:-1])
    lat, lon = rec["lat"].to_numpy(), rec["lon"].to_numpy()
    jumps = haversine_km(lat[:-1][moved], lon[:-1][moved], lat[1:][moved], lon[1:][moved])
    return per_day, jumps


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

"""Reader dispatch and the per-bucket kernel: parse -> map -> dedupe -> shape. No pyspark.

`ingest_local` runs the whole ingestion on pandas (unit tests, and the oracle the Spark job is
checked against); `jobs.ingest` runs the same two kernels, `parse_file` per input file
(mapInPandas) and `finish_bucket` per hash bucket of users (applyInPandas).

Union row shape of `finish_bucket` (one frame, `kind` says which table a row belongs to):
kind in {point, quarantine, trajectory, slot_day}; columns UNION_COLUMNS, unused ones null.
"""

from __future__ import annotations

import datetime as dt
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from jobs import shaping
from jobs.locmap import Grid, Locations, LocationSet, derive_locations, map_points
from jobs.readers import checkins, plt, telecom
from jobs.readers.common import Reason, Window

UNION_COLUMNS = (
    "kind",
    "source",
    "line",
    "record",
    "reason",
    "user_id",
    "ts",
    "lat",
    "lon",
    "loc_id",
    "date",
    "traj_id",
    "loc_ids",
    "ts_list",
    "n",
    "slots",
)


@dataclass(frozen=True)
class ReaderOptions:
    """What a kernel needs to know, built from `IngestConfig` (picklable, small)."""

    source: str = "telecom"  # telecom | plt | checkins | slots48
    window: Window = Window()
    ts_unit: str = "datetime"
    time_origin: dt.datetime = dt.datetime(2000, 1, 1)
    max_distance_km: float = 1.0
    max_len: int = 8
    gap_hours: float = 3.0
    order: str = "time"


def parse_file(
    content: bytes, path: str, opts: ReaderOptions, header: str | None = None
) -> pd.DataFrame:
    """One input file's bytes -> parsed frame (gzip-compressed files are unpacked first)."""
    if path.endswith(".gz"):
        content = gzip.decompress(content)
    if opts.source == "plt":
        return plt.parse_plt(content, path, opts.window)
    if opts.source == "checkins":
        return checkins.parse_csv(
            content,
            path,
            opts.window,
            ts_unit=opts.ts_unit,
            ts_origin=opts.time_origin,
            header=header,
        )
    if opts.source == "telecom":
        return telecom.parse_csv(content, path, opts.window, header=header)
    raise ValueError(f"parse_file does not read source {opts.source!r}")


def finish_bucket(rows: pd.DataFrame, opts: ReaderOptions) -> pd.DataFrame:
    """Mapped rows of whole users -> union frame: accepted points, quarantined records
    (incl. duplicates found here), trajectories and slot days of these users."""
    rows = rows.reset_index(drop=True)
    reason = rows["reason"].to_numpy(dtype=object).copy()
    ok = pd.isna(reason)
    dup = np.zeros(len(rows), dtype=bool)
    dup[ok] = shaping.mark_duplicates(rows[ok])
    reason[dup] = Reason.DUPLICATE.value
    rows = rows.assign(reason=pd.Series(reason, dtype=object))
    accepted = rows[pd.isna(reason)]
    accepted = shaping.with_dates(accepted)
    traj = shaping.build_trajectories(
        accepted, max_len=opts.max_len, gap_hours=opts.gap_hours, order=opts.order
    )
    slots = shaping.build_slot_days(accepted)
    return union_frame(rows[~pd.isna(reason)], accepted, traj, slots)


def union_frame(
    quarantined: pd.DataFrame, points: pd.DataFrame, traj: pd.DataFrame, slots: pd.DataFrame
) -> pd.DataFrame:
    """Stack the four outputs into one frame with UNION_COLUMNS (the applyInPandas schema)."""
    parts = [
        pd.DataFrame(
            {
                "kind": "quarantine",
                "source": quarantined["source"],
                "line": quarantined["line"],
                "record": quarantined["record"],
                "reason": quarantined["reason"],
                "user_id": quarantined["user_id"],
            }
        ),
        pd.DataFrame(
            {
                "kind": "point",
                "source": points["source"],
                "line": points["line"],
                "user_id": points["user_id"],
                "ts": points["ts"],
                "lat": points["lat"],
                "lon": points["lon"],
                "loc_id": points["loc_id"],
                "date": points["date"],
            }
        ),
        pd.DataFrame(
            {
                "kind": "trajectory",
                "user_id": traj["user_id"],
                "date": traj["date"],
                "traj_id": traj["traj_id"],
                "loc_ids": traj["loc_ids"],
                "ts_list": traj["ts"],
                "n": traj["n"],
            }
        ),
        pd.DataFrame(
            {
                "kind": "slot_day",
                "user_id": slots["user_id"],
                "date": slots["date"],
                "slots": slots["slots"],
            }
        ),
    ]
    out = (
        pd.concat([p for p in parts if len(p)], ignore_index=True)
        if any(len(p) for p in parts)
        else pd.DataFrame({c: [] for c in UNION_COLUMNS})
    )
    for col in UNION_COLUMNS:
        if col not in out.columns:
            out[col] = None
    out = out[list(UNION_COLUMNS)]
    for col in ("ts", "date"):
        out[col] = pd.to_datetime(out[col])
    for col in ("line", "loc_id", "traj_id", "n"):
        out[col] = out[col].astype("Int64")
    for col in ("lat", "lon"):
        out[col] = out[col].astype(np.float64)
    for col in ("source", "record", "reason", "user_id", "loc_ids", "ts_list", "slots"):
        values = out[col].astype(object)
        out[col] = values.where(values.notna(), None)
    return out


def split_union(union: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Union frame -> {points, quarantine, trajectories, slot_days} (for tests and local runs)."""
    kinds = {
        "point": "points",
        "quarantine": "quarantine",
        "trajectory": "trajectories",
        "slot_day": "slot_days",
    }
    return {
        name: union[union["kind"] == kind].reset_index(drop=True) for kind, name in kinds.items()
    }


def ingest_local(
    files: list[Path], opts: ReaderOptions, locations: Locations | None
) -> tuple[dict[str, pd.DataFrame], Locations]:
    """The whole ingestion of `files` on pandas. `locations=None`: derived from the records
    (check-ins without a locations file). Returns (tables, location set used)."""
    parsed = pd.concat(
        [parse_file(Path(f).read_bytes(), str(f), opts) for f in files], ignore_index=True
    )
    if locations is None:
        locations = derive_locations(parsed)
    mapped = map_points(parsed, locations, opts.max_distance_km)
    return split_union(finish_bucket(mapped, opts)), locations


def locations_frame(locations: Locations, used: np.ndarray) -> pd.DataFrame:
    """The published location set: the whole set, or for a box-less grid the cells in use."""
    if isinstance(locations, LocationSet):
        return locations.frame()
    if isinstance(locations, Grid) and locations.bbox is not None:
        return locations.frame()
    return locations.frame(used)

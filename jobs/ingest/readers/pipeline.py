"""Reader dispatch and the per-bucket kernel: parse -> map -> dedupe -> shape. No pyspark.

`ingest_local` runs the whole ingestion on pandas (unit tests, and the oracle the Spark job is
checked against); `jobs.ingest.stage` runs the same two kernels, `parse_file` per input file
(mapInArrow) and `finish_bucket` per hash bucket of users (applyInArrow), and stacks a bucket's
outputs with `union_table`.

Union row shape of `union_table` (one Arrow table, `kind` says which table a row belongs to):
kind in {point, quarantine, trajectory, slot_day}; columns `arrow.UNION_COLUMNS`, unused ones
null (points carry no source or line: only quarantined records need to say where they were).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.ingest import shaping
from jobs.ingest.locmap import Grid, Locations, LocationSet, derive_locations, map_points
from jobs.ingest.readers import checkins, npy, plt
from jobs.ingest.readers.arrow import UNION_ARROW, from_arrow, list_array, timestamp_array
from jobs.ingest.readers.common import Reason, Window
from jobs.ingest.readers.delimited import TableSpec, file_date, parse_delimited
from jobs.ingest.readers.sources import SOURCES
from udfs.errors import InputDataError


@dataclass(frozen=True)
class ReaderOptions:
    """What a kernel needs to know, built from `IngestConfig` (picklable, small)."""

    source: str = "telecom"  # telecom | plt | checkins | slots48
    window: Window = Window()
    ts_unit: str = "datetime"
    ts_format: str | None = None
    time_origin: dt.datetime = dt.datetime(2000, 1, 1)
    max_distance_km: float = 1.0
    max_len: int = 8
    gap_hours: float = 3.0
    order: str = "time"
    segment: str = "day"
    min_len: int = 1
    utc_offsets: str = "local"
    sep: str = ","
    header: bool = True
    columns: tuple[str, ...] = ()
    encoding: str = "utf-8"
    quoted: bool = False
    date_from: str | None = None  # regex on the file name: the day of clock-time records
    date_format: str | None = None  # strptime of the date it captures (None: ISO 8601)
    date_year: int | None = None  # the year of those dates when date_format holds none

    @classmethod
    def from_config(cls, icfg) -> ReaderOptions:
        """The options of an `IngestConfig`: its fields of the same name, and the four that
        take another shape here (the window, the column tuple, the quoting, the file year)."""
        same = {f.name: getattr(icfg, f.name) for f in dataclasses.fields(cls)
                if f.name in type(icfg).model_fields}
        return cls(**{**same, "window": Window(icfg.window_start, icfg.window_end),
                      "columns": tuple(icfg.columns or ()), "quoted": icfg.quoting == "csv",
                      "date_year": icfg.file_date_year() if icfg.date_from else None})


def table_spec(opts: ReaderOptions) -> TableSpec:
    """The delimited layout and timestamp rules of a telecom or check-in source."""
    base = SOURCES[opts.source].spec or checkins.spec()
    return dataclasses.replace(
        base, sep=opts.sep, header=opts.header, columns=tuple(opts.columns),
        encoding=opts.encoding, quoted=opts.quoted, ts_unit=opts.ts_unit, ts_format=opts.ts_format,
        ts_origin=opts.time_origin,
        utc_offsets=opts.utc_offsets)


def parse_file(
    content: bytes, path: str, opts: ReaderOptions, header: str | None = None
) -> pd.DataFrame:
    """One input file's bytes -> parsed frame (gzip-compressed files are unpacked first)."""
    if path.endswith(".gz"):
        try:
            content = gzip.decompress(content)
        except (EOFError, OSError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise InputDataError(
                f"{path}: not a whole gzip file ({exc}): it was cut short or is corrupt, so "
                "its records cannot all be read; copy or export it again"
            ) from None
    reader = SOURCES[opts.source].reader
    if reader == "plt":
        return plt.parse_plt(content, path, opts.window)
    if npy.is_npy(path):
        return npy.parse_npy(content, path, npy.array_spec(table_spec(opts)), opts.window)
    if reader == "delimited":
        spec = table_spec(opts)
        if opts.date_from:
            spec = dataclasses.replace(spec, day=file_date(path, opts.date_from,
                                                           opts.date_format, opts.date_year))
        return parse_delimited(content, path, spec, opts.window, header=header)
    raise ValueError(f"parse_file does not read source {opts.source!r}")


@dataclass(frozen=True)
class BucketOutput:
    """What `finish_bucket` makes of the rows of some users (pandas frames, see `shaping`)."""

    quarantined: pd.DataFrame  # the rejected rows, reason filled (duplicates included)
    points: pd.DataFrame  # the accepted rows, with `date`
    trajectories: pd.DataFrame
    slot_days: pd.DataFrame
    # Pieces shorter than ingest.min_len: counted (a `trajectory` row with a reason), not written.
    short_trajectories: pd.DataFrame | None = None


def finish_bucket(rows: pd.DataFrame, opts: ReaderOptions) -> BucketOutput:
    """Mapped rows of whole users -> accepted points, quarantined records (incl. duplicates
    found here), trajectories and slot days of these users.

    User ids are replaced by integer codes in id order for the work (every sort and group then
    compares integers; the order, hence duplicate choice and trajectory ids, is the same as by
    the id text) and put back in the outputs.
    """
    rows = rows.reset_index(drop=True)
    codes, users = pd.factorize(rows["user_id"], sort=True)
    users = np.asarray(users, dtype=object)
    work = rows.assign(user_id=codes)
    reason = rows["reason"].to_numpy(dtype=object).copy()
    ok = pd.isna(reason)
    dup = np.zeros(len(rows), dtype=bool)
    dup[ok] = shaping.mark_duplicates(work[ok])
    reason[dup] = Reason.DUPLICATE.value
    accepted = pd.isna(reason)
    points = shaping.with_dates(work[accepted])
    traj, short = shaping.cut_trajectories(
        points, max_len=opts.max_len, gap_hours=opts.gap_hours, order=opts.order,
        segment=opts.segment, min_len=opts.min_len,
    )
    slots = shaping.build_slot_days(points)
    quarantined = rows[~accepted].assign(reason=reason[~accepted])
    return BucketOutput(
        quarantined=quarantined,
        points=points.assign(user_id=users[points["user_id"].to_numpy(np.int64)]),
        trajectories=traj.assign(user_id=users[traj["user_id"].to_numpy(np.int64)]),
        slot_days=slots.assign(user_id=users[slots["user_id"].to_numpy(np.int64)]),
        short_trajectories=short.assign(user_id=users[short["user_id"].to_numpy(np.int64)]),
    )


def union_table(out: BucketOutput) -> pa.Table:
    """Stack the four outputs into one Arrow table of UNION_ARROW (`kind` says which is which).

    Built column by column in Arrow: a column a kind does not have is an all-null array.
    """
    q, p, t, s = out.quarantined, out.points, out.trajectories, out.slot_days
    short = out.short_trajectories
    if short is None:
        short = t.iloc[:0]

    def trajectory(frame: pd.DataFrame, reason: str | None) -> dict[str, pd.Series]:
        cols = {"user_id": frame["user_id"], "date": frame["date"], "traj_id": frame["traj_id"],
                "loc_ids": frame["loc_ids"], "ts_list": frame["ts"], "n": frame["n"]}
        if reason is not None:
            cols["reason"] = pd.Series([reason] * len(frame), dtype=object)
        return cols

    parts = [
        ("quarantine", q, {c: q[c] for c in ("source", "line", "record", "reason", "user_id")}),
        ("point", p, {c: p[c] for c in ("user_id", "ts", "lat", "lon", "loc_id", "date")}),
        ("trajectory", t, trajectory(t, None)),
        ("trajectory", short, trajectory(short, shaping.SHORTER_THAN_MIN_LEN)),
        ("slot_day", s, {c: s[c] for c in ("user_id", "date", "slots")}),
    ]
    tables = [_part(kind, len(frame), cols) for kind, frame, cols in parts if len(frame)]
    return pa.concat_tables(tables) if tables else UNION_ARROW.empty_table()


def _part(kind: str, n: int, columns: dict[str, pd.Series]) -> pa.Table:
    arrays = []
    for field in UNION_ARROW:
        if field.name == "kind":
            arrays.append(pa.repeat(pa.scalar(kind), n))
        elif field.name not in columns:
            arrays.append(pa.nulls(n, field.type))
        elif pa.types.is_list(field.type):
            arrays.append(list_array(columns[field.name].to_numpy(dtype=object), field.type))
        elif pa.types.is_timestamp(field.type):
            arrays.append(timestamp_array(columns[field.name], field.type))
        else:
            col = columns[field.name]
            values = col.to_numpy(dtype=object) if col.dtype == object else col.to_numpy()
            arrays.append(pa.array(values, type=field.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=UNION_ARROW)


def split_union(union: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Union frame -> {points, quarantine, trajectories, short_trajectories, slot_days} (for
    tests and local runs; `short_trajectories` are the pieces under ingest.min_len)."""
    kinds = {
        "point": "points",
        "quarantine": "quarantine",
        "trajectory": "trajectories",
        "slot_day": "slot_days",
    }
    out = {
        name: union[(union["kind"] == kind) & union["reason"].isna()].reset_index(drop=True)
        for kind, name in kinds.items() if kind != "quarantine"
    }
    out["quarantine"] = union[union["kind"] == "quarantine"].reset_index(drop=True)
    short = (union["kind"] == "trajectory") & union["reason"].notna()
    out["short_trajectories"] = union[short].reset_index(drop=True)
    return out


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
    union = from_arrow(union_table(finish_bucket(mapped, opts)))
    nullable_ints = {c: "Int64" for c in ("line", "loc_id", "traj_id", "n")}  # not float
    return split_union(union.astype(nullable_ints)), locations


def locations_frame(locations: Locations, used: np.ndarray) -> pd.DataFrame:
    """The published location set: the whole set, or for a box-less grid the cells in use."""
    if isinstance(locations, LocationSet):
        return locations.frame()
    if isinstance(locations, Grid) and locations.bbox is not None:
        return locations.frame()
    return locations.frame(used)

"""`trajpriv ingest`: raw files -> points, trajectories, slot days, quarantine, locations.

Thin Spark stage over the pure kernels in `jobs.readers` (parse), `jobs.locmap` (map to P) and
`jobs.shaping` (trajectories, slot days). Plan, then write:
1. the driver resolves the inputs, checks every file's header and loads the location set;
   anything wrong ends the job here with InputDataError naming the file and why;
2. files -> parsed rows: one `mapInPandas` call per batch of files (`binaryFile` source, so the
   kernel sees whole files with their line numbers and raw bytes), mapping points to P;
3. rows -> `groupBy(hash bucket of user).applyInPandas`: duplicates, trajectories, slot days;
4. the union of all outputs is staged once as Parquet (nothing is recomputed), counted, and
   checked (records read = accepted + quarantined; at least one record accepted);
5. only then the five tables are written, each replacing this dataset's rows.

Row shapes: file (path, content) -> parsed (PARSED schema, one row per record) ->
union (kind, ..., see UNION_SCHEMA) -> the tables of DESIGN.md section 3.
"""

from __future__ import annotations

import argparse
import gzip
import logging
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

if __package__ in (None, ""):  # `spark-submit jobs/ingest.py`: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.config import Config, IngestConfig
from jobs.locmap import Grid, Locations, derive_locations, load_locations, map_points
from jobs.readers import slots48, telecom
from jobs.readers.common import Window
from jobs.readers.delimited import first_line, resolve_header
from jobs.readers.pipeline import (
    UNION_COLUMNS,
    ReaderOptions,
    finish_bucket,
    locations_frame,
    parse_file,
    union_frame,
)
from udfs.errors import InputDataError

log = logging.getLogger(__name__)

PARSED_DDL = (
    "source string, line long, record string, user_id string, ts timestamp, "
    "end_ts timestamp, lat double, lon double, given_loc string, reason string, loc_id long"
)
UNION_DDL = (
    "kind string, source string, line long, record string, reason string, user_id string, "
    "ts timestamp, lat double, lon double, loc_id long, date timestamp, traj_id long, "
    "loc_ids array<int>, ts_list array<timestamp>, n long, slots array<int>"
)
PARSED_COLUMNS = [c.split()[0] for c in PARSED_DDL.split(", ")]
_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"),  # Spark's TimestampType (session zone UTC)
    "array<int>": pa.list_(pa.int32()),
    "array<timestamp>": pa.list_(pa.timestamp("us", tz="UTC")),
}


def arrow_schema(ddl: str) -> pa.Schema:
    return pa.schema(
        [(c.split(" ", 1)[0], _ARROW_TYPES[c.split(" ", 1)[1]]) for c in ddl.split(", ")]
    )


PARSED_ARROW = arrow_schema(PARSED_DDL)
UNION_ARROW = arrow_schema(UNION_DDL)


def to_arrow(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A kernel's pandas frame -> Arrow table of `schema` (lists built in C++, no per-row Python).

    Naive timestamps are UTC wall times (the session zone); they are floored to microseconds.
    """
    arrays = []
    for f in schema:
        col = frame[f.name]
        if pa.types.is_list(f.type):
            arr = pa.array(col.to_numpy(dtype=object), from_pandas=True)
            if pa.types.is_null(arr.type):
                arr = pa.nulls(len(col), f.type)
            elif pa.types.is_timestamp(f.type.value_type):
                arr = arr.cast(pa.list_(pa.timestamp("us"))).cast(f.type)
            else:
                arr = arr.cast(f.type)
        elif pa.types.is_timestamp(f.type):
            ts = pd.to_datetime(col).dt.floor("us")
            arr = pa.array(ts, from_pandas=True).cast(pa.timestamp("us")).cast(f.type)
        else:
            arr = pa.array(col, type=f.type, from_pandas=True)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """Arrow rows -> the kernels' pandas shape (naive datetime64[ns] timestamps)."""
    frame = table.to_pandas()
    for name, typ in zip(table.schema.names, table.schema.types, strict=True):
        if pa.types.is_timestamp(typ):
            col = frame[name]
            if getattr(col.dt, "tz", None) is not None:
                col = col.dt.tz_convert("UTC").dt.tz_localize(None)
            frame[name] = col.astype("datetime64[ns]")
    return frame


OUT_BATCH = 100_000


@dataclass
class InputPlan:
    """Everything the Spark part needs, checked in the driver before any Spark work."""

    kind: str  # text | parquet | slots48
    files: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    locations: Locations | None = None  # None: derive from the records (check-ins)
    opts: ReaderOptions = field(default_factory=ReaderOptions)
    where: str = ""


def reader_options(icfg: IngestConfig) -> ReaderOptions:
    return ReaderOptions(
        source=icfg.source,
        window=Window(icfg.window_start, icfg.window_end),
        ts_unit=icfg.ts_unit,
        time_origin=icfg.time_origin,
        max_distance_km=icfg.max_distance_km,
        max_len=icfg.max_len,
        gap_hours=icfg.gap_hours,
        order=icfg.order,
    )


def input_paths(cfg: Config) -> tuple[Path, Path | None]:
    """(input path, location file) with the telecom landing defaults filled in."""
    icfg = cfg.ingest
    landing = cfg.storage.landing / cfg.dataset
    path = icfg.path if icfg.path is not None else None
    locs = icfg.locations_path
    if icfg.source == "telecom":
        path = path or landing / "records"
        if locs is None and (landing / "stations.csv").is_file():
            locs = landing / "stations.csv"
    if path is None:
        raise InputDataError(f"ingest.path is not set: source {icfg.source!r} needs an input path")
    return Path(path), (Path(locs) if locs is not None else None)


def _list_files(path: Path, suffixes: tuple[str, ...]) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputDataError(f"input path {path} does not exist")
    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and not p.name.startswith((".", "_"))
        and (not suffixes or p.name.lower().endswith(suffixes))
    )


def plan_inputs(cfg: Config) -> InputPlan:
    """Resolve and check the inputs in the driver (InputDataError with file and reason)."""
    icfg = cfg.ingest
    path, locs = input_paths(cfg)
    opts = reader_options(icfg)
    if icfg.source == "slots48":
        data, _ = slots48.resolve(path)
        return InputPlan("slots48", [str(data)], opts=opts, where=str(path))
    if icfg.source == "plt":
        files = _list_files(path, (".plt", ".plt.gz"))
        want = "*.plt files"
    else:
        files = _list_files(path, (".csv", ".csv.gz", ".txt", ".parquet"))
        want = "*.csv or *.parquet files"
    if not files:
        raise InputDataError(f"input path {path} holds no {want}")
    if all(f.stat().st_size == 0 for f in files):
        raise InputDataError(f"input {path} is empty: {len(files)} file(s), all of 0 bytes")
    files = [f for f in files if f.stat().st_size > 0]
    if icfg.source == "plt":
        locations: Locations | None = (
            load_locations(locs, icfg.locations_format)
            if locs is not None
            else Grid(icfg.grid_deg, icfg.grid_bbox)
        )
    elif locs is not None:
        locations = load_locations(locs, icfg.locations_format)
    elif icfg.source == "checkins":
        locations = None
    else:
        raise InputDataError(
            f"telecom records at {path} need a location file: set ingest.locations_path "
            f"(or run datagen, which writes {cfg.storage.landing / cfg.dataset / 'stations.csv'})"
        )
    parquet = [f for f in files if f.name.lower().endswith(".parquet")]
    if parquet and icfg.source != "telecom":
        raise InputDataError(f"{parquet[0]}: Parquet input is read for source telecom only")
    if parquet and len(parquet) != len(files):
        raise InputDataError(f"input {path} mixes Parquet and text files; keep one format")
    for f in parquet:
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(f)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise InputDataError(f"{f}: not a readable Parquet file ({exc})") from None
        names = schema.names
        nanos = [x.name for x in schema if pa.types.is_timestamp(x.type) and x.type.unit == "ns"]
        if nanos:
            raise InputDataError(
                f"{f}: columns {nanos} hold nanosecond timestamps, which Spark cannot read; "
                "write them in microseconds (pandas: to_parquet(..., coerce_timestamps='us'))"
            )
        missing = telecom.missing_roles(names)
        if missing:
            raise InputDataError(f"{f}: Parquet records lack columns for {missing} (have {names})")
    plan = InputPlan(
        "parquet" if parquet else "text",
        [str(f) for f in files],
        locations=locations,
        opts=opts,
        where=str(path),
    )
    if plan.kind == "text" and icfg.source != "plt":
        spec = telecom.SPEC if icfg.source == "telecom" else None
        for f in files:
            head = _head(f)
            if spec is None:
                from jobs.readers.checkins import spec as checkin_spec

                spec = checkin_spec(icfg.ts_unit, icfg.time_origin)
            resolve_header(head, spec, str(f))  # raises naming the file and the missing column
            plan.headers[str(f)] = head
    return plan


def _head(path: Path) -> str:
    if path.name.lower().endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            return handle.readline().decode("utf-8", errors="backslashreplace").rstrip("\r\n")
    return first_line(str(path))


def _local(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def _with_locations(parsed: pd.DataFrame, locations: Locations | None, max_km: float):
    if locations is None:
        return parsed.assign(loc_id=np.int64(-1))
    return map_points(parsed, locations, max_km)


def parsed_rows(spark, plan: InputPlan, locations: Locations | None):
    """Files -> parsed and mapped rows (Spark DataFrame, PARSED_DDL), via mapInArrow."""
    from pyspark.sql import functions as F

    opts, headers = plan.opts, plan.headers

    if plan.kind == "parquet":
        raw = spark.read.parquet(*plan.files)
        missing = telecom.missing_roles(raw.columns)
        if missing:
            raise InputDataError(
                f"{plan.where}: Parquet records lack columns for {missing} (have {raw.columns})"
            )
        raw = raw.withColumn("_file", F.input_file_name()).withColumn(
            "_row", F.monotonically_increasing_id()
        )

        def from_frames(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for rb in batches:
                batch = from_arrow(pa.Table.from_batches([rb]))
                parsed = telecom.parse_frame(batch.drop(columns=["_file", "_row"]), "", opts.window)
                parsed["source"] = batch["_file"].map(_local).to_numpy()
                parsed["line"] = batch["_row"].to_numpy() + 1
                mapped = _with_locations(parsed, locations, opts.max_distance_km)
                yield from to_arrow(mapped, PARSED_ARROW).to_batches()

        return raw.mapInArrow(from_frames, PARSED_DDL)

    files = spark.read.format("binaryFile").load(plan.files).select("path", "content")

    def from_files(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            uris = rb.column("path").to_pylist()
            contents = rb.column("content").to_pylist()
            for uri, content in zip(uris, contents, strict=True):
                path = _local(uri)
                parsed = parse_file(content, path, opts, header=headers.get(path))
                mapped = _with_locations(parsed, locations, opts.max_distance_km)
                yield from to_arrow(mapped, PARSED_ARROW).to_batches(max_chunksize=OUT_BATCH)

    return files.mapInArrow(from_files, PARSED_DDL)


def union_rows(spark, plan: InputPlan, buckets: int):
    """The staged union of every output row (Spark DataFrame, UNION_DDL) and the location set."""
    from pyspark.sql import functions as F

    locations = plan.locations
    if locations is None:  # check-ins without a location file: P from their own ids
        parsed = parsed_rows(spark, plan, None)
        agg = (
            parsed.where("reason IS NULL AND given_loc IS NOT NULL")
            .groupBy("given_loc")
            .agg(F.avg("lat").alias("lat"), F.avg("lon").alias("lon"))
            .toPandas()
        )
        if agg.empty:
            counts = {r["reason"]: r["count"] for r in parsed.groupBy("reason").count().collect()}
            raise InputDataError(
                f"no record in {plan.where} was accepted: none is valid and names a location id, "
                f"so there is no location set (set ingest.locations_path); records by reason "
                f"{counts}; first rejected: {_examples(parsed.where('reason IS NOT NULL'))}. "
                "Nothing was written."
            )
        locations = derive_locations(agg.assign(reason=None))
    parsed = parsed_rows(spark, plan, locations)
    opts = plan.opts

    def kernel(rows: pa.Table) -> pa.Table:
        frame = from_arrow(rows.drop_columns(["_bucket"]))
        return to_arrow(finish_bucket(frame, opts), UNION_ARROW)

    bucket = F.pmod(F.xxhash64(F.coalesce("user_id", F.lit(""))), F.lit(buckets))
    out = parsed.withColumn("_bucket", bucket).groupBy("_bucket").applyInArrow(kernel, UNION_DDL)
    return out, locations


def slots48_union(spark, cfg: Config, plan: InputPlan):
    """The 48-slot format: small, read on the driver; the same union shape as the others."""
    from jobs import shaping

    icfg = cfg.ingest
    path, locs = input_paths(cfg)
    frame, gps = slots48.read_slots(path, locs, icfg.time_origin.date())
    locations = load_locations(gps, icfg.locations_format if locs is not None else "gps")
    ok = frame["reason"].isna()
    days = frame[ok].reset_index(drop=True)
    index = np.full(int(locations.loc_id.max()) + 1, -1, dtype=np.int64)
    index[locations.loc_id] = np.arange(len(locations))
    points = shaping.points_from_slot_days(days, locations.lat, locations.lon, index)
    points = points.assign(
        source=np.repeat(days["source"].to_numpy(), shaping.SLOTS_PER_DAY),
        line=np.repeat(days["line"].to_numpy(), shaping.SLOTS_PER_DAY),
    )
    traj = shaping.build_trajectories(points, max_len=icfg.max_len, gap_hours=icfg.gap_hours)
    union = union_frame(frame[~ok], points, traj, days[["user_id", "date", "slots"]])
    # One input line = one record: the points of a day are not records of their own.
    union.loc[union["kind"] == "point", "line"] = pd.NA
    n_read = len(frame)
    table = to_arrow(union[list(UNION_COLUMNS)], UNION_ARROW)
    return spark.createDataFrame(table, UNION_DDL), locations, n_read


def figures_of(staged, plan: InputPlan, n_read_override: int | None) -> dict[str, Any]:
    counts = {
        (r["kind"], r["reason"]): r["count"]
        for r in staged.groupBy("kind", "reason").count().collect()
    }
    quarantined = {reason: int(c) for (kind, reason), c in counts.items() if kind == "quarantine"}
    accepted = int(counts.get(("point", None), 0))
    if n_read_override is not None:
        accepted_records = n_read_override - sum(quarantined.values())
    else:
        accepted_records = accepted
    return {
        "source": plan.opts.source,
        "input": plan.where,
        "files": len(plan.files),
        "records_read": accepted_records + sum(quarantined.values()),
        "records_accepted": accepted_records,
        "records_quarantined": sum(quarantined.values()),
        "quarantined_by_reason": dict(sorted(quarantined.items())),
        "points": accepted,
        "trajectories": int(counts.get(("trajectory", None), 0)),
        "slot_days": int(counts.get(("slot_day", None), 0)),
    }


def _examples(rejected, k: int = 3) -> str:
    """'file line N: reason (record)' for the first k rejected rows (file, line order)."""
    first = (
        rejected.orderBy("source", "line")
        .select("source", "line", "reason", "record")
        .limit(k)
        .collect()
    )
    return "; ".join(
        f"{r['source']} line {r['line']}: {r['reason']} ({(r['record'] or '')[:60]!r})"
        for r in first
    )


def _refuse_if_nothing_accepted(staged, figures: dict[str, Any], plan: InputPlan) -> None:
    if figures["records_read"] == 0:
        raise InputDataError(f"input {plan.where} holds no records (only headers or blank lines)")
    if figures["records_accepted"] > 0:
        return
    examples = _examples(staged.where("kind = 'quarantine'"))
    raise InputDataError(
        f"no record of {figures['records_read']} in {plan.where} was accepted "
        f"({figures['quarantined_by_reason']}); first rejected: {examples}. Nothing was written."
    )


def write_tables(
    spark, cfg: Config, staged, locations: Locations, ctx, figures: dict[str, Any]
) -> int:
    """Write the five tables from the staged union; returns the number of locations."""
    from pyspark.sql import functions as F

    from jobs.catalog import write_table
    from jobs.session import PUB_DB, RAW_DB

    ds = F.lit(cfg.dataset).alias("dataset")
    scope = {"dataset": cfg.dataset}
    date = F.to_date("date").alias("date")
    points = staged.where("kind = 'point'").select(
        ds, "user_id", "ts", "lat", "lon", F.col("loc_id").cast("int").alias("loc_id"), date
    )
    traj = staged.where("kind = 'trajectory'").select(
        ds,
        "user_id",
        F.col("traj_id").cast("int").alias("traj_id"),
        date,
        "loc_ids",
        F.col("ts_list").alias("ts"),
        F.col("n").cast("int").alias("n"),
    )
    slot_days = staged.where("kind = 'slot_day'").select(ds, "user_id", date, "slots")
    where = F.when(F.col("line").isNotNull(), F.concat_ws(":", "source", F.col("line")))
    quarantine = staged.where("kind = 'quarantine'").select(
        ds,
        F.coalesce(where, F.col("source")).alias("source"),
        "record",
        "reason",
        F.lit(ctx.started_at).cast("timestamp").alias("ingested_at"),
    )
    if isinstance(locations, Grid) and locations.bbox is None:
        used = np.array([r[0] for r in points.select("loc_id").distinct().collect()], np.int64)
    else:
        used = np.zeros(0, dtype=np.int64)
    loc_pd = locations_frame(locations, used).assign(dataset=cfg.dataset)
    loc_df = spark.createDataFrame(
        loc_pd[["dataset", "loc_id", "lat", "lon"]].astype({"loc_id": np.int32}),
        "dataset string, loc_id int, lat double, lon double",
    )
    timings: dict[str, float] = {}
    by_date = ["dataset", "date"]
    for name, df, parts in (
        (f"{RAW_DB}.points", points, by_date),
        (f"{RAW_DB}.trajectories", traj, by_date),
        (f"{RAW_DB}.slot_days", slot_days, by_date),
        (f"{RAW_DB}.quarantine", quarantine, ["dataset"]),
        (f"{PUB_DB}.locations", loc_df, ["dataset"]),
    ):
        t0 = time.perf_counter()
        if "date" in parts:  # one writer per day: a few files per partition, not one per task
            df = df.repartition("date")
        write_table(df, name, partition_by=parts, replace=scope)
        timings[name.split(".")[1]] = round(time.perf_counter() - t0, 2)
    figures["write_s"] = timings
    return len(loc_pd)


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    """The stage: plan, parse and shape into a staging area, check, then write the tables."""
    t0 = time.perf_counter()
    plan = plan_inputs(cfg)
    staging = cfg.storage.root.resolve() / "staging" / f"ingest-{ctx.run_id}"
    n_read = None
    try:
        if plan.kind == "slots48":
            union, locations, n_read = slots48_union(spark, cfg, plan)
        else:
            union, locations = union_rows(spark, plan, cfg.ingest.buckets)
        union.write.mode("overwrite").parquet(str(staging))
        staged = spark.read.parquet(str(staging))
        figures = figures_of(staged, plan, n_read)
        _refuse_if_nothing_accepted(staged, figures, plan)
        t_staged = time.perf_counter() - t0
        figures["locations"] = write_tables(spark, cfg, staged, locations, ctx, figures)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    wall = time.perf_counter() - t0
    figures["parse_shape_s"] = round(t_staged, 2)
    figures["records_per_s"] = round(figures["records_read"] / max(wall, 1e-9), 1)
    log.info(
        "ingest %s: read %d, accepted %d, quarantined %s",
        cfg.dataset,
        figures["records_read"],
        figures["records_accepted"],
        figures["quarantined_by_reason"],
    )
    return figures


def add_args(parser: argparse.ArgumentParser) -> None:
    """No stage-specific arguments (everything is in the `ingest` config section)."""


if __name__ == "__main__":
    from jobs.stage import main

    sys.exit(main("ingest", run))

"""`trajpriv ingest`: raw files -> points, trajectories, slot days, quarantine, locations.

Thin Spark stage over the pure kernels in `jobs.ingest.readers` (parse), `jobs.ingest.locmap`
(map to P) and `jobs.ingest.shaping` (trajectories, slot days). Plan, then write:
1. the driver resolves the inputs, checks every file's header and loads the location set
   (`jobs.ingest.readers.plan`); anything wrong ends the job here with InputDataError naming the
   file;
2. files -> parsed rows: one `mapInArrow` call per batch of files (`binaryFile` source, so the
   kernel sees whole files with their line numbers and raw bytes), mapping points to P; a row
   names its file by number (its rank in the sorted file list), not by path;
3. rows -> `repartition(user)` then one kernel call per partition (`mapInArrow` over the whole
   partition, which holds whole users): duplicates, trajectories, slot days, stacked into one
   union (`jobs.ingest.readers.pipeline.union_table`);
4. the union is staged once as Parquet (nothing is recomputed) and counted in one pass, by kind,
   reason and date (records read = accepted + quarantined; at least one record accepted);
5. only then the five tables are written, each replacing this dataset's rows; the dates counted
   in 4 tell each write which partitions it covers, so no write scans its data twice.

Row shapes: file (path, content) -> parsed (`arrow.PARSED_DDL`, one row per record) ->
union (`arrow.UNION_DDL`) -> the tables of docs/architecture.md section 3.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.config import Config
from jobs.ingest.locmap import (
    Grid,
    Locations,
    derive_locations,
    load_locations,
    location_figures,
    map_points,
)
from jobs.ingest.readers import slots48, telecom
from jobs.ingest.readers.arrow import PARSED_ARROW, PARSED_DDL, UNION_DDL, from_arrow, to_arrow
from jobs.ingest.readers.pipeline import (
    BucketOutput,
    finish_bucket,
    locations_frame,
    parse_file,
    union_table,
)
from jobs.ingest.readers.plan import (  # noqa: F401 (re-exported: tests and tools plan without Spark)
    InputPlan,
    input_paths,
    plan_inputs,
    reader_options,
)
from jobs.spark.per_user import per_partition
from jobs.spark.tables import LOCATIONS, POINTS, QUARANTINE, SLOT_DAYS, TRAJECTORIES
from udfs.errors import InputDataError

log = logging.getLogger(__name__)

OUT_BATCH = 100_000  # rows per Arrow batch a kernel hands back to the JVM
GIVEN_DDL = PARSED_DDL + ", given_loc string"  # parsed rows that still carry the given id
GIVEN_ARROW = PARSED_ARROW.append(pa.field("given_loc", pa.string()))


#: Figures of an ingest run that go to `trajpriv_pub.runs` and the console line: settings and
#: facts public by design (the dataset, the source and input path of the config, the size of
#: the published `trajpriv_pub.locations`, a grid's cells, the wall time). Every count of the
#: raw data (records read, accepted, quarantined by reason, points, trajectories, dropped
#: pieces, slot days, files) and the phase timings and rate (records_per_s = records / time)
#: are exact raw-derived figures: they stay in the trusted run folder
#: `<storage.root>/runs/<run_id>/figures.json` (0600), whose path the console line names.
PUBLIC_FIGURES = ("dataset", "source", "input", "locations", "location_set", "grid_km",
                  "grid_bbox", "grid_cells", "trusted_figures", "finished_ingests", "wall_s")

_GLOB_CHARS = "\\*?[]{}"


def literal_paths(files: list[str]) -> list[str]:
    """The planned files as Hadoop path patterns matching only themselves: Spark expands
    `*?[]{}` in a path, so `day[1].csv` named no file (PATH_NOT_FOUND) until escaped."""
    return ["".join(f"\\{c}" if c in _GLOB_CHARS else c for c in f) for f in files]


def _local(uri: str) -> str:
    return unquote(urlparse(uri).path) if uri.startswith("file:") else uri


def source_paths(spark, plan: InputPlan) -> list[str]:
    """The input files as Spark names them (local paths), sorted: `source` numbers index this.

    Numbering in path order keeps every "input order" (source, then line) the same as by path.
    Only the file listing is read here, not the contents.
    """
    rows = (spark.read.format("binaryFile").load(literal_paths(plan.files)).select("path")
            .collect())
    return sorted({_local(r["path"]) for r in rows})


def _numbered(mapped, number: np.ndarray | int, keep_given: bool) -> pa.Table:
    """Mapped parsed frame -> Arrow rows with `source` replaced by the file's number."""
    frame = mapped.assign(source=number)
    return to_arrow(frame, GIVEN_ARROW if keep_given else PARSED_ARROW)


def _with_locations(parsed, locations: Locations | None, max_km: float):
    if locations is None:
        return parsed.assign(loc_id=np.int64(-1))
    return map_points(parsed, locations, max_km)


def parsed_rows(
    spark, plan: InputPlan, locations: Locations | None, sources: list[str], keep_given=False
):
    """Files -> parsed and mapped rows (Spark DataFrame, PARSED_DDL), via mapInArrow."""
    from pyspark.sql import functions as F

    opts, headers = plan.opts, plan.headers
    number_of = {path: i for i, path in enumerate(sources)}
    ddl = GIVEN_DDL if keep_given else PARSED_DDL

    def number(paths) -> np.ndarray:
        codes, uniques = pd.factorize(paths)
        missing = [p for p in uniques if p not in number_of]
        if missing:
            raise RuntimeError(f"ingest: file {missing[0]} is not in the planned file list")
        return np.asarray([number_of[p] for p in uniques], dtype=np.int64)[codes]

    if plan.kind == "parquet":
        raw = spark.read.parquet(*literal_paths(plan.files))
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
                parsed = telecom.parse_frame(batch.drop(columns=["_file", "_row"]), "",
                                             opts.window, ts_unit=opts.ts_unit,
                                             ts_origin=opts.time_origin,
                                             utc_offsets=opts.utc_offsets)
                parsed["line"] = batch["_row"].to_numpy() + 1
                mapped = _with_locations(parsed, locations, opts.max_distance_km)
                files = batch["_file"].map(_local).to_numpy(dtype=object)
                yield from _numbered(mapped, number(files), keep_given).to_batches()

        return raw.mapInArrow(from_frames, ddl)

    files = (spark.read.format("binaryFile").load(literal_paths(plan.files))
             .select("path", "content"))

    def from_files(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            uris = rb.column("path").to_pylist()
            contents = rb.column("content").to_pylist()
            for uri, content in zip(uris, contents, strict=True):
                path = _local(uri)
                parsed = parse_file(content, path, opts, header=headers.get(path))
                mapped = _with_locations(parsed, locations, opts.max_distance_km)
                table = _numbered(mapped, number(np.array([path], dtype=object))[0], keep_given)
                yield from table.to_batches(max_chunksize=OUT_BATCH)

    return files.mapInArrow(from_files, ddl)


def union_rows(spark, plan: InputPlan, partitions: int):
    """The union of every output row (Spark DataFrame, UNION_DDL), the location set and the
    sorted file list."""
    from pyspark.sql import functions as F

    sources = source_paths(spark, plan)
    locations = plan.locations
    if locations is None:  # check-ins without a location file: P from their own ids
        parsed = parsed_rows(spark, plan, None, sources, keep_given=True)
        agg = (
            parsed.where("reason IS NULL AND given_loc IS NOT NULL")
            .groupBy("given_loc")
            .agg(F.avg("lat").alias("lat"), F.avg("lon").alias("lon"))
            .toPandas()
        )
        if agg.empty:
            reasons = sorted(r["reason"] or "no location id" for r in
                             parsed.select("reason").distinct().collect())
            rejected = _examples(parsed.where("reason IS NOT NULL"), sources)
            raise InputDataError(
                f"no record in {plan.where} was accepted: none is valid and names a location id, "
                f"so there is no location set (set ingest.locations_path); reasons {reasons}; "
                f"first rejected: {rejected}. Nothing was written."
            )
        locations = derive_locations(agg.assign(reason=None))
    parsed = parsed_rows(spark, plan, locations, sources)
    opts = plan.opts
    paths = np.asarray(sources, dtype=object)

    def kernel(rows: pa.Table, _shared) -> Iterator[pa.RecordBatch]:
        out = finish_bucket(from_arrow(rows.cast(PARSED_ARROW)), opts)  # whole users
        q = out.quarantined
        q = q.assign(source=paths[q["source"].to_numpy(np.int64)])
        table = union_table(BucketOutput(q, out.points, out.trajectories, out.slot_days,
                                         out.short_trajectories))
        return table.to_batches(max_chunksize=OUT_BATCH)

    # Hash partitioning on the user id itself: whole users per partition, evenly spread; one
    # kernel call per partition (rows without a user id, all refused, share one partition).
    out = per_partition(parsed, kernel, UNION_DDL, partitions=partitions, arrow=True)
    return out, locations, sources


def slots48_union(spark, cfg: Config):
    """The 48-slot format: small, read on the driver; the same union shape as the others."""
    from jobs.ingest import shaping

    icfg = cfg.ingest
    path, locs = input_paths(cfg)
    frame, gps = slots48.read_slots(path, locs, icfg.time_origin.date())
    locations = load_locations(gps, icfg.locations_format if locs is not None else "gps")
    ok = frame["reason"].isna()
    days = frame[ok].reset_index(drop=True)
    index = np.full(int(locations.loc_id.max()) + 1, -1, dtype=np.int64)
    index[locations.loc_id] = np.arange(len(locations))
    points = shaping.points_from_slot_days(days, locations.lat, locations.lon, index)
    traj, short = shaping.cut_trajectories(
        points, max_len=icfg.max_len, gap_hours=icfg.gap_hours, segment=icfg.segment,
        min_len=icfg.min_len)
    # One input line = one record: the points of a day are not records of their own.
    out = BucketOutput(frame[~ok], points, traj, days[["user_id", "date", "slots"]], short)
    return spark.createDataFrame(union_table(out), UNION_DDL), locations, len(frame)


def count_staged(staged, plan: InputPlan, n_read_override: int | None):
    """One pass over the staged union: the figures, and the dates each kind of row falls on.

    Returns (figures, {kind: sorted dates}).
    """
    from pyspark.sql import functions as F

    rows = staged.groupBy("kind", "reason", F.to_date("date").alias("day")).count().collect()
    counts: dict[tuple[str, str | None], int] = {}
    dates: dict[str, set] = {}
    for r in rows:
        key = (r["kind"], r["reason"])
        counts[key] = counts.get(key, 0) + int(r["count"])
        if r["day"] is not None and (r["reason"] is None or r["kind"] == "quarantine"):
            dates.setdefault(r["kind"], set()).add(r["day"])
    quarantined: dict[str, int] = {}
    dropped: dict[str, int] = {}  # pieces that are not trajectories (ingest.min_len), by reason
    for (kind, reason), c in counts.items():
        if kind == "quarantine":
            quarantined[reason] = quarantined.get(reason, 0) + c
        elif kind == "trajectory" and reason is not None:
            dropped[reason] = dropped.get(reason, 0) + c
    accepted = counts.get(("point", None), 0)
    if n_read_override is not None:
        accepted_records = n_read_override - sum(quarantined.values())
    else:
        accepted_records = accepted
    figures = {
        "source": plan.opts.source,
        "input": plan.where,
        "files": len(plan.files),
        "records_read": accepted_records + sum(quarantined.values()),
        "records_accepted": accepted_records,
        "records_quarantined": sum(quarantined.values()),
        "quarantined_by_reason": dict(sorted(quarantined.items())),
        "points": accepted,
        "trajectories": counts.get(("trajectory", None), 0),
        "trajectories_dropped": sum(dropped.values()),
        "trajectories_dropped_by_reason": dict(sorted(dropped.items())),
        "slot_days": counts.get(("slot_day", None), 0),
    }
    return figures, {kind: sorted(days) for kind, days in dates.items()}


def _examples(rejected, sources: list[str] | None = None, k: int = 3) -> str:
    """'file line N: reason' for the first k rejected rows (file, line order).

    `sources`: the file list when `source` is a file number (parsed rows), None when a path.
    The message may reach the published run log (its `error`): it names where to look, never
    the record's content (that is raw data) nor counts of the raw data.
    """
    first = (
        rejected.orderBy("source", "line")
        .select("source", "line", "reason")
        .limit(k)
        .collect()
    )

    def where(r) -> str:
        return sources[int(r["source"])] if sources is not None else r["source"]

    return "; ".join(
        f"{where(r)} line {r['line']}: {r['reason']}" for r in first
    )


def _refuse_if_nothing_accepted(staged, figures: dict[str, Any], plan: InputPlan) -> None:
    if figures["records_read"] == 0:
        raise InputDataError(f"input {plan.where} holds no records (only headers or blank lines)")
    if figures["records_accepted"] > 0:
        return
    examples = _examples(staged.where("kind = 'quarantine'"))
    reasons = sorted(figures["quarantined_by_reason"])
    raise InputDataError(
        f"no record in {plan.where} was accepted (reasons {reasons}); first rejected: "
        f"{examples}. Nothing was written."
    )


READY = "READY.json"  # written into the staging folder once everything to write is staged
LOCATIONS_FILE = "locations.parquet"


def stage_locations(spark, staged, locations: Locations, folder: Path, dataset: str) -> Path:
    """The dataset's `locations` rows, staged beside the union (what `write_tables` writes)."""
    from pyspark.sql import functions as F

    if isinstance(locations, Grid) and locations.bbox is None:
        points = staged.where("kind = 'point'")
        used = np.array([r[0] for r in points.select(F.col("loc_id").cast("int")).distinct()
                         .collect()], np.int64)
    else:
        used = np.zeros(0, dtype=np.int64)
    loc_pd = locations_frame(locations, used).assign(dataset=dataset)
    path = folder / LOCATIONS_FILE
    loc_pd[["dataset", "loc_id", "lat", "lon"]].astype({"loc_id": np.int32}).to_parquet(path)
    return path


def _staged_tables(staged, dataset: str, started_at: str) -> tuple:
    """The staged union's rows as the points, trajectories, slot_days and quarantine tables'
    frames (this dataset's rows; the quarantine's stamped with the ingest's start)."""
    from pyspark.sql import functions as F

    ds = F.lit(dataset).alias("dataset")
    date = F.to_date("date").alias("date")
    points = staged.where("kind = 'point'").select(
        ds, "user_id", "ts", "lat", "lon", F.col("loc_id").cast("int").alias("loc_id"), date
    )
    traj = staged.where("kind = 'trajectory' AND reason IS NULL").select(
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
        F.lit(pd.Timestamp(started_at).to_pydatetime()).cast("timestamp").alias("ingested_at"),
    )
    return points, traj, slot_days, quarantine


def write_tables(spark, dataset: str, folder: Path, commit: dict[str, Any],
                 figures: dict[str, Any]) -> int:
    """Write the five tables from a staged ingest (`folder`); returns the number of locations.

    `commit` is the READY record: the dates each dated table's rows cover (counted when
    staged), the quarantine count and the ingest's start time. Each write replaces this
    dataset's rows of one table; all the inputs come from the staging folder, so a later
    process can redo the writes identically (`finish_pending`).
    """
    from jobs.spark.catalog import write_table

    staged = spark.read.parquet(str(folder / "union"))
    dates = commit["dates"]
    scope = {"dataset": dataset}
    points, traj, slot_days, quarantine = _staged_tables(staged, dataset, commit["started_at"])
    loc_pd = pd.read_parquet(folder / LOCATIONS_FILE)
    loc_df = spark.createDataFrame(loc_pd, "dataset string, loc_id int, lat double, lon double")
    timings: dict[str, float] = {}
    from udfs import faults

    for name, df, kind, rows in (
        (POINTS, points, "point", 0),
        (TRAJECTORIES, traj, "trajectory", 0),
        (SLOT_DAYS, slot_days, "slot_day", 0),
        (QUARANTINE, quarantine, None, commit["records_quarantined"]),
        (LOCATIONS, loc_df, None, len(loc_pd)),
    ):
        t0 = time.perf_counter()
        if kind is None:  # the dataset's one partition, or none when there are no rows
            covers = [scope] if rows else []
            write_table(df, name, replace=scope, covers=covers)
        else:  # one writer per day: one file per partition, not one per task
            covers = [{**scope, "date": d} for d in dates.get(kind, [])]
            write_table(df.repartition("date"), name, replace=scope, covers=covers)
        timings[name.split(".")[1]] = round(time.perf_counter() - t0, 2)
        faults.ingest_written(name)
    figures["write_s"] = timings
    return len(loc_pd)


def finish_pending(spark, cfg: Config) -> list[str]:
    """Redo the table writes of every ingest that staged everything (READY) but was killed
    before it removed its staging folder: the five tables are then all the new ingest's,
    never a mix of two ingests. Runs at the start of every stage, before it reads anything."""
    import json

    root = cfg.storage.root.resolve() / "staging"
    done = []
    for ready in sorted(root.glob(f"ingest-*/{READY}")) if root.is_dir() else []:
        commit = json.loads(ready.read_text())
        log.warning("ingest %s was interrupted while writing its tables: finishing it from its "
                    "staged rows (%s)", commit["run_id"], ready.parent)
        write_tables(spark, commit["dataset"], ready.parent, commit, {})
        shutil.rmtree(ready.parent, ignore_errors=True)
        done.append(commit["run_id"])
    return done


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    """The stage: plan, parse and shape into a staging area, check, then write the tables.

    All five tables or none: everything they will hold is staged first (union, locations,
    the READY record); only then are they written, and a process killed among the writes
    leaves the staging folder with its READY record, which the next trajpriv stage on this
    root finishes before doing anything else (`finish_pending`)."""
    import json

    t0 = time.perf_counter()
    plan = plan_inputs(cfg)
    folder = cfg.storage.root.resolve() / "staging" / f"ingest-{ctx.run_id}"
    n_read = None
    committed = False
    try:
        if plan.kind == "slots48":
            union, locations, n_read = slots48_union(spark, cfg)
        else:
            union, locations, _ = union_rows(spark, plan, cfg.ingest.buckets)
        union.write.mode("overwrite").parquet(str(folder / "union"))
        t_parsed = time.perf_counter() - t0
        staged = spark.read.parquet(str(folder / "union"))
        figures, dates = count_staged(staged, plan, n_read)
        # the planned set: None for check-ins whose P comes from their own location ids
        figures.update(location_figures(locations if plan.kind == "slots48" else
                                        plan.locations))
        _refuse_if_nothing_accepted(staged, figures, plan)
        t_staged = time.perf_counter() - t0
        stage_locations(spark, staged, locations, folder, cfg.dataset)
        commit = {"run_id": ctx.run_id, "dataset": cfg.dataset,
                  "dates": {k: sorted(str(d) for d in v) for k, v in dates.items()},
                  "records_quarantined": figures["records_quarantined"],
                  "started_at": ctx.started_at.isoformat()}
        tmp = folder / f".{READY}.tmp"
        tmp.write_text(json.dumps(commit))
        tmp.rename(folder / READY)  # atomic: from here on the writes are owed
        committed = True
        figures["locations"] = write_tables(spark, cfg.dataset, folder, commit, figures)
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        if not committed:  # nothing was written: the staged copy is just raw data to drop
            shutil.rmtree(folder, ignore_errors=True)
    wall = time.perf_counter() - t0
    figures["parse_shape_s"] = round(t_parsed, 2)
    figures["count_s"] = round(t_staged - t_parsed, 2)
    figures["records_per_s"] = round(figures["records_read"] / max(wall, 1e-9), 1)
    figures["dataset"] = cfg.dataset
    figures["trusted_figures"] = str(cfg.storage.runs_dir / ctx.run_id / "figures.json")
    # The counts are raw-derived: the log line (task logs are read where the console is)
    # names where they are, not the counts themselves.
    log.info("ingest %s: done; read/accepted/quarantined counts in %s", cfg.dataset,
             figures["trusted_figures"])
    return figures


def add_args(parser: argparse.ArgumentParser) -> None:
    """No stage-specific arguments (everything is in the `ingest` config section)."""


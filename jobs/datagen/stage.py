"""`trajpriv datagen`: synthetic Telecom-Shanghai-shaped records (docs/architecture.md section 5).

Reads nothing but the optional station and usage files; writes
- `<storage.root>/landing/<dataset>/records/`: the raw records, one row per connection, columns
  `user, start, end, lat, lon, loc_id` (CSV with a header and `yyyy-MM-dd HH:mm:ss` local times,
  or Parquet with timestamp_ntz columns; `datagen.output_format`), several part files; this is
  what `trajpriv ingest` (source telecom) reads by default;
- `<storage.root>/landing/<dataset>/stations.csv`: the location set `loc_id, lat, lon`;
- table `trajpriv_pub.locations` (dataset, loc_id, lat, lon) for that dataset.
Both landing paths are replaced whole (written beside, then swapped in), so a rerun or a failed
run never leaves a mix of two generations.

The work is one narrow Spark pipeline over user ids; the per-user kernel is
`jobs.datagen.model.simulate_user` (pure numpy), seeded per user, so the output does not depend
on `datagen.partitions`. The same kernel computes each record's realism metrics
(`jobs.datagen.stats.record_metrics`, per user-day and per jump) beside the records, so the
statistics come from the persisted records without sending them through Python again; they are
printed and returned as the run's figures.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from jobs.config import Config
from jobs.datagen.model import simulate_users
from jobs.datagen.params import MobilityParams
from jobs.datagen.stations import (
    StationIndex,
    generate_layout,
    load_stations,
    nearest_neighbour_km,
)
from jobs.datagen.stats import format_stats, record_metrics, summarise
from jobs.spark.tables import LOCATIONS

log = logging.getLogger(__name__)

RECORD_COLUMNS = ["user", "start", "end", "lat", "lon", "loc_id"]
METRIC_COLUMNS = ["day_records", "day_distinct", "day_rg_km", "jump_km"]
GENERATED_SCHEMA = (
    "user long, start timestamp_ntz, `end` timestamp_ntz, lat double, lon double, loc_id long, "
    "day_records int, day_distinct int, day_rg_km double, jump_km double"
)
USERS_PER_CHUNK = 64  # users simulated per Arrow batch handed back to Spark


def station_table(cfg: Config) -> tuple[pd.DataFrame, str]:
    """The location set with popularity (`loc_id, lat, lon, weight`) and where it came from."""
    dg = cfg.datagen
    if dg.stations_csv is not None and Path(dg.stations_csv).is_file():
        usage = dg.usage_csv
        if usage is not None and not Path(usage).is_file():
            log.warning("datagen: usage file %s missing, uniform station popularity", usage)
            usage = None
        table = load_stations(Path(dg.stations_csv), usage, box=dg.station_box)
        source = f"real: {dg.stations_csv}" + (f" (popularity: {usage})" if usage else "")
        return table, source
    if dg.stations_csv is not None:
        log.warning(
            "datagen: station file %s is absent; generating a %d-station layout instead",
            dg.stations_csv,
            dg.n_stations,
        )
    table = generate_layout(dg.n_stations, seed_of(cfg), box=dg.layout_box)
    return table, f"generated: {dg.n_stations} stations"


def seed_of(cfg: Config) -> int:
    return cfg.datagen.seed if cfg.datagen.seed is not None else cfg.seed


def mobility_params(cfg: Config) -> MobilityParams:
    dg = cfg.datagen
    return MobilityParams(
        seed=seed_of(cfg),
        days=dg.days,
        start_date=dg.start_date,
        active_share=dg.active_share,
        work_share=dg.work_share,
        records_per_day=dg.records_per_day,
    )


def generate(spark, stations: pd.DataFrame, params: MobilityParams, users: int, partitions: int):
    """DataFrame of every record with its realism metrics (GENERATED_SCHEMA); lazy, one narrow
    stage over user ids. The metric columns (`jobs.datagen.stats.record_metrics`) are null on
    most rows; select RECORD_COLUMNS for the records themselves."""
    table = spark.sparkContext.broadcast(stations[["loc_id", "lat", "lon", "weight"]])

    def kernel(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        index = StationIndex.from_table(table.value)
        for batch in batches:  # rows: user
            ids = batch.column("user").to_numpy()
            for lo in range(0, len(ids), USERS_PER_CHUNK):
                # rows: one per record of these users, each user's records sorted by start
                frame = simulate_users(ids[lo : lo + USERS_PER_CHUNK], index, params)
                yield _record_batch(frame, record_metrics(frame))

    users_df = spark.range(0, users, numPartitions=partitions).withColumnRenamed("id", "user")
    return users_df.mapInArrow(kernel, GENERATED_SCHEMA)


def _record_batch(frame: pd.DataFrame, metrics: pd.DataFrame) -> pa.RecordBatch:
    """Records plus metrics -> one Arrow batch of GENERATED_SCHEMA (NaN metrics become null)."""
    arrays = [
        pa.array(frame["user"].to_numpy(np.int64)),
        pa.array(frame["start"].to_numpy("datetime64[us]")),
        pa.array(frame["end"].to_numpy("datetime64[us]")),
        pa.array(frame["lat"].to_numpy(np.float64)),
        pa.array(frame["lon"].to_numpy(np.float64)),
        pa.array(frame["loc_id"].to_numpy(np.int64)),
    ]
    for name in METRIC_COLUMNS:
        values = metrics[name].to_numpy(np.float64)
        missing = np.isnan(values)
        typ = pa.int32() if name in ("day_records", "day_distinct") else pa.float64()
        filled = np.where(missing, 0, values).astype(typ.to_pandas_dtype())
        arrays.append(pa.array(filled, type=typ, mask=missing))
    return pa.RecordBatch.from_arrays(arrays, names=RECORD_COLUMNS + METRIC_COLUMNS)


def realism_figures(records, users: int, days: int) -> dict[str, Any]:
    """Realism statistics from the metric columns of `generate`'s output (a persisted copy).

    Only the first record of each user-day and the jump records reach the driver, and only
    their metric columns: no second pass of the records through Python.
    """
    rows = (
        records.where("day_records IS NOT NULL OR jump_km IS NOT NULL")
        .select(*METRIC_COLUMNS)
        .toPandas()
    )
    first = rows["day_records"].notna()
    per_day = pd.DataFrame(
        {
            "n_records": rows.loc[first, "day_records"].to_numpy(np.int64),
            "n_distinct": rows.loc[first, "day_distinct"].to_numpy(np.int64),
            "rg_km": rows.loc[first, "day_rg_km"].to_numpy(np.float64),
        }
    )
    jumps = rows["jump_km"].dropna().to_numpy(np.float64)
    return summarise(per_day, jumps, users=users, days=days)


def _swap_in(tmp: Path, final: Path) -> None:
    """Replace `final` by `tmp` (a folder or file written completely beside it)."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def write_records(records, target: Path, fmt: str, run_id: str) -> None:
    tmp = target.with_name(f"{target.name}.tmp-{run_id}")
    writer = records.write.mode("overwrite")
    try:
        if fmt == "csv":
            writer = writer.option("header", True)
            writer.option("timestampNTZFormat", "yyyy-MM-dd HH:mm:ss").csv(str(tmp))
        else:
            writer.parquet(str(tmp))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # the previous landing stays as it was
        raise
    _swap_in(tmp, target)


def write_locations(spark, cfg: Config, stations: pd.DataFrame, landing: Path, run_id: str):
    from jobs.spark.catalog import write_table

    tmp = landing / f"stations.csv.tmp-{run_id}"
    stations[["loc_id", "lat", "lon"]].to_csv(tmp, index=False, float_format="%.6f")
    _swap_in(tmp, landing / "stations.csv")
    frame = (
        stations[["loc_id", "lat", "lon"]].astype({"loc_id": np.int32}).assign(dataset=cfg.dataset)
    )
    loc_df = spark.createDataFrame(
        frame[["dataset", "loc_id", "lat", "lon"]],
        "dataset string, loc_id int, lat double, lon double",
    )
    write_table(loc_df, LOCATIONS, replace={"dataset": cfg.dataset})


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    """The stage: stations, then records (persisted once), landing files, locations, figures."""
    from pyspark import StorageLevel

    t0 = time.perf_counter()
    dg = cfg.datagen
    params = mobility_params(cfg)  # validates before any Spark work
    stations, source = station_table(cfg)
    landing = cfg.storage.landing / cfg.dataset
    landing.mkdir(parents=True, exist_ok=True)
    log.info("datagen %s: %d users x %d days, stations %s", cfg.dataset, dg.users, dg.days, source)

    records = generate(spark, stations, params, dg.users, dg.partitions)
    records = records.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        write_records(
            records.select(*RECORD_COLUMNS), landing / "records", dg.output_format, ctx.run_id
        )
        t_gen = time.perf_counter() - t0
        stats = realism_figures(records, dg.users, dg.days)
    finally:
        records.unpersist()
    t_stats = time.perf_counter() - t0 - t_gen
    write_locations(spark, cfg, stations, landing, ctx.run_id)

    nn = nearest_neighbour_km(stations)
    wall = time.perf_counter() - t0
    figures: dict[str, Any] = {
        "users": dg.users,
        "days": dg.days,
        "stations": len(stations),
        "stations_source": source,
        "station_nn_median_km": round(float(np.median(nn)), 3),
        "output": str(landing / "records"),
        "output_format": dg.output_format,
        **stats,
        "generate_write_s": round(t_gen, 2),
        "stats_s": round(t_stats, 2),
        "locations_s": round(wall - t_gen - t_stats, 2),
        "records_per_s": round(stats.get("records", 0) / max(t_gen, 1e-9), 1),
    }
    print(f"datagen {cfg.dataset}: realism statistics per user-day\n{format_stats(stats)}")
    log.info("datagen %s: %d records in %.1f s", cfg.dataset, stats.get("records", 0), wall)
    return figures


"""`trajpriv evaluate`: mobility divergences of published data against real days.

Comparisons made for `cfg.dataset` (each one row per metric in `trajpriv_pub.evaluation`):
- `real_train` vs real held-out days: the floor (what two samples of real behaviour differ by);
  needs the train/held-out split written by `trajpriv train`.
- each synthetic model of the latest synthesize run vs real held-out days (setting = epsilon);
- each (mechanism, epsilon) of the latest collection vs the same raw trajectories: the raw and
  the perturbed points are put into 48-slot days with the raw timestamps (this runs in the
  trusted zone; only the divergences are published), so the only difference is the mechanism.
With `--attacks` (or `evaluate.attacks`), also the attacks of `jobs/attacks.py`: home
re-identification, and white-box MIA and LiRA against the train runs behind the synthetic days
compared above (rows with the same method and setting as their divergences).
Statistics per `evaluate.mode` (`geo` by default, `paper` for the PateGail definitions), by
`jobs.mobility_spark.jsd_metrics_spark`: Spark reduces each table to small histograms, the
driver computes the JSDs with the numpy core.
Row shapes: slot days (dataset, user_id, date, slots) -> per comparison two `slots` tables ->
six numbers -> evaluation rows (method, setting, metric, value).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/evaluate.py`: make the project importable
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.catalog import RUNS_TABLE, read_table, table_exists
from jobs.config import Config
from jobs.evaluation_table import write_evaluation
from jobs.keys import pseudonym, pseudonym_key
from jobs.mobility_spark import jsd_metrics_spark
from jobs.shaping import build_slot_days
from udfs.collect_kernel import iso_dates, traj_message
from udfs.errors import InputDataError

log = logging.getLogger("trajpriv.evaluate")

SLOT_DAYS = "trajpriv_raw.slot_days"
SPLIT = "trajpriv_raw.slot_days_split"
TRAJECTORIES = "trajpriv_raw.trajectories"
LOCATIONS = "trajpriv_pub.locations"
SYNTHETIC = "trajpriv_pub.synthetic_trajectories"
PERTURBED = "trajpriv_pub.perturbed_trajectories"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attacks",
        action="store_true",
        help="also attack the output: home re-identification, white-box membership inference "
        "and LiRA (evaluate.attacks / evaluate.attack_kinds in config)",
    )


def dense_locations(spark: SparkSession, dataset: str) -> tuple[DataFrame, dict[int, int] | None]:
    """Locations as loc_id 0..L-1 (what the metric code indexes) and the id map when remapped."""
    locs = read_table(spark, LOCATIONS).where(F.col("dataset") == dataset)
    pdf = locs.select("loc_id", "lat", "lon").toPandas().sort_values("loc_id")
    if pdf.empty:
        raise InputDataError(f"no locations for dataset {dataset!r}: run datagen/ingest first")
    ids = pdf["loc_id"].to_numpy()
    if (ids == range(len(ids))).all():
        return spark.createDataFrame(pdf), None
    mapping = {int(i): k for k, i in enumerate(ids)}
    dense = pdf.assign(loc_id=range(len(pdf)))
    return spark.createDataFrame(dense), mapping


def remap_slots(days: DataFrame, mapping: dict[int, int] | None) -> DataFrame:
    """Slots with location ids replaced by their dense row (no-op when ids are already dense)."""
    if mapping is None:
        return days.select("slots")
    lut = F.create_map(*[F.lit(x) for pair in mapping.items() for x in pair])
    return days.select(F.transform("slots", lambda s: lut[s]).alias("slots"))


def latest_runs(spark: SparkSession, table: str, dataset: str, keys: list[str]) -> DataFrame:
    """Rows of `table` for `dataset` from the latest finished run of each `keys` group."""
    rows = read_table(spark, table).where(F.col("dataset") == dataset)
    finished = (
        read_table(spark, RUNS_TABLE)
        .groupBy("run_id")
        .agg(F.max("finished_at").alias("finished_at"))
    )
    groups = rows.select("run_id", *keys).distinct().join(finished, "run_id", "left")
    best = (
        groups.withColumn("order", F.coalesce("finished_at", F.lit("1970-01-01").cast("timestamp")))
        .groupBy(*keys)
        .agg(F.max_by("run_id", F.struct("order", "run_id")).alias("run_id"))
    )
    return rows.join(best, ["run_id", *keys])


def real_days(spark: SparkSession, dataset: str) -> tuple[DataFrame, DataFrame | None]:
    """(held-out or all real days, training days or None when no split exists yet)."""
    if table_exists(spark, SPLIT):
        split = spark.table(SPLIT).where(F.col("dataset") == dataset)
        holdout = split.where(F.col("split") == "holdout")
        if holdout.limit(1).count():
            return holdout, split.where(F.col("split") == "train")
    days = read_table(spark, SLOT_DAYS).where(F.col("dataset") == dataset)
    return days, None


def slot_days_of_points(points: DataFrame, keys: list[str]) -> DataFrame:
    """48-slot days (keys..., user_id, date, slots) with the ingest rules (jobs.shaping)."""
    key_types = {name: dtype for name, dtype in points.dtypes if name in keys}
    schema = ", ".join(f"{k} {key_types[k]}" for k in keys)
    schema += ", user_id string, date timestamp, slots array<int>"

    def per_group(pdf: pd.DataFrame) -> pd.DataFrame:
        days = build_slot_days(pdf[["user_id", "ts", "loc_id"]])
        for k in keys:
            days[k] = pdf[k].iloc[0]
        return days[[*keys, "user_id", "date", "slots"]]

    return points.groupBy(*keys, "user_id").applyInPandas(per_group, schema)


def perturbed_day_pairs(spark: SparkSession, cfg: Config) -> DataFrame | None:
    """Raw and perturbed points of the latest collection, with the raw timestamps.

    Row shape: (mechanism, epsilon, kind in {raw, perturbed}, user_id, ts, loc_id).
    """
    if not table_exists(spark, PERTURBED):
        return None
    pub = latest_runs(spark, PERTURBED, cfg.dataset, ["mechanism", "epsilon"])
    if not pub.limit(1).count():
        return None
    pkey = pseudonym_key(cfg.storage.secrets)
    dataset = cfg.dataset

    def key_batches(batches):
        for pdf in batches:
            dates = iso_dates(pdf["date"])
            pdf = pdf.assign(
                traj_key=[
                    pseudonym(pkey, traj_message(dataset, u, d, t))
                    for u, d, t in zip(pdf["user_id"], dates, pdf["traj_id"], strict=True)
                ]
            )
            yield pdf[["traj_key", "user_id", "ts", "loc_ids"]]

    raw = read_table(spark, TRAJECTORIES).where(F.col("dataset") == dataset)
    keyed = raw.select("user_id", "date", "traj_id", "ts", "loc_ids").mapInPandas(
        key_batches, "traj_key string, user_id string, ts array<timestamp>, loc_ids array<int>"
    )
    joined = pub.select("mechanism", "epsilon", "traj_key", F.col("loc_ids").alias("pert")).join(
        keyed, "traj_key"
    )
    zipped = joined.select(
        "mechanism",
        "epsilon",
        "user_id",
        F.explode(F.arrays_zip("ts", "loc_ids", "pert")).alias("p"),
    )
    raw_pts = zipped.select(
        "mechanism",
        "epsilon",
        F.lit("raw").alias("kind"),
        "user_id",
        F.col("p.ts").alias("ts"),
        F.col("p.loc_ids").alias("loc_id"),
    )
    pert_pts = zipped.select(
        "mechanism",
        "epsilon",
        F.lit("perturbed").alias("kind"),
        "user_id",
        F.col("p.ts").alias("ts"),
        F.col("p.pert").alias("loc_id"),
    )
    return raw_pts.unionByName(pert_pts)


def metric_rows(method: str, setting: float | None, values: dict[str, float]) -> list[dict]:
    return [
        {"method": method, "setting": setting, "metric": name, "value": value}
        for name, value in values.items()
    ]


def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    mode = cfg.evaluate.mode
    coords, mapping = dense_locations(spark, cfg.dataset)
    held_out, train = real_days(spark, cfg.dataset)
    held_out = remap_slots(held_out, mapping).cache()
    rows: list[dict] = []
    timings: dict[str, float] = {}

    def compare(label: str, method: str, setting: float | None, real: DataFrame, gen: DataFrame):
        t0 = time.perf_counter()
        values = jsd_metrics_spark(real, gen, coords, mode, engine="pandas")
        timings[label] = round(time.perf_counter() - t0, 2)
        rows.extend(metric_rows(method, setting, values))
        log.info("%s: %s", label, {k: round(v, 5) for k, v in values.items()})

    if train is not None:
        compare("real_train", "real_train", None, held_out, remap_slots(train, mapping))
    targets: list[tuple[str, str, float]] = []  # train runs behind the synthetic days
    if table_exists(spark, SYNTHETIC):
        synth = latest_runs(spark, SYNTHETIC, cfg.dataset, ["model"])
        for row in synth.select("run_id", "model", "epsilon").distinct().collect():
            targets.append((row["run_id"], row["model"], float(row["epsilon"])))
            part = synth.where(
                (F.col("model") == row["model"]) & (F.col("epsilon") == row["epsilon"])
            )
            compare(
                f"synthetic {row['model']}",
                row["model"],
                row["epsilon"],
                held_out,
                remap_slots(part, mapping),
            )
    pairs = perturbed_day_pairs(spark, cfg)
    if pairs is not None:
        days = slot_days_of_points(pairs, ["mechanism", "epsilon", "kind"]).cache()
        settings = days.select("mechanism", "epsilon").distinct().collect()
        for s in sorted(settings, key=lambda r: (r["mechanism"], r["epsilon"])):
            mine = days.where(
                (F.col("mechanism") == s["mechanism"]) & (F.col("epsilon") == s["epsilon"])
            )
            compare(
                f"perturbed {s['mechanism']} eps={s['epsilon']}",
                f"perturbed_{s['mechanism']}",
                float(s["epsilon"]),
                remap_slots(mine.where(F.col("kind") == "raw"), mapping),
                remap_slots(mine.where(F.col("kind") == "perturbed"), mapping),
            )
        days.unpersist()
    held_out.unpersist()
    if not rows:
        raise InputDataError(
            f"nothing to evaluate for dataset {cfg.dataset!r}: run train+synthesize or collect"
        )
    attack_figures: dict[str, Any] = {}
    if cfg.evaluate.attacks or getattr(ctx.args, "attacks", False):
        from jobs.attacks import run_attacks

        t0 = time.perf_counter()
        attack_rows, attack_figures = run_attacks(spark, cfg, targets or None)
        timings["attacks"] = round(time.perf_counter() - t0, 2)
        rows.extend(attack_rows)
    written = write_evaluation(spark, rows, run_id=ctx.run_id, dataset=cfg.dataset)
    finite = [r for r in rows if r["value"] is not None and math.isfinite(r["value"])]
    return {
        "mode": mode,
        "comparisons": len([k for k in timings if k != "attacks"]),
        "rows": written,
        "finite_rows": len(finite),
        "seconds": timings,
        **attack_figures,
    }


if __name__ == "__main__":
    from jobs.stage import main

    sys.exit(main("evaluate", run, add_args=add_args))

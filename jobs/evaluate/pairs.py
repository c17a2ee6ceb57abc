"""The perturbed trajectories of the latest study and every release, next to their raw ones.

Shared by the divergences (`jobs.evaluate.stage`) and the attack runners
(`jobs.evaluate.attacks`), which is why it is its own module: neither imports the other.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.collect.stage import published_with_raw
from jobs.config import Config
from jobs.spark.catalog import read_table, table_exists
from jobs.spark.tables import RUNS, STUDY_PERTURBED, TRAJECTORIES


def latest_runs(spark: SparkSession, table: str, dataset: str, keys: list[str]) -> DataFrame:
    """Rows of `table` for `dataset` from the latest finished run of each `keys` group."""
    rows = read_table(spark, table).where(F.col("dataset") == dataset)
    finished = (
        read_table(spark, RUNS)
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


def perturbed_pairs(spark: SparkSession, cfg: Config) -> DataFrame | None:
    """Each perturbed trajectory of the latest study and of every release, next to its raw one.

    Row shape: (mechanism, epsilon, traj_key, user_id, ts array<bigint>, raw array<int>,
    pert array<int>): one row per trajectory and setting; `ts` are the raw timestamps as
    microseconds of the session time zone's wall clock (what pandas sees of a timestamp
    column), `raw` and `pert` the raw and the perturbed location ids. Study rows keep their
    mechanism name; published releases are labelled `<mechanism>-release` (their rows are
    joined to the raw trajectories through the ledger's charges, trusted zone).
    """
    dataset = cfg.dataset
    sources = []
    if table_exists(spark, STUDY_PERTURBED):
        study = latest_runs(spark, STUDY_PERTURBED, dataset, ["mechanism", "epsilon"])
        sources.append(study.select("mechanism", "epsilon", "user_id", "date", "traj_id",
                                    F.col("loc_ids").alias("pert")))
    released = published_with_raw(spark, dataset)
    if released is not None:
        sources.append(released.select(
            F.concat(F.col("mechanism"), F.lit("-release")).alias("mechanism"), "epsilon",
            "user_id", "date", "traj_id", "pert"))
    if not sources:
        return None
    pert = sources[0]
    for extra in sources[1:]:
        pert = pert.unionByName(extra)
    if not pert.limit(1).count():
        return None
    tz = spark.conf.get("spark.sql.session.timeZone")
    wall_us = F.transform("ts", lambda t: F.unix_micros(F.from_utc_timestamp(t, tz)))
    raw = read_table(spark, TRAJECTORIES).where(F.col("dataset") == dataset).select(
        "user_id", "date", F.col("traj_id").cast("long").alias("traj_id"),
        wall_us.alias("ts"), F.col("loc_ids").alias("raw"))
    key = F.concat_ws("/", "user_id", F.col("date").cast("string"),
                      F.col("traj_id").cast("string"))
    return pert.join(raw, ["user_id", "date", "traj_id"]).select(
        "mechanism", "epsilon", key.alias("traj_key"), "user_id", "ts", "raw", "pert")

"""`trajpriv study`: a sweep of LDP settings to choose the published one (trusted zone only).

Why apart from `collect`: choosing a mechanism and epsilon means perturbing the same
trajectories under many settings and scoring each against the raw data. Publishing all of them
would release each trajectory many times (averaging independent releases defeats LDP) and the
scores are raw-derived figures. So a study writes its perturbed trajectories to
`trajpriv_trusted.study_perturbed` and its NE / PRQ / ACD / Kendall tau to
`trajpriv_trusted.evaluation` (method = mechanism, setting = epsilon); nothing reaches
`trajpriv_pub`, nothing is released, and the ledger charges nothing. `trajpriv evaluate` adds
the mobility divergences of each setting's days; the report draws NE against epsilon.

Randomness: the release kernel of `collect`, seeded per (key, dataset, `study.<run_id>`,
setting, user), so a study never shares noise with a release.

With `study.synthesis_methods`, also the synthesis study (jobs/study/synthesis.py): each
synthesis method trained at the target epsilon on the training split and scored against the
held-out days, rows `synthesis-study:<method>` in the same evaluation table.

Row shapes: trajectories (user_id, date, traj_id, loc_ids, n) -> study rows (user_id, date,
traj_id, mechanism, epsilon, loc_ids) per setting -> metric rows (method, setting, metric, value).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.collect import stage as C
from jobs.config import Config
from jobs.spark.catalog import write_table
from jobs.spark.per_user import Shared, per_user
from jobs.spark.tables import STUDY_PERTURBED
from udfs import collect_kernel as K

log = logging.getLogger("trajpriv.study")

# the runs table learns only what was swept (settings and methods) and how long it took
PUBLIC_FIGURES = ("dataset", "settings", "wall_s", "synthesis_methods", "synthesis_epsilon",
                  "synthesis_seeds", "synthesis_s")

STUDY_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("date", T.DateType()),
        T.StructField("traj_id", T.LongType()),
        T.StructField("mechanism", T.StringType()),
        T.StructField("epsilon", T.DoubleType()),
        T.StructField("loc_ids", T.ArrayType(T.IntegerType())),
    ]
)


def settings_of(cfg: Config, run_id: str) -> list[K.Setting]:
    return [K.Setting(m, float(e), f"study.{run_id}") for m in cfg.study.mechanisms
            for e in cfg.study.epsilons]


def sample(df: DataFrame, limit: int | None) -> DataFrame:
    """At most `limit` trajectories, the same ones on every run (ordered by a hash)."""
    if limit is None:
        return df
    key = F.xxhash64("user_id", "date", "traj_id")
    return df.orderBy(key, "user_id", "date", "traj_id").limit(limit)


def study_fn(kernel: K.ReleaseKernel):
    """Whole users -> STUDY_SCHEMA rows (raw identity kept: trusted zone), all users of a
    batch in one call per setting (the release kernel's noise, `ReleaseKernel.study_rows`)."""

    def run(pdf: pd.DataFrame, space) -> pd.DataFrame:
        return kernel.study_rows(pdf, space)

    return run


def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    from jobs.spark.evaluation import write_evaluation

    settings = settings_of(cfg, ctx.run_id)
    figures: dict[str, Any] = {"dataset": cfg.dataset,
                               "settings": [f"{x.mechanism}@{x.epsilon:g}" for x in settings]}
    if settings:
        figures.update(ldp_study(spark, cfg, ctx.run_id, settings))
    if cfg.study.synthesis_methods:
        from jobs.study.synthesis import run_study

        synth_rows, synth_figures = run_study(spark, cfg, cfg.seed)
        write_evaluation(spark, synth_rows, run_id=ctx.run_id, dataset=cfg.dataset,
                         scope="method")
        figures.update(synth_figures)
    return figures


def ldp_study(spark: SparkSession, cfg: Config, run_id: str, settings: list[K.Setting]
              ) -> dict[str, Any]:
    """Perturb the window's trajectories under every setting and score each against the raw
    ones (NE, PRQ, ACD, Kendall tau); returns the figures."""
    from jobs.collect.metrics import ldp_metrics
    from jobs.spark.evaluation import write_evaluation

    s = cfg.study
    figures: dict[str, Any] = {}
    space = C.load_space(spark, cfg.dataset)
    t0 = time.perf_counter()
    valid = C.read_window(spark, cfg).where(F.col("n") == F.size("loc_ids"))
    if cfg.collect.max_len is not None:
        valid = valid.where(F.col("n") <= cfg.collect.max_len)
    trajs = sample(valid, s.max_trajectories)
    with Shared(spark, space) as shared_space:
        perturbed = per_user(trajs.select("user_id", "date", "traj_id", "loc_ids"),
                             study_fn(C.release_kernel(cfg, settings)), STUDY_SCHEMA,
                             shared=shared_space, order=("date", "traj_id"))
        out = perturbed.select("*", F.lit(cfg.dataset).alias("dataset"),
                               F.lit(run_id).alias("run_id"))
        write_table(out, STUDY_PERTURBED,
                    replace={"dataset": cfg.dataset, "run_id": run_id},
                    covers=[{"dataset": cfg.dataset, "run_id": run_id}])
    figures["perturb_s"] = round(time.perf_counter() - t0, 3)

    written = spark.table(STUDY_PERTURBED).where(
        (F.col("dataset") == cfg.dataset) & (F.col("run_id") == run_id))
    raw = C.raw_trajectories(spark, cfg.dataset).select(
        "user_id", "date", "traj_id", F.col("loc_ids").alias("true_ids"))
    pairs = written.join(raw, ["user_id", "date", "traj_id"]).select(
        "mechanism", "epsilon",
        F.concat_ws("/", "user_id", F.col("date").cast("string"),
                    F.col("traj_id").cast("string")).alias("traj_key"),
        F.col("loc_ids").alias("pert_ids"), "true_ids")
    rows = ldp_metrics(pairs, space=space, prq_km=s.prq_km,
                       top_fraction=s.acd_top_fraction)
    write_evaluation(spark, [{"method": r["mechanism"], "setting": r["epsilon"],
                              "metric": r["metric"], "value": r["value"]} for r in rows],
                     run_id=run_id, dataset=cfg.dataset)
    figures["trajectories"] = int(written.where(
        (F.col("mechanism") == settings[0].mechanism)
        & (F.col("epsilon") == settings[0].epsilon)).count())
    figures["metrics"] = {}
    for r in rows:
        figures["metrics"].setdefault(f"{r['mechanism']}@{r['epsilon']:g}", {})[r["metric"]] = (
            None if r["value"] != r["value"] else round(r["value"], 6))
    return figures


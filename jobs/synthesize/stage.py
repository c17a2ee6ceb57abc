"""`trajpriv synthesize`: N synthetic days from a trained run, generated over Spark partitions.

Reads the run's model (latest ok train run of the dataset in `trajpriv_pub.runs`, or
`--train-run ID`; the file its method names, `artefact` of jobs.methods: `policy.pt`,
`markov.npz`, ...), broadcasts it, and lets partition p of
`synthesize.partitions` generate its share of `synthesize.n_days` days with a generator
seeded from HMAC(run key, train run id, p) (`mapInPandas`; no user data is read: the model and
its start distribution are already private, so this is post-processing and spends nothing).
Writes `trajpriv_pub.synthetic_trajectories` (run_id = the train run, dataset, model, epsilon,
delta, privacy_model (`central`: user-level epsilon with a trusted aggregator; `local`: per-user
local epsilon of ldp / ldp++), traj_no, slots array<int> of location ids), replacing that
run's rows, so a rerun with the same settings rewrites identical rows; and the view
`trajpriv_pub.synthetic_points` (one row per slot with the location's lat/lon).
Row shapes: range(partitions) -> per partition n_p rows (traj_no, slots) -> table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd
import yaml

from jobs.config import Config
from jobs.methods import of_run
from jobs.spark.tables import LOCATIONS, RUNS, SYNTHETIC_POINTS, SYNTHETIC_TRAJECTORIES
from udfs.derive import seed63
from udfs.errors import InputDataError

log = logging.getLogger("trajpriv.synthesize")

SCHEMA = ("run_id string, dataset string, model string, epsilon double, delta double, "
          "privacy_model string, traj_no long, slots array<int>")


def find_train_run(spark, cfg: Config, train_run: str | None) -> tuple[str, dict]:
    """(run id, figures) of `train_run`, or of the dataset's latest successful train run."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import read_table

    runs = read_table(spark, RUNS).where((F.col("stage") == "train")
                                               & (F.col("status") == "ok"))
    if train_run:
        runs = runs.where(F.col("run_id") == train_run)
    rows = runs.orderBy(F.col("finished_at").desc()).select("run_id", "config", "figures")
    for row in rows.collect():
        if (yaml.safe_load(row["config"]) or {}).get("dataset") == cfg.dataset:
            return row["run_id"], json.loads(row["figures"])
    which = f"train run {train_run!r}" if train_run else "a successful train run"
    raise InputDataError(f"no {which} for dataset {cfg.dataset!r} in {RUNS}: run "
                         "`trajpriv train` first")


def synth_seed(cfg: Config, train_run: str) -> int:
    from jobs.keys import run_key

    key = run_key(cfg.storage.secrets)
    return seed63(key, "synthesize", train_run)


def shares(n: int, parts: int) -> list[tuple[int, int]]:
    """(first traj_no, count) of each partition."""
    base, extra = divmod(n, parts)
    counts = [base + (p < extra) for p in range(parts)]
    return list(zip(np.cumsum([0, *counts[:-1]]).tolist(), counts, strict=True))


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from jobs.spark.catalog import ensure_view, table_exists, write_table

    t0 = time.perf_counter()
    train_run, figs = find_train_run(spark, cfg, getattr(ctx.args, "train_run", None))
    method = of_run(figs)
    path = cfg.storage.runs_dir / train_run / method.artefact
    if not path.exists():
        raise InputDataError(f"train run {train_run} has no model at {path}")
    blob = path.read_bytes()
    model_name = method.model_name(blob)
    seed = synth_seed(cfg, train_run)
    n, parts = cfg.synthesize.n_days, cfg.synthesize.partitions
    plan = shares(n, parts)
    bc = spark.sparkContext.broadcast(blob)

    def kernel(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            for p in pdf["id"].tolist():
                first, count = plan[p]
                if count:
                    yield method.load(bc.value).sample_partition(seed, p, first, count)

    days = spark.range(0, parts, numPartitions=parts).mapInPandas(
        kernel, "traj_no long, slots array<int>")
    out = days.select(F.lit(train_run).alias("run_id"), F.lit(cfg.dataset).alias("dataset"),
                      F.lit(model_name).alias("model"),
                      F.lit(float(figs["epsilon"])).alias("epsilon"),
                      F.lit(float(figs["delta"])).alias("delta"),
                      F.lit(privacy_model(figs)).alias("privacy_model"), "traj_no", "slots")
    write_table(out, SYNTHETIC_TRAJECTORIES,
                replace={"dataset": cfg.dataset, "run_id": train_run})
    bc.unpersist()
    if table_exists(spark, LOCATIONS):
        ensure_view(spark, SYNTHETIC_POINTS, f"""
            SELECT x.run_id, x.dataset, x.model, x.epsilon, x.delta, x.privacy_model,
                   x.traj_no, x.slot,
                   x.loc_id, l.lat, l.lon
            FROM (SELECT t.*, p.slot, p.loc_id
                  FROM {SYNTHETIC_TRAJECTORIES} t
                  LATERAL VIEW posexplode(t.slots) p AS slot, loc_id) x
            JOIN {LOCATIONS} l ON l.dataset = x.dataset AND l.loc_id = x.loc_id""")
    written = (spark.table(SYNTHETIC_TRAJECTORIES).where((F.col("dataset") == cfg.dataset)
                                        & (F.col("run_id") == train_run)).count())
    if written != n:
        raise InputDataError(f"wrote {written} synthetic days for {train_run}, expected {n}")
    return {"train_run": train_run, "model": model_name, "days": written,
            "epsilon": figs["epsilon"], "delta": figs["delta"],
            "privacy_model": privacy_model(figs), "partitions": parts,
            "synth_s": round(time.perf_counter() - t0, 3)}


def privacy_model(figs: dict) -> str:
    """`local` or `central` as the train run published it (runs before the label: by method)."""
    if "privacy_model" in figs:
        return str(figs["privacy_model"])
    from models.config import LOCAL_SCHEMES

    return "local" if figs.get("method") in LOCAL_SCHEMES else "central"


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-run", default=None, metavar="RUN_ID",
                        help="train run to sample from (default: the dataset's latest ok run)")


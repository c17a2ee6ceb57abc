"""`trajpriv report`: report.html and figures.json of a dataset's latest results.

Collects the small tables a report needs (evaluation rows of the latest evaluate and collect runs,
the training history and privacy spent, a sample of points of a few pseudonymous users) and hands
them to `jobs.report_render`. The report shows raw points of those few users next to their
perturbed and synthetic points, so it is written under the data root (`<root>/reports/...`, the
trusted zone), not into a published table; `report.output` picks another folder.
Row shapes: evaluation (few hundred rows) / runs (one row per stage run) / points (a few hundred).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/report.py`: make the project importable
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import pandas as pd
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.catalog import RUNS_TABLE, table_exists
from jobs.config import Config
from jobs.keys import pseudonym, pseudonym_key
from jobs.report_render import ReportInputs, render_report

log = logging.getLogger("trajpriv.report")

MAP_USERS = 3
MAP_POINTS_PER_KIND = 300


def _runs(spark: SparkSession, dataset: str) -> pd.DataFrame:
    """Stage runs of this dataset (the config text names it), newest first."""
    if not table_exists(spark, RUNS_TABLE):
        return pd.DataFrame(columns=["run_id", "stage", "status", "finished_at", "figures"])
    pdf = (
        spark.table(RUNS_TABLE)
        .select("run_id", "stage", "status", "finished_at", "config", "figures")
        .toPandas()
    )
    own = pdf["config"].map(lambda text: (yaml.safe_load(text) or {}).get("dataset") == dataset)
    return pdf[own].drop(columns="config").sort_values("finished_at", ascending=False)


def _latest_ok(runs: pd.DataFrame, stage: str) -> pd.Series | None:
    ok = runs[(runs["stage"] == stage) & (runs["status"] == "ok")]
    return None if ok.empty else ok.iloc[0]


def _evaluation(spark: SparkSession, dataset: str, run_ids: list[str]) -> pd.DataFrame:
    cols = ["run_id", "dataset", "method", "setting", "metric", "value"]
    if not run_ids or not table_exists(spark, "trajpriv_pub.evaluation"):
        return pd.DataFrame(columns=cols)
    return (
        spark.table("trajpriv_pub.evaluation")
        .where((F.col("dataset") == dataset) & F.col("run_id").isin(run_ids))
        .select(*cols)
        .toPandas()
    )


def _training(train_run: pd.Series | None) -> tuple[pd.DataFrame, list[dict]]:
    """Training curves (round, metric, value) and the privacy row of the training run."""
    if train_run is None:
        return pd.DataFrame(columns=["round", "metric", "value"]), []
    figures = json.loads(train_run["figures"] or "{}")
    curves = [
        (i + 1, name, float(v))
        for key, name in (
            ("reward_mean", "released reward (mean)"),
            ("reward_raw_mean", "critic reward before noise"),
            ("epsilon_by_round", "epsilon spent"),
        )
        for i, v in enumerate(figures.get(key, []))
        if isinstance(v, (int, float))
    ]
    privacy = []
    if "epsilon" in figures:
        privacy.append(
            {
                "source": f"train {train_run['run_id']}",
                "setting": f"{figures.get('rounds_done', '?')} rounds",
                "epsilon": figures.get("epsilon"),
                "delta": figures.get("delta"),
            }
        )
    return pd.DataFrame(curves, columns=["round", "metric", "value"]), privacy


def _ledger(spark: SparkSession, collect_runs: list[str]) -> list[dict]:
    """Collection spend per mechanism and epsilon: users, releases, largest per-user total."""
    table = "trajpriv_raw.privacy_ledger"
    if not collect_runs or not table_exists(spark, table):
        return []
    per_user = (
        spark.table(table)
        .where(F.col("run_id").isin(collect_runs))
        .groupBy("mechanism", "epsilon", "user_id")
        .agg(F.sum("epsilon").alias("spent"), F.count("*").alias("releases"))
    )
    rows = (
        per_user.groupBy("mechanism", "epsilon")
        .agg(
            F.count("*").alias("users"),
            F.sum("releases").alias("releases"),
            F.max("spent").alias("max_user_epsilon"),
        )
        .orderBy("mechanism", "epsilon")
        .collect()
    )
    return [
        {
            "source": f"collect {r['mechanism']}",
            "setting": f"{r['epsilon']:g} per trajectory",
            "epsilon": float(r["max_user_epsilon"]),
            "delta": 0.0,
            "users": int(r["users"]),
            "releases": int(r["releases"]),
        }
        for r in rows
    ]


def _map_points(spark: SparkSession, cfg: Config) -> pd.DataFrame:
    """Real and perturbed points of a few pseudonymous users, and a few synthetic days."""
    frames = []
    dataset = cfg.dataset
    if table_exists(spark, "trajpriv_pub.perturbed_points"):
        pert = spark.table("trajpriv_pub.perturbed_points").where(F.col("dataset") == dataset)
        best = pert.agg(F.max("epsilon").alias("e")).first()["e"]
        if best is not None:
            pert = pert.where((F.col("epsilon") == best) & (F.col("mechanism") == "atp"))
            who = [r[0] for r in pert.select("pseudonym").distinct().limit(MAP_USERS).collect()]
            mine = pert.where(F.col("pseudonym").isin(who)).limit(MAP_POINTS_PER_KIND).toPandas()
            frames.append(
                mine.assign(kind="perturbed", who=mine["pseudonym"])[["kind", "who", "lat", "lon"]]
            )
            key = pseudonym_key(cfg.storage.secrets)
            raw = spark.table("trajpriv_raw.points").where(F.col("dataset") == dataset)
            users = [r[0] for r in raw.select("user_id").distinct().collect()]
            by_pseudonym = {pseudonym(key, u): u for u in users}
            raw_ids = [by_pseudonym[p] for p in who if p in by_pseudonym]
            real = raw.where(F.col("user_id").isin(raw_ids)).limit(MAP_POINTS_PER_KIND).toPandas()
            real["who"] = real["user_id"].map(lambda u: pseudonym(key, u))
            frames.append(real.assign(kind="real")[["kind", "who", "lat", "lon"]])
    if table_exists(spark, "trajpriv_pub.synthetic_points"):
        syn = spark.table("trajpriv_pub.synthetic_points").where(F.col("dataset") == dataset)
        syn = syn.where(F.col("traj_no") < MAP_USERS).limit(MAP_POINTS_PER_KIND).toPandas()
        frames.append(
            syn.assign(kind="synthetic", who=syn["traj_no"].astype(str))[
                ["kind", "who", "lat", "lon"]
            ]
        )
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    runs = _runs(spark, cfg.dataset)
    latest = {stage: _latest_ok(runs, stage) for stage in ("collect", "evaluate", "train")}
    run_ids = [r["run_id"] for r in (latest["collect"], latest["evaluate"]) if r is not None]
    evaluation = _evaluation(spark, cfg.dataset, run_ids)
    training, train_privacy = _training(latest["train"])
    collect_runs = runs.loc[(runs["stage"] == "collect") & (runs["status"] == "ok"), "run_id"]
    privacy = pd.DataFrame(_ledger(spark, list(collect_runs)) + train_privacy)
    stage_runs = runs.head(20).assign(
        wall_s=runs.head(20)["figures"].map(lambda t: json.loads(t or "{}").get("wall_s"))
    )[["run_id", "stage", "status", "finished_at", "wall_s"]]
    inputs = ReportInputs(
        dataset=cfg.dataset,
        evaluation=evaluation,
        map_points=_map_points(spark, cfg),
        training=training,
        privacy=privacy,
        runs=stage_runs,
    )
    out_dir = cfg.report.output or (
        cfg.storage.root.resolve() / "reports" / cfg.dataset / ctx.run_id
    )
    html_path, json_path = render_report(inputs, Path(out_dir))
    print(f"trajpriv report: written {html_path}")
    return {
        "report": str(html_path),
        "figures_json": str(json_path),
        "evaluation_rows": int(len(evaluation)),
        "map_points": int(len(inputs.map_points)),
    }


if __name__ == "__main__":
    from jobs.stage import main

    sys.exit(main("report", run))

"""`trajpriv report`: report.html and figures.json of a dataset's latest results.

Collects the small tables a report needs (evaluation rows of the latest evaluate and collect runs,
the training history and privacy spent, a sample of points of a few pseudonymous users) and hands
them to `jobs.report.render`. The report shows raw points of those few users next to their
perturbed and synthetic points, so it is written under the data root (`<root>/reports/...`, the
trusted zone), not into a published table; `report.output` picks another folder.
Row shapes: evaluation (few hundred rows) / runs (one row per stage run) / points (a few hundred).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.config import STAGES, Config
from jobs.keys import pseudonym, pseudonym_key
from jobs.methods import of_run
from jobs.report.render import ReportInputs, render_report
from jobs.spark.catalog import table_exists
from jobs.spark.tables import (
    EVALUATION,
    LOCATIONS,
    PERTURBED_TRAJECTORIES,
    RUNS,
    SYNTHETIC_POINTS,
)

log = logging.getLogger("trajpriv.report")

MAP_USERS = 3
MAP_POINTS_PER_KIND = 300
MAP_TRAJECTORIES_PER_USER = 3
MAP_CONTEXT_POINTS = 20_000


def _header(spark: SparkSession, cfg: Config, latest: dict[str, pd.Series | None],
            ledger_rows: list[dict], train_privacy: list[dict]) -> dict[str, Any]:
    """What the page's header says: dataset, the runs shown, the config hash, the privacy unit
    and what a user spent (distribution figures of the ledger, as `trajpriv budget` shows)."""
    from jobs.spark.ledger import collect_releases, per_user_window

    p = cfg.privacy
    shown = [(stage, r) for stage, r in latest.items() if r is not None]
    config_text = next((r["config"] for _, r in shown if r.get("config")), None)
    header: dict[str, Any] = {
        "dataset": cfg.dataset,
        "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "config_hash": (hashlib.sha256(config_text.encode()).hexdigest()[:12]
                        if config_text else None),
        "runs": [{"stage": stage, "run_id": r["run_id"]} for stage, r in shown],
        "privacy_unit": p.unit, "budget": float(p.budget), "window_days": int(p.window_days),
    }
    releases = collect_releases(spark, cfg.dataset)
    if releases:
        last = releases[-1]
        header["release"] = {"mechanism": last.mechanism, "epsilon": float(last.epsilon),
                             "release_id": last.release_id}
    windows = [r for r in ledger_rows if r["source"].startswith("collection")]
    if windows:
        total = per_user_window(spark, cfg.dataset, p.window_days).groupBy("user_id").agg(
            F.sum("epsilon").alias("t")).agg(F.max("t").alias("max"),
                                             F.count(F.lit(1)).alias("users")).first()
        header["collection"] = {"windows": len(windows),
                                "users": int(total["users"]),
                                "max_window_epsilon": max(r["epsilon"] for r in windows),
                                "max_total_epsilon": float(total["max"])}
    train = next((r for r in ledger_rows if r["source"].startswith("training")), None)
    if train is not None:
        header["training"] = {"epsilon": train["epsilon"], "delta": train["delta"],
                              "users": train["users"], "model": "central"}
    elif train_privacy:
        header["training"] = {"epsilon": train_privacy[0]["epsilon"],
                              "delta": train_privacy[0]["delta"], "model": "central"}
    return header


def _locations(spark: SparkSession, dataset: str) -> pd.DataFrame:
    """The public location set (grey context of the map)."""
    if not table_exists(spark, LOCATIONS):
        return pd.DataFrame(columns=["lat", "lon"])
    return (spark.table(LOCATIONS).where(F.col("dataset") == dataset).select("lat", "lon")
            .limit(MAP_CONTEXT_POINTS).toPandas())


def _runs(spark: SparkSession, dataset: str) -> pd.DataFrame:
    """Stage runs of this dataset (the config text names it), newest first."""
    if not table_exists(spark, RUNS):
        return pd.DataFrame(columns=["run_id", "stage", "status", "finished_at", "figures"])
    pdf = (
        spark.table(RUNS)
        .select("run_id", "stage", "status", "finished_at", "config", "figures")
        .toPandas()
    )
    own = pdf["config"].map(lambda text: (yaml.safe_load(text) or {}).get("dataset") == dataset)
    return pdf[own].sort_values("finished_at", ascending=False)


def _latest_ok(runs: pd.DataFrame, stage: str) -> pd.Series | None:
    ok = runs[(runs["stage"] == stage) & (runs["status"] == "ok")]
    return None if ok.empty else ok.iloc[0]


def _evaluation(spark: SparkSession, dataset: str, run_ids: list[str]) -> pd.DataFrame:
    cols = ["run_id", "dataset", "method", "setting", "metric", "value"]
    if not run_ids or not table_exists(spark, EVALUATION):
        return pd.DataFrame(columns=cols)
    return (
        spark.table(EVALUATION)
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
            ("epsilon_by_round", "epsilon spent"),
        )
        for i, v in enumerate(figures.get(key, []))
        if isinstance(v, (int, float))
    ]
    privacy = []
    if "epsilon" in figures:
        model = figures.get("privacy_model", "central")
        setting = of_run(figures).privacy_setting(figures)
        if model == "local":
            setting += " (per user, against the server)"
        for warning in figures.get("warnings") or []:
            setting += f"; {warning}"
        privacy.append(
            {
                "source": f"train {train_run['run_id']}",
                "setting": setting,
                "epsilon": figures.get("epsilon"),
                "delta": figures.get("delta"),
            }
        )
    return pd.DataFrame(curves, columns=["round", "metric", "value"]), privacy


def _ledger(spark: SparkSession, cfg: Config) -> list[dict]:
    """A user's total, not a setting's: per budget window, the distribution over users of the
    collection epsilon each spent (summed over every release of their trajectories dated in
    that window) against the declared budget, and the training (epsilon, delta) per user."""
    from jobs.spark.ledger import budget_table, training_per_user

    p = cfg.privacy
    rows = budget_table(spark, cfg.dataset, p.budget, p.window_days, per_user=False).collect()
    out = [
        {
            "source": "collection (local epsilon, per user)",
            "setting": f"window from {r['window_start']} ({p.window_days} days), budget "
                       f"{p.budget:g}",
            "users": int(r["users"]),
            "median": float(r["median_epsilon"]),
            "p90": float(r["p90_epsilon"]),
            "epsilon": float(r["max_epsilon"]),
            "delta": 0.0,
            "min remaining": float(r["min_remaining"]),
        }
        for r in rows
    ]
    train = training_per_user(spark, cfg.dataset).agg(
        F.count(F.lit(1)).alias("users"), F.max("train_epsilon").alias("eps"),
        F.max("train_delta").alias("delta")).first()
    if train and train["users"]:
        out.append({"source": "training (per trained user, all runs)", "setting": "ledger",
                    "users": int(train["users"]), "epsilon": float(train["eps"]),
                    "delta": float(train["delta"])})
    return out


def _map_points(spark: SparkSession, cfg: Config) -> pd.DataFrame:
    """(kind, who, traj, seq, lat, lon): a few released trajectories of a few users, raw and as
    published, and a few synthetic days, each point in its order along its trajectory.

    Trusted zone: the raw trajectories are joined to their published ones through the ledger,
    and the users are shown by a keyed hash, never by raw id (the report file is mode 0600).
    """
    from jobs.evaluate.pairs import perturbed_pairs

    cols = ["kind", "who", "traj", "seq", "lat", "lon"]
    frames = []
    key = pseudonym_key(cfg.storage.secrets)
    locations = spark.table(LOCATIONS).where(F.col("dataset") == cfg.dataset).select(
        "loc_id", "lat", "lon")
    if table_exists(spark, PERTURBED_TRAJECTORIES):
        pairs = perturbed_pairs(spark, cfg)
        if pairs is not None:
            released = pairs.where(F.col("mechanism").endswith("-release"))
            who = [r[0] for r in released.select("user_id").distinct().orderBy("user_id")
                   .limit(MAP_USERS).collect()]
            mine = released.where(F.col("user_id").isin(who)).select(
                "user_id", "traj_key", "raw", "pert").orderBy("user_id", "traj_key")
            # one row per trajectory -> one row per point and side
            mine = mine.limit(MAP_USERS * MAP_TRAJECTORIES_PER_USER * 4).toPandas()
            mine = mine.groupby("user_id").head(MAP_TRAJECTORIES_PER_USER)
            for kind, col in (("real", "raw"), ("perturbed", "pert")):
                pts = mine[["user_id", "traj_key", col]].explode(col).rename(
                    columns={col: "loc_id"}).dropna(subset=["loc_id"])
                pts["seq"] = pts.groupby("traj_key").cumcount()
                pts["kind"] = kind
                frames.append(pts)
            if frames:
                pts = pd.concat(frames, ignore_index=True)
                pts["loc_id"] = pts["loc_id"].astype(int)
                coords = locations.where(F.col("loc_id").isin(
                    [int(v) for v in pts["loc_id"].unique()])).toPandas()
                pts = pts.merge(coords, on="loc_id")
                pts["who"] = pts["user_id"].map(lambda u: pseudonym(key, u))
                frames = [pts.rename(columns={"traj_key": "traj"})[cols]]
    if table_exists(spark, SYNTHETIC_POINTS):
        syn = spark.table(SYNTHETIC_POINTS).where(F.col("dataset") == cfg.dataset)
        syn = syn.where(F.col("traj_no") < MAP_USERS).limit(MAP_POINTS_PER_KIND).toPandas()
        frames.append(syn.assign(kind="synthetic", who=syn["traj_no"].astype(str),
                                 traj=syn["traj_no"].astype(str), seq=syn["slot"])[cols])
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    runs = _runs(spark, cfg.dataset)
    latest = {stage: _latest_ok(runs, stage)
              for stage in STAGES[STAGES.index("study"):STAGES.index("report")]}
    run_ids = [r["run_id"] for r in (latest["study"], latest["evaluate"]) if r is not None]
    from jobs.spark.ledger import collect_releases

    run_ids += [r.release_id for r in collect_releases(spark, cfg.dataset)]
    evaluation = _evaluation(spark, cfg.dataset, run_ids)
    training, train_privacy = _training(latest["train"])
    # One table for rows of different shapes (windows, training): a blank where a row has no
    # such figure, not NaN.
    ledger_rows = _ledger(spark, cfg)
    privacy = pd.DataFrame(ledger_rows + train_privacy)
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
        header=_header(spark, cfg, latest, ledger_rows, train_privacy),
        locations=_locations(spark, cfg.dataset),
    )
    out_dir = cfg.report.output or (
        cfg.storage.root.resolve() / "reports" / cfg.dataset / ctx.run_id
    )
    html_path, json_path = render_report(inputs, Path(out_dir))
    for path in (html_path, json_path):  # raw points of a few users: trusted zone
        os.chmod(path, 0o600)
    print(f"trajpriv report: written {html_path}")
    return {
        "report": str(html_path),
        "figures_json": str(json_path),
        "evaluation_rows": int(len(evaluation)),
        "map_points": int(len(inputs.map_points)),
    }


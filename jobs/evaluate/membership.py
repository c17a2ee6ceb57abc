"""White-box membership inference and LiRA against a train run (`trajpriv evaluate --attacks`).

Target: a train run's artefacts under `<storage.root>/runs/<run_id>/` (policy, critics merged
from the ranks' shards, recipe: `models.attacks.target.TrainedRun`). By default the run(s) whose
synthetic days the evaluation compares, so the attack figures sit next to that model's utility
figures (same method = model and setting = epsilon in `trajpriv_trusted.evaluation`).
Candidates: all days in `trajpriv_raw.slot_days_split` of at most `evaluate.attack_users` users
that have a critic (users with training days), the first ones in keyed-pseudonym order (a
pseudo-random sample that no one without the key can steer). Members are split `train` (exactly
the rows `trajpriv train` staged), non-members split `holdout`, the same users' other days.
Guard: the split's day counts must equal those the train run recorded in its figures; if the
split changed since (a new ingest), the labels would be wrong, so the job stops and says so.
The attack itself is `models.attacks.suite.membership_attacks` (pure torch / scikit-learn) on
the driver; only its figures are published. This is the trusted zone: raw user ids and days
are read here and never leave it.
Row shapes: split (dataset, split, user_id, date, slots) -> sampled users' days on the driver
(split, user_id, date, slots) -> Candidates (n, 48 map rows) -> AttackReports -> evaluation rows
(method = model, setting = epsilon, metric = <attack>_<figure>).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.config import Config
from jobs.keys import pseudonym, pseudonym_key
from jobs.progress import track
from jobs.spark.catalog import read_table, table_exists
from jobs.spark.tables import RUNS, SLOT_DAYS_SPLIT, SYNTHETIC_TRAJECTORIES
from models.attacks.membership import Candidates
from models.attacks.report import AttackSettings
from models.attacks.suite import AttackPlan, membership_attacks
from models.attacks.target import TrainedRun, shadow_trainer
from models.data import TrainData
from udfs.errors import InputDataError

log = logging.getLogger("trajpriv.attacks")



def attack_targets(spark: SparkSession, cfg: Config) -> list[tuple[str, str, float]]:
    """(train run id, model, epsilon) of the latest synthetic days per model, or of the
    dataset's latest ok train run when nothing was synthesized; [] when there is no train run."""
    if table_exists(spark, SYNTHETIC_TRAJECTORIES):
        from jobs.evaluate.pairs import latest_runs

        synth = latest_runs(spark, SYNTHETIC_TRAJECTORIES, cfg.dataset, ["model"])
        rows = synth.select("run_id", "model", "epsilon").distinct().collect()
        if rows:
            return sorted((r["run_id"], r["model"], float(r["epsilon"])) for r in rows)
    from jobs.synthesize.stage import find_train_run

    try:
        run_id, figures = find_train_run(spark, cfg, None)
    except InputDataError:
        return []
    return [(run_id, TrainedRun.load(cfg.storage.runs_dir / run_id).scheme,
             float(figures["epsilon"]))]


def _check_split(spark: SparkSession, cfg: Config, run_id: str) -> None:
    """The split table must still hold the days the run was trained on (same counts). The
    counts are exact, so the run keeps them in its trusted run folder (`trusted.json`); runs
    recorded before that published them in their figures."""
    trusted = cfg.storage.runs_dir / run_id / "trusted.json"
    if trusted.exists():
        recorded = json.loads(trusted.read_text()).get("split")
    else:
        row = (read_table(spark, RUNS).where(F.col("run_id") == run_id)
               .select("figures").first())
        recorded = (json.loads(row["figures"] or "{}") if row else {}).get("split")
    if not recorded:
        return  # a run recorded before the split counts: nothing to compare
    now = (spark.table(SLOT_DAYS_SPLIT).where(F.col("dataset") == cfg.dataset).groupBy("split")
           .agg(F.count("*").alias("days")).collect())
    counts = {r["split"]: r["days"] for r in now}
    then = {k: v["days"] for k, v in recorded.items()}
    if counts != then:
        raise InputDataError(f"{SLOT_DAYS_SPLIT} now holds {counts} days for {cfg.dataset!r}, "
                             f"train run {run_id} was trained with {then}: the members are no "
                             "longer known; retrain, or set evaluate.attack_kinds=[home]")


def candidates_of(spark: SparkSession, cfg: Config, target: TrainedRun
                  ) -> tuple[TrainedRun, Candidates, TrainData]:
    """The attacked users' critics, their days as candidates, and the days per user (what the
    shadows train on), all in the same user order."""
    key = pseudonym_key(cfg.storage.secrets)
    ids = target.critics.user_ids
    by_pseudonym = sorted(range(len(ids)), key=lambda i: pseudonym(key, str(ids[i])))
    pick = sorted(by_pseudonym[:cfg.evaluate.attack_users])
    users = [ids[i] for i in pick]
    pdf = (spark.table(SLOT_DAYS_SPLIT)
           .where((F.col("dataset") == cfg.dataset) & F.col("user_id").isin(users))
           .select("split", "user_id", "date", "slots").toPandas())
    pos = {u: i for i, u in enumerate(users)}
    pdf = pdf.assign(u=pdf["user_id"].map(pos)).sort_values(["u", "date"], kind="stable")
    if pdf.empty:
        raise InputDataError(f"{SLOT_DAYS_SPLIT} holds no days of the users train run critics were "
                             "trained for: retrain")
    days = target.rows_of(np.stack(pdf["slots"].to_numpy()))
    u = pdf["u"].to_numpy(np.int64)
    cands = Candidates(days, u, (pdf["split"] == "train").to_numpy())
    template = TrainData([days[u == i] for i in range(len(users))], target.coords, users)
    return target.with_users(pick), cands, template


@contextlib.contextmanager
def torch_threads():
    """Torch intra-op threads for the attacks: `TRAJPRIV_TORCH_THREADS` (default 1, as the
    training ranks), restored afterwards. The critics and policy are small: extra threads do not
    help them, and on a busy machine spinning threads slow the attacks down."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(os.environ.get("TRAJPRIV_TORCH_THREADS", "1"))))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def membership_family(spark: SparkSession, cfg: Config, kinds: set[str],
                      targets: list[tuple[str, str, float]] | None
                      ) -> tuple[list[dict], dict[str, Any]]:
    """The `membership` family's runner (`jobs.attack_kinds`): the white-box MIA and LiRA
    against each of `targets` (default: `attack_targets`) whose method is learned."""
    targets = attack_targets(spark, cfg) if targets is None else targets
    # the white-box MIA and LiRA score a user's days with the run's per-user critics, which
    # only a learned method has (a DP Markov release is one table of summed counts)
    from jobs.methods import methods

    rows: list[dict] = []
    figures: dict[str, Any] = {}
    registry = methods()
    without = [t for t in targets if not (t[1] in registry and registry[t[1]].learned)]
    if without:
        log.warning("membership attacks skip the run(s) %s of methods without per-user "
                    "critics (%s)", ", ".join(t[0] for t in without),
                    ", ".join(sorted({t[1] for t in without})))
        figures["membership_skipped"] = sorted(t[0] for t in without)
    targets = [t for t in targets if t not in without]
    if not targets and not without:
        log.warning("no train run of %s to attack: membership attacks skipped", cfg.dataset)
    for run_id, model, epsilon in track(targets, "evaluate membership attacks", "trained runs"):
        more, figs = attack_run(spark, cfg, run_id, model, epsilon)
        rows += more
        prefix = "" if len(targets) == 1 else f"{model}_"
        figures.update({f"{prefix}{k}": v for k, v in figs.items()})
    return rows, figures


def attack_run(spark: SparkSession, cfg: Config, run_id: str, model: str, epsilon: float
               ) -> tuple[list[dict], dict[str, Any]]:
    """Evaluation rows and figures of the white-box MIA and LiRA against train run `run_id`."""
    with torch_threads():
        return _attack_run(spark, cfg, run_id, model, epsilon)


def _attack_run(spark: SparkSession, cfg: Config, run_id: str, model: str, epsilon: float
                ) -> tuple[list[dict], dict[str, Any]]:
    t0 = time.perf_counter()
    kinds = cfg.evaluate.attack_kinds
    run_dir = Path(cfg.storage.runs_dir) / run_id
    try:
        target = TrainedRun.load(run_dir)
    except InputDataError as exc:
        raise InputDataError(f"membership attacks on train run {run_id}: {exc} (or set "
                             "evaluate.attack_kinds=[home])") from None
    _check_split(spark, cfg, run_id)
    target, cands, template = candidates_of(spark, cfg, target)
    t_read = time.perf_counter() - t0
    lira = "lira" in kinds
    reports, seconds = membership_attacks(
        target, target.coords, cands, template, shadow_trainer(target) if lira else None,
        plan=AttackPlan(whitebox="whitebox" in kinds,
                        n_shadows=cfg.evaluate.lira_shadows if lira else 0),
        settings=AttackSettings(seed=cfg.seed, n_boot=cfg.evaluate.attack_bootstrap))
    rows = [{"method": model, "setting": epsilon, "metric": m, "value": v}
            for rep in reports for m, v in rep.rows()]
    rows.append({"method": model, "setting": epsilon, "metric": "attack_users",
                 "value": float(template.n_users)})
    if lira:
        rows.append({"method": model, "setting": epsilon, "metric": "lira_shadows",
                     "value": float(cfg.evaluate.lira_shadows)})
    figures: dict[str, Any] = {f"{r.attack}_auc": round(r.auc, 4) for r in reports}
    figures["membership_seconds"] = {"read": round(t_read, 3), **seconds}
    log.info("membership attacks on %s (%s, epsilon %.4g, %d users, %d days): %s", run_id,
             model, epsilon, template.n_users, len(cands.days), figures)
    return rows, figures

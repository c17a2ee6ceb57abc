"""Attacks run by `trajpriv evaluate --attacks` (`evaluate.attack_kinds`, all three by default).

- `home`: home re-identification on the published tables. For a deterministic sample of users
  (by pseudonym order, at most `MAX_USERS` so the points fit on the driver), the true home comes
  from raw night-time points; the attacker infers a home from each published view of the same
  users with one rule (`models.attacks.home`: the point with the most of the user's other points
  within 0.5 km), applied alike to `raw` (the raw points without their times: the upper end of
  the scale) and every (mechanism, epsilon) of the latest collection (`uniform` is the lower
  end). Metrics `home_reid_*` (share within 1 km and its 95% bootstrap interval).
- `whitebox`, `lira`: membership inference against the train run(s) being evaluated
  (`jobs/evaluate/membership.py`): members are the run's training days, non-members held-out
  days of the same users. Metrics `whitebox_mia_*`, `lira_policy_*`, `lira_policy_offline_*`,
  `lira_critic_*` (AUC, balanced accuracy, TPR at 1% FPR, each with its bootstrap interval).
The linking of published rows to users happens here, in the trusted zone, and the figures stay
there (`trajpriv_trusted.evaluation`): an attack's score is computed from raw data.
Row shapes: raw points (user_id, ts, lat, lon) -> sample (who, ts, lat, lon) -> per setting
published points (who, lat, lon) -> one share per setting.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.attack_kinds import families_of, runner_of
from jobs.config import Config
from jobs.evaluate.pairs import perturbed_pairs
from jobs.keys import pseudonym, pseudonym_key
from jobs.spark.catalog import read_table
from jobs.spark.tables import LOCATIONS, POINTS
from models.attacks.home import home_reidentification

log = logging.getLogger("trajpriv.attacks")

MAX_USERS = 2000


def _rows(method: str, setting: float | None, result: dict[str, Any]) -> list[dict]:
    return [
        {"method": method, "setting": setting, "metric": f"home_reid_{key}", "value": result[key]}
        for key in ("share_within_km", "share_lo", "share_hi", "median_error_km")
    ]


def run_attacks(spark: SparkSession, cfg: Config,
                targets: list[tuple[str, str, float]] | None = None
                ) -> tuple[list[dict], dict[str, Any]]:
    """Evaluation rows and figures of `evaluate.attack_kinds` for `cfg.dataset`, family by
    family of the registry (`jobs.attack_kinds`); `targets`: (train run id, model, epsilon) to
    attack (default: `membership.attack_targets`)."""
    kinds = set(cfg.evaluate.attack_kinds)
    rows: list[dict] = []
    figures: dict[str, Any] = {}
    for family in families_of(kinds):
        more, figs = runner_of(family)(spark, cfg, kinds, targets)
        rows += more
        figures.update(figs)
    return rows, figures


def home_family(spark: SparkSession, cfg: Config, kinds: set[str],
                targets: list[tuple[str, str, float]] | None
                ) -> tuple[list[dict], dict[str, Any]]:
    """The `home` family's runner (`jobs.attack_kinds`): it attacks published points, not
    train runs."""
    return home_attack(spark, cfg)


def perturbed_views(spark: SparkSession, cfg: Config, users: list[str]) -> DataFrame | None:
    """(method, epsilon, who = user_id, lat, lon): every perturbed point of `users` in the
    latest study and in every published release (trusted zone: rows are linked to their user
    through the ledger, so the attacker is granted linkage across pseudonym windows, the
    strongest case)."""
    pairs = perturbed_pairs(spark, cfg)
    if pairs is None:
        return None
    locations = spark.table(LOCATIONS).where(F.col("dataset") == cfg.dataset)
    return (
        pairs.where(F.col("user_id").isin(users))
        .select("mechanism", "epsilon", F.col("user_id").alias("who"),
                F.explode("pert").alias("loc_id"))
        .join(locations.select("loc_id", "lat", "lon"), "loc_id")
        .select("mechanism", "epsilon", "who", "lat", "lon")
    )


def home_attack(spark: SparkSession, cfg: Config) -> tuple[list[dict], dict[str, Any]]:
    """Evaluation rows and figures of home re-identification for `cfg.dataset`."""
    key = pseudonym_key(cfg.storage.secrets)
    raw = read_table(spark, POINTS).where(F.col("dataset") == cfg.dataset)
    users = [r[0] for r in raw.select("user_id").distinct().collect()]
    # A deterministic sample that does not depend on raw id order: by keyed hash.
    sample = [u for _, u in sorted((pseudonym(key, u), u) for u in users)[:MAX_USERS]]
    true = raw.where(F.col("user_id").isin(sample)).select("user_id", "ts", "lat", "lon").toPandas()
    true = true.rename(columns={"user_id": "who"})[["who", "ts", "lat", "lon"]]
    rows = _rows("raw", None, home_reidentification(true, true[["who", "lat", "lon"]]))
    figures: dict[str, Any] = {"attack_users": len(sample)}
    views = perturbed_views(spark, cfg, sample)
    if views is not None:
        points = views.toPandas()
        for (mechanism, eps), part in points.groupby(["mechanism", "epsilon"]):
            result = home_reidentification(true, part[["who", "lat", "lon"]])
            rows += _rows(f"perturbed_{mechanism}", float(eps), result)
            figures[f"home_reid_{mechanism}_{eps:g}"] = round(result["share_within_km"], 4)
    figures["home_reid_raw"] = round(rows[0]["value"], 4)
    log.info("home re-identification: %s", figures)
    return rows, figures

"""The privacy ledger: append-only, complete, and the commit log of every release
(docs/architecture.md 4).

Why one table for spend and commit state: the epsilon trajpriv prints must be what it did, even
after a crash at any point. Every collection release goes through the same states, each an
append to `trajpriv_raw.privacy_ledger` (nothing is ever overwritten or deleted):

1. `planned` + `spent` (one write, before any noise is drawn): a release marker row naming the
   setting and the number of charges, and one `spent` row per released trajectory (dataset,
   user, trajectory date and id, the published traj_key, mechanism, epsilon). This is the
   charge; it counts against the user's budget from then on, published or not.
2. `published`: after the release's rows are in `trajpriv_pub.perturbed_trajectories` (a write
   that replaces only the release's own partition, so redoing it is harmless).
3. `registered`: after the release is listed in `trajpriv_pub.releases`.
4. `evaluated`: after its trusted-zone utility figures are written (not a privacy state).

A release missing a later state is rolled forward by the next collect run (`jobs.collect.stage`):
its perturbed rows are recomputed from exactly its `spent` rows with the same secret seeds, so
the published rows equal an undisturbed run's and the spend equals what is published, never
less and never twice. Budgets are computed from each row's trajectory `date`, so changing
`privacy.window_days` re-maps earlier spend correctly.

Training appends one `spent` row per trained user (stage `train`, the run id as release id,
epsilon and delta of the whole run, no date): one query gives a user's total.

Row shape: LEDGER_SCHEMA, built from `jobs.spark.tables.PRIVACY_LEDGER` (the columns' one home);
partitioned by (stage, release_id).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.spark.catalog import append_table, spark_schema, table_exists
from jobs.spark.tables import PRIVACY_LEDGER
from udfs.collect_plan import EPOCH

PLANNED, SPENT, PUBLISHED, REGISTERED, EVALUATED = (
    "planned", "spent", "published", "registered", "evaluated")
MARKER_STATES = (PLANNED, PUBLISHED, REGISTERED, EVALUATED)

LEDGER_SCHEMA = spark_schema(PRIVACY_LEDGER)  # the catalogue's columns, in its order


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)


@dataclass(frozen=True)
class Release:
    """One collection release as the ledger records it."""

    release_id: str
    run_id: str
    dataset: str
    mechanism: str
    epsilon: float
    states: frozenset[str] = field(default_factory=frozenset)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return EVALUATED in self.states


def ledger_rows(frame: DataFrame, **values: Any) -> DataFrame:
    """The one builder of ledger rows: each LEDGER_SCHEMA column is the literal `values` names
    for it, else `frame`'s column of that name, else null; each cast to its schema type, in
    schema order. `recorded_at` defaults to now."""
    names = LEDGER_SCHEMA.fieldNames()
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise ValueError(f"{unknown} are not ledger columns {names}")
    values.setdefault("recorded_at", now())
    cols = []
    for f in LEDGER_SCHEMA.fields:
        if f.name in values:
            col = F.lit(values[f.name])
        elif f.name in frame.columns:
            col = F.col(f.name)
        else:
            col = F.lit(None)
        cols.append(col.cast(f.dataType).alias(f.name))
    return frame.select(*cols)


def marker_frame(spark: SparkSession, release: Release, state: str,
                 detail: dict[str, Any] | None = None) -> DataFrame:
    """The one marker row of `state` for `release` (epsilon 0: a marker charges nothing)."""
    if state not in MARKER_STATES:
        raise ValueError(f"{state!r} is not a marker state {MARKER_STATES}")
    return ledger_rows(spark.range(1), dataset=release.dataset, run_id=release.run_id,
                       mechanism=release.mechanism, epsilon=0.0, delta=0.0, state=state,
                       detail=json.dumps(detail or {}, sort_keys=True), stage="collect",
                       release_id=release.release_id)


def append(df: DataFrame) -> None:
    """Append rows of LEDGER_SCHEMA (the only way anything is written to the ledger)."""
    append_table(df.select(*LEDGER_SCHEMA.fieldNames()), PRIVACY_LEDGER)


def mark(spark: SparkSession, release: Release, state: str,
         detail: dict[str, Any] | None = None) -> None:
    append(marker_frame(spark, release, state, detail))


def rows(spark: SparkSession) -> DataFrame:
    """The whole ledger (an empty frame of LEDGER_SCHEMA before the first write)."""
    if not table_exists(spark, PRIVACY_LEDGER):
        return spark.createDataFrame([], LEDGER_SCHEMA)
    return spark.table(PRIVACY_LEDGER)


def collect_releases(spark: SparkSession, dataset: str) -> list[Release]:
    """Every collection release of `dataset` with the states it reached, oldest first."""
    markers = (
        rows(spark)
        .where((F.col("stage") == "collect") & (F.col("dataset") == dataset)
               & F.col("user_id").isNull())
        .select("release_id", "run_id", "mechanism", "state", "detail", "recorded_at")
        .collect()
    )
    by_id: dict[str, dict[str, Any]] = {}
    for m in markers:
        entry = by_id.setdefault(m["release_id"], {"states": set(), "detail": {}, "run": None,
                                                   "mech": m["mechanism"], "at": m["recorded_at"]})
        entry["states"].add(m["state"])
        if m["state"] == PLANNED:
            entry["detail"] = json.loads(m["detail"] or "{}")
            entry["run"] = m["run_id"]
            entry["at"] = m["recorded_at"]
    out = []
    for rid, e in sorted(by_id.items(), key=lambda kv: (kv[1]["at"], kv[0])):
        detail = e["detail"]
        out.append(Release(rid, e["run"] or "", dataset, e["mech"],
                           float(detail.get("epsilon", 0.0)), frozenset(e["states"]), detail))
    return out


def spent_rows(spark: SparkSession, release_id: str) -> DataFrame:
    """The charges of one release: (user_id, date, traj_id, traj_key, mechanism, epsilon)."""
    return (
        rows(spark)
        .where((F.col("stage") == "collect") & (F.col("release_id") == release_id)
               & (F.col("state") == SPENT))
        .select("user_id", "date", "traj_id", "traj_key", "mechanism", "epsilon")
    )


def collect_spend(spark: SparkSession, dataset: str) -> DataFrame:
    """Every collection charge of `dataset`: (user_id, date, traj_id, mechanism, epsilon)."""
    return (
        rows(spark)
        .where((F.col("stage") == "collect") & (F.col("dataset") == dataset)
               & (F.col("state") == SPENT))
        .select("user_id", "date", "traj_id", "mechanism", "epsilon", "release_id")
    )


def window_start_col(date: F.Column, window_days: int) -> F.Column:
    """Spark column: start of the budget window `date` falls in: the rule of
    `udfs.collect_plan.window_start_days` (windows aligned to its EPOCH), as a Spark column."""
    epoch = F.lit(EPOCH)
    offset = F.floor(F.datediff(date, epoch) / F.lit(window_days)) * F.lit(window_days)
    return F.date_add(epoch, offset.cast("int"))


def per_user_window(spark: SparkSession, dataset: str, window_days: int) -> DataFrame:
    """Collection epsilon per (user_id, window_start), from trajectory dates."""
    spend = collect_spend(spark, dataset)
    return (
        spend.withColumn("window_start", window_start_col(F.col("date"), window_days))
        .groupBy("user_id", "window_start")
        .agg(F.sum("epsilon").alias("epsilon"), F.count(F.lit(1)).alias("releases"))
    )


def training_per_user(spark: SparkSession, dataset: str) -> DataFrame:
    """Training (epsilon, delta) per user, summed over train runs (basic composition: an upper
    bound), and the number of runs. A run's charge is its `spent` row, or its `planned` upper
    bound (the target epsilon) when it never finished."""
    per_run = (
        rows(spark)
        .where((F.col("stage") == "train") & (F.col("dataset") == dataset)
               & F.col("state").isin(PLANNED, SPENT))
        .groupBy("user_id", "release_id")
        .agg(F.max_by("epsilon", F.col("state") == SPENT).alias("epsilon"),
             F.max("delta").alias("delta"))
    )
    return per_run.groupBy("user_id").agg(
        F.sum("epsilon").alias("train_epsilon"), F.sum("delta").alias("train_delta"),
        F.count(F.lit(1)).alias("train_runs"))


@dataclass(frozen=True)
class TrainingCharge:
    """What one training run charges each trained user: `planned` (the upper bound charged
    before training) or `spent` (what the run accounted). `release_id`: the run's release
    (a resumed run shares the first run's; None: the run id)."""

    dataset: str
    run_id: str
    model: str
    epsilon: float
    delta: float
    state: str = SPENT
    release_id: str | None = None


def record_training(users: DataFrame, charge: TrainingCharge) -> None:
    """One ledger row of `charge` per trained user (`users`: a frame with a `user_id`
    column)."""
    append(ledger_rows(
        users.select(F.col("user_id").cast("string")).distinct(),
        dataset=charge.dataset, run_id=charge.run_id, mechanism=charge.model,
        epsilon=float(charge.epsilon), delta=float(charge.delta), state=charge.state,
        stage="train", release_id=charge.release_id or charge.run_id))


_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def new_release_id(run_id: str, taken: set[str]) -> str:
    """`<run_id>.r<k>` with the smallest k not yet in the ledger: a reused run id never
    rewrites an earlier release's spend, it gets a new release."""
    base = _SAFE.sub("_", run_id)
    k = 0
    while f"{base}.r{k}" in taken:
        k += 1
    return f"{base}.r{k}"


def budget_table(spark: SparkSession, dataset: str, budget: float, window_days: int,
                 per_user: bool) -> DataFrame:
    """Spend and remaining budget per window: per user (trusted) or as a distribution.

    Per user: (user_id, window_start, collect_epsilon, remaining, releases, train_epsilon,
    train_delta). Distribution (what the published zone may see: the counts per pseudonym it
    can read off the published rows anyway): per window, users, and the min / median / p90 /
    max of users' collection epsilon, and the smallest remaining budget.
    """
    spend = per_user_window(spark, dataset, window_days).withColumn(
        "remaining", F.lit(float(budget)) - F.col("epsilon"))
    if per_user:
        train = training_per_user(spark, dataset)
        return (spend.withColumnRenamed("epsilon", "collect_epsilon")
                .join(train, "user_id", "left")
                .orderBy("user_id", "window_start"))
    return (
        spend.groupBy("window_start")
        .agg(
            F.count(F.lit(1)).alias("users"),
            F.min("epsilon").alias("min_epsilon"),
            F.percentile_approx("epsilon", 0.5).alias("median_epsilon"),
            F.percentile_approx("epsilon", 0.9).alias("p90_epsilon"),
            F.max("epsilon").alias("max_epsilon"),
            F.min("remaining").alias("min_remaining"),
        )
        .orderBy("window_start")
    )

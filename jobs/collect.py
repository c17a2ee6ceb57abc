"""`trajpriv collect`: LDP collection of raw trajectories on Spark (DESIGN.md sections 3, 4, 10).

Reads `trajpriv_raw.trajectories` for one dataset and window, plans every user's budget, records
the spend in `trajpriv_raw.privacy_ledger`, perturbs each user's released trajectories for every
(mechanism, epsilon) of the sweep in one `applyInPandas` pass, publishes
`trajpriv_pub.perturbed_trajectories` (+ the view `perturbed_points`), then measures utility
against the raw trajectories into `trajpriv_pub.evaluation`.

The privacy logic (budget windows, refusals, seeding, pseudonyms) is in `udfs.collect_kernel`;
this module only reads, groups, calls the kernels and writes. Order of side effects, so that a
crash never under-counts spend: plan (no noise) -> ledger -> release (noise, written once) ->
release registry -> metrics (read back from the written table). A run killed before it published
anything has its ledger spend voided by the next run (`jobs.collect_recovery`), so a rerun after
a crash neither counts that budget twice nor releases less than an undisturbed run would.

Idempotence: a collection is (dataset, run label, period, mechanism, epsilon). One already
published is reused and spends nothing; `--fresh` perturbs again with the next release number
(a new seed scope) and records the new spend.

Run: `trajpriv collect --config conf/default.yaml [--fresh]` or
`spark-submit jobs/collect.py --config conf/default.yaml`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import sys
import time
import uuid
from typing import Any

import numpy as np
import pandas as pd
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs import fault_injection
from jobs.catalog import read_table, table_exists, write_table
from jobs.collect_recovery import drop_voided, interrupted_runs
from jobs.config import CollectConfig, Config
from jobs.keys import pseudonym, pseudonym_key, run_key, user_seed
from udfs import collect_kernel as K
from udfs.errors import BudgetExceededError, InputDataError
from udfs.space import LocationSpace

log = logging.getLogger("trajpriv.collect")

TRAJECTORIES = "trajpriv_raw.trajectories"
LOCATIONS = "trajpriv_pub.locations"
LEDGER = "trajpriv_raw.privacy_ledger"
RELEASES = "trajpriv_raw.collect_releases"
PUBLISHED = "trajpriv_pub.perturbed_trajectories"
POINTS_VIEW = "trajpriv_pub.perturbed_points"
STAGE = "collect"

PUBLISHED_PARTITIONS = ["dataset", "run_label", "period", "mechanism", "epsilon"]
LEDGER_PARTITIONS = ["stage", "run_id"]
RELEASES_PARTITIONS = ["dataset", "run_id"]

PLAN_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("date", T.DateType()),
        T.StructField("traj_id", T.LongType()),
        T.StructField("loc_ids", T.ArrayType(T.IntegerType())),
        T.StructField("n", T.IntegerType()),
        T.StructField("window_start", T.DateType()),
        T.StructField("cost", T.DoubleType()),
        T.StructField("remaining", T.DoubleType()),
        T.StructField("released", T.BooleanType()),
        T.StructField("reason", T.StringType()),
        T.StructField("plan_partition", T.IntegerType()),
        T.StructField("traj_key", T.StringType()),  # released rows only: joins metrics back
    ]
)
RELEASE_SCHEMA = T.StructType(
    [
        T.StructField("pseudonym", T.StringType()),
        T.StructField("traj_key", T.StringType()),
        T.StructField("date", T.DateType()),
        T.StructField("mechanism", T.StringType()),
        T.StructField("epsilon", T.DoubleType()),
        T.StructField("loc_ids", T.ArrayType(T.IntegerType())),
        T.StructField("n", T.IntegerType()),
    ]
)
LEDGER_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("epsilon", T.DoubleType()),
        T.StructField("window_start", T.DateType()),
        T.StructField("spends", T.LongType()),
    ]
)


def add_args(parser: argparse.ArgumentParser) -> None:
    """`--fresh`: perturb already published collections again (recorded as new spend)."""
    if "--fresh" not in parser._option_string_actions:  # `trajpriv run` merges every stage's args
        parser.add_argument(
            "--fresh",
            action="store_true",
            help="re-perturb collections that were already published (new spend in the ledger)",
        )


# ----------------------------------------------------------------------------- identity
def period_name(c: CollectConfig) -> str:
    """The collection window as a partition value: '20140601-20140614', 'all', '-20140614'."""
    if c.window_start is None and c.window_end is None:
        return "all"
    fmt = "%Y%m%d"
    start = c.window_start.strftime(fmt) if c.window_start else ""
    end = c.window_end.strftime(fmt) if c.window_end else ""
    return f"{start}-{end}"


def collection_name(cfg: Config) -> str:
    return f"{cfg.dataset}\x1f{cfg.collect.run_label}\x1f{period_name(cfg.collect)}"


def previous_releases(spark: SparkSession, cfg: Config) -> dict[tuple[str, float], dict]:
    """Latest published release of each (mechanism, epsilon) of this collection."""
    if not table_exists(spark, RELEASES):
        return {}
    rows = (
        spark.table(RELEASES)
        .where(
            (F.col("dataset") == cfg.dataset)
            & (F.col("run_label") == cfg.collect.run_label)
            & (F.col("period") == period_name(cfg.collect))
        )
        .collect()
    )
    latest: dict[tuple[str, float], dict] = {}
    for r in rows:
        key = (r["mechanism"], float(r["epsilon"]))
        if key not in latest or r["release_no"] > latest[key]["release_no"]:
            latest[key] = r.asDict()
    return latest


# ----------------------------------------------------------------------------- inputs
def load_space(spark: SparkSession, dataset: str) -> tuple[LocationSpace, DataFrame]:
    """The public location set P of `dataset` (loc_id must be 0..|P|-1) and its table rows."""
    locations = (
        read_table(spark, LOCATIONS)
        .where(F.col("dataset") == dataset)
        .select(F.col("loc_id").cast("int").alias("loc_id"), "lat", "lon")
    )
    pdf = locations.orderBy("loc_id").toPandas()
    if pdf.empty:
        raise InputDataError(
            f"{LOCATIONS} has no rows for dataset {dataset!r}: run ingest for that dataset first"
        )
    ids = pdf["loc_id"].to_numpy()
    if not np.array_equal(ids, np.arange(len(ids))):
        raise InputDataError(
            f"{LOCATIONS} for dataset {dataset!r}: loc_id must be 0..{len(ids) - 1} without gaps "
            "(the mechanisms index P by loc_id); re-run ingest"
        )
    space = LocationSpace.from_latlon(pdf["lat"].to_numpy(), pdf["lon"].to_numpy())
    return space, locations


def read_window(spark: SparkSession, cfg: Config) -> DataFrame:
    """Raw trajectories of the dataset inside the collection window (no timestamps read)."""
    c = cfg.collect
    # A row without a user cannot be charged to anyone's budget (ingest never writes one).
    df = read_table(spark, TRAJECTORIES).where(
        (F.col("dataset") == cfg.dataset) & F.col("user_id").isNotNull()
    )
    if c.window_start is not None:
        df = df.where(F.col("date") >= F.lit(c.window_start))
    if c.window_end is not None:
        df = df.where(F.col("date") <= F.lit(c.window_end))
    # Row shape: (user_id, date, traj_id, loc_ids, n)
    return df.select(
        F.col("user_id").cast("string").alias("user_id"),
        F.col("date").cast("date").alias("date"),
        F.col("traj_id").cast("long").alias("traj_id"),
        F.col("loc_ids").cast("array<int>").alias("loc_ids"),
        F.col("n").cast("int").alias("n"),
    )


def prior_spend(
    spark: SparkSession,
    cfg: Config,
    policy: K.BudgetPolicy,
    run_id: str,
    voided: tuple[str, ...] | list[str] = (),
) -> DataFrame:
    """Prior spend (user_id, epsilon, window_start, spends) that can share a window with this run.

    Aggregated in Spark to one row per (user, window, epsilon) with the number of such spends:
    the planner's sums stay exact (count x epsilon), and the ledger, which grows by one row per
    released trajectory and setting of every run, does not travel to Python row by row.

    Rows of `run_id` itself are left out: this run's ledger partition is rewritten (a retried
    task with the same run id must not count its own spend twice). So are the rows of `voided`
    runs (interrupted before they disclosed anything: `jobs.collect_recovery`).
    """
    if not table_exists(spark, LEDGER):
        return spark.createDataFrame([], LEDGER_SCHEMA)
    c = cfg.collect
    df = spark.table(LEDGER).where(~F.col("run_id").isin([run_id, *voided]))
    if c.window_start is not None:
        df = df.where(F.col("window_start") >= F.lit(policy.window_start(c.window_start)))
    if c.window_end is not None:
        end = policy.window_start(c.window_end) + dt.timedelta(days=c.window_days)
        df = df.where(F.col("window_start") < F.lit(end))
    return (
        df.select(F.col("user_id").cast("string"), F.col("epsilon").cast("double"),
                  "window_start")
        .groupBy("user_id", "window_start", "epsilon")
        .agg(F.count(F.lit(1)).alias("spends"))
    )


# ----------------------------------------------------------------------------- plan
def complete_groups(batches, key: str = "user_id"):
    """Re-cut one partition's pandas batches (sorted by `key`) so no group straddles two.

    Why: Arrow cuts a partition into batches of `maxRecordsPerBatch` rows wherever it likes,
    and the planner must see all of a user's rows (trajectories and ledger) at once. The last
    group of each batch is held back and prepended to the next one. A key out of order would
    plan one user twice (and spend twice), so it stops the task instead.
    """
    carry = None
    for pdf in batches:
        if carry is not None:
            pdf = pd.concat([carry, pdf], ignore_index=True)
        if pdf.empty:
            continue
        keys = pdf[key].to_numpy()
        if len(keys) > 1 and (keys[1:] < keys[:-1]).any():
            raise AssertionError(f"rows are not sorted by {key} within the partition")
        cut = int(np.searchsorted(keys, keys[-1], side="left"))
        carry = pdf.iloc[cut:]
        if cut:
            yield pdf.iloc[:cut]
    if carry is not None and not carry.empty:
        yield carry


def build_plan(
    trajectories: DataFrame,
    ledger: DataFrame,
    *,
    cost: float,
    policy: K.BudgetPolicy,
    n_locations: int,
    max_len: int | None,
    partitions: int,
    traj_key_of=None,
    dataset: str = "",
    timer=None,
) -> DataFrame:
    """Budget plan of every user (no randomness). Row shape: PLAN_SCHEMA.

    Trajectories and prior ledger rows travel in one stream, hash-partitioned and sorted by
    user, and the vectorised planner takes many whole users per call (a call per user cost more
    in pandas overhead than the planning itself). The output stays partitioned by user_id
    (each row notes its `plan_partition`), so the release reads it without a second shuffle.
    Released rows get their `traj_key` here (`traj_key_of`, the keyed hash the release uses), so
    the metrics join the raw trajectories without another Python pass over them.
    """
    # Row shape: (user_id, date, traj_id, loc_ids, n, epsilon, window_start, spends, is_ledger).
    # The other kind's numeric columns hold fillers, not nulls: pandas would turn an int
    # column with nulls into floats.
    stream = trajectories.select(
        "user_id", "date", "traj_id", "loc_ids", "n",
        F.lit(0.0).alias("epsilon"),
        F.col("date").alias("window_start"),
        F.lit(0).cast("long").alias("spends"),
        F.lit(False).alias("is_ledger"),
    ).unionByName(
        ledger.select(
            "user_id",
            F.col("window_start").alias("date"),
            F.lit(-1).cast("long").alias("traj_id"),
            F.lit(None).cast("array<int>").alias("loc_ids"),
            F.lit(0).alias("n"),
            "epsilon",
            "window_start",
            "spends",
            F.lit(True).alias("is_ledger"),
        )
    )

    def planner(batches):
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()  # the release checks it still holds these rows
        for pdf in complete_groups(batches):
            is_ledger = pdf["is_ledger"].to_numpy(dtype=bool)
            trajs = pdf.loc[~is_ledger, ["user_id", "date", "traj_id", "loc_ids", "n"]]
            spent = pdf.loc[is_ledger, ["user_id", "epsilon", "window_start", "spends"]]
            if not trajs.empty:
                t0 = time.perf_counter()
                out = K.plan_users(trajs, spent, cost=cost, policy=policy,
                                   n_locations=n_locations, max_len=max_len)
                if timer is not None:
                    timer.add(time.perf_counter() - t0)
                yield out.assign(plan_partition=np.int32(part), traj_key=_keys(out))

    def _keys(plan: pd.DataFrame) -> np.ndarray:
        keys = np.full(len(plan), None, dtype=object)
        mine = plan["released"].to_numpy(dtype=bool)
        if traj_key_of is not None and mine.any():
            rel = plan[mine]
            keys[mine] = [
                traj_key_of(K.traj_message(dataset, u, d, t))
                for u, d, t in zip(rel["user_id"], K.iso_dates(rel["date"]), rel["traj_id"],
                                   strict=True)
            ]
        return keys

    return (
        stream.repartition(partitions, "user_id")
        .sortWithinPartitions("user_id")
        .mapInPandas(planner, PLAN_SCHEMA)
    )


def summarise_plan(plan: DataFrame) -> dict[str, Any]:
    """Counts by reason (trajectories, points, users) from the persisted plan, in one job."""
    released = F.col("released")
    aggs = [
        F.countDistinct("user_id").alias("users"),
        F.countDistinct(F.when(released, F.col("user_id"))).alias("users_released"),
        F.max("remaining").alias("max_remaining"),
        F.collect_set(F.when(released, F.col("n"))).alias("lengths"),
    ]
    for i, reason in enumerate(K.REASONS):
        hit = F.col("reason") == reason
        aggs += [
            F.count(F.when(hit, F.lit(1))).alias(f"t{i}"),
            F.sum(F.when(hit, F.col("n"))).alias(f"p{i}"),
        ]
    row = plan.agg(*aggs).first()
    counts = {
        reason: {"trajectories": int(row[f"t{i}"]), "points": int(row[f"p{i}"] or 0)}
        for i, reason in enumerate(K.REASONS)
        if row[f"t{i}"]
    }
    if K.RELEASED in counts:
        counts[K.RELEASED]["users"] = int(row["users_released"])
    return {
        "counts": counts,
        "users": int(row["users"]),
        "users_released": int(row["users_released"]),
        "max_remaining": row["max_remaining"],
        "lengths": sorted(int(x) for x in row["lengths"]),
    }


def validate_plan(summary: dict[str, Any], cost: float, budget: float) -> None:
    """Refuse to spend when no trajectory can be released because of the budget."""
    counts = summary["counts"]
    released = counts.get(K.RELEASED, {}).get("trajectories", 0)
    refused = counts.get(K.WINDOW_EXHAUSTED, {}).get("trajectories", 0)
    if released == 0 and refused > 0:
        remaining = summary["max_remaining"]
        raise BudgetExceededError(
            f"no trajectory can be released: each needs epsilon {cost:g} (the sweep) but the "
            f"largest remaining window budget of any user is {remaining:g} of {budget:g}; "
            "wait for the next window, raise collect.user_budget or sweep fewer settings"
        )
    if released == 0:
        invalid = counts.get(K.INVALID, {}).get("trajectories", 0)
        raise InputDataError(
            f"no trajectory can be released: {invalid} of the window's trajectories are invalid "
            "(empty, n disagreeing with loc_ids, a loc_id outside the dataset's locations or "
            "longer than collect.max_len); re-run ingest for this dataset"
        )


# ----------------------------------------------------------------------------- release
_SPACES: dict[str, LocationSpace] = {}


def _space_of(bc, token: str) -> LocationSpace:
    """The broadcast LocationSpace, deserialised once per executor process and cached here.

    `token` names the broadcast (a worker-side Broadcast has no public id); the cache keeps
    the space and its lazily built tables alive across the tasks a reused worker runs.
    """
    space = _SPACES.get(token)
    if space is None:
        space = _SPACES[token] = bc.value
    return space


def make_release_fn(bc, kernel: K.ReleaseKernel, timer=None):
    """The mapInPandas function: batches of whole users -> their published rows.

    The kernel still runs once per user (each user has their own random stream); the batch
    only saves the per-group Arrow round trip of applyInPandas (about 1 ms a user). Every row
    must sit in the partition that planned it (`plan_partition`): a user split over two
    partitions would be perturbed twice from the same seed, so a mismatch stops the task.
    """
    token = uuid.uuid4().hex

    def release(batches):
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()
        for pdf in complete_groups(batches):
            if (pdf["plan_partition"].to_numpy() != part).any():
                raise AssertionError(
                    f"release task {part} got rows planned in another partition: a shuffle "
                    "between plan and release would split users; keep the plan's partitioning"
                )
            users = pdf["user_id"].to_numpy()
            cuts = np.flatnonzero(users[1:] != users[:-1]) + 1
            bounds = [0, *cuts.tolist(), len(users)]
            space = _space_of(bc, token)
            outs = []
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                fault_injection.on_release_group()  # test-only; a no-op unless a test sets it
                t0 = time.perf_counter()
                outs.append(kernel(pdf.iloc[a:b], space))
                if timer is not None:
                    timer.add(time.perf_counter() - t0)
            yield pd.concat(outs, ignore_index=True)

    return release


def release_kernel(cfg: Config, settings: list[K.Setting]) -> K.ReleaseKernel:
    secrets_dir = cfg.storage.secrets
    pkey = pseudonym_key(secrets_dir)
    c = cfg.collect
    return K.ReleaseKernel(
        dataset=cfg.dataset,
        settings=tuple(settings),
        seed_for=functools.partial(user_seed, run_key(secrets_dir)),
        pseudonym_of=functools.partial(pseudonym, pkey),
        traj_key_of=functools.partial(pseudonym, pkey),
        options={
            "granularity": c.granularity,
            "r_dir": c.r_dir,
            "calibrated": c.calibrated,
            "max_len": c.max_len,
        },
    )


def perturb_released(released: DataFrame, bc, kernel: K.ReleaseKernel, timer=None) -> DataFrame:
    """(user_id, date, traj_id, loc_ids[, plan_partition]) -> RELEASE_SCHEMA rows.

    Rows straight from the plan carry `plan_partition` and are already clustered by user (no
    shuffle here); any other input is first hash-partitioned by user.
    """
    if "plan_partition" not in released.columns:
        released = released.repartition("user_id").withColumn(
            "plan_partition", F.spark_partition_id()
        )
    fn = make_release_fn(bc, kernel, timer)
    cols = ["user_id", "date", "traj_id", "loc_ids", "plan_partition"]
    return released.select(*cols).sortWithinPartitions("user_id").mapInPandas(fn, RELEASE_SCHEMA)


def keyed_raw(plan: DataFrame) -> DataFrame:
    """(traj_key, true_ids) of the released trajectories, to join the published rows back."""
    return plan.where("released").select("traj_key", F.col("loc_ids").alias("true_ids"))


def ensure_view(spark: SparkSession) -> None:
    """`perturbed_points`: one row per published point with its public coordinates."""
    if not table_exists(spark, PUBLISHED):
        return
    spark.sql(
        f"""
        CREATE OR REPLACE VIEW {POINTS_VIEW} AS
        SELECT x.run_id, x.dataset, x.run_label, x.period, x.mechanism, x.epsilon, x.pseudonym,
               x.traj_key, x.date, x.seq, x.loc_id, l.lat, l.lon
        FROM (
            SELECT t.*, p.seq, p.loc_id
            FROM {PUBLISHED} t LATERAL VIEW posexplode(t.loc_ids) p AS seq, loc_id
        ) x
        JOIN {LOCATIONS} l ON l.dataset = x.dataset AND l.loc_id = x.loc_id
        """
    )


def _published_rows(spark: SparkSession, cfg: Config, settings: list[K.Setting], run_id: str):
    pub = spark.table(PUBLISHED).where(
        (F.col("dataset") == cfg.dataset)
        & (F.col("run_label") == cfg.collect.run_label)
        & (F.col("period") == period_name(cfg.collect))
        & (F.col("run_id") == run_id)
    )
    keys = F.struct(F.col("mechanism"), F.col("epsilon"))
    wanted = [F.struct(F.lit(s.mechanism), F.lit(float(s.epsilon))) for s in settings]
    return pub.where(keys.isin(*wanted))


# ----------------------------------------------------------------------------- the stage
def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    from jobs.collect_metrics import ldp_metrics
    from jobs.evaluation_table import write_evaluation

    c = cfg.collect
    fresh = bool(getattr(ctx.args, "fresh", False))
    period = period_name(c)
    collection = collection_name(cfg)
    figures: dict[str, Any] = {
        "dataset": cfg.dataset,
        "run_label": c.run_label,
        "period": period,
        "fresh": fresh,
    }

    # 1. Which collections exist already? Reuse them (spend nothing) unless --fresh.
    latest = previous_releases(spark, cfg)
    todo: list[K.Setting] = []
    reused: list[str] = []
    for mech in c.mechanisms:
        for eps in c.epsilons:
            prev = latest.get((mech, float(eps)))
            if prev is not None and not fresh:
                reused.append(f"{mech}@{float(eps):g} (run {prev['run_id']})")
                continue
            release_no = 0 if prev is None else prev["release_no"] + 1
            todo.append(K.Setting(mech, float(eps), release_no, collection))
    figures["reused"] = reused
    figures["released_settings"] = [f"{s.mechanism}@{s.epsilon:g}#{s.release_no}" for s in todo]
    if not todo:
        ensure_view(spark)
        log.info("collection %s already published for every setting; nothing spent", period)
        figures.update(trajectories_released=0, epsilon_spent=0.0)
        return figures

    # 2. Plan, then spend: validate the whole budget plan before any noise is drawn.
    policy = K.BudgetPolicy(c.user_budget, c.window_days)
    cost = K.sweep_cost(todo)
    figures["epsilon_per_trajectory"] = cost
    if cost > c.user_budget:
        raise BudgetExceededError(
            f"the sweep needs epsilon {cost:g} per trajectory ({len(todo)} settings) but "
            f"collect.user_budget is {c.user_budget:g} per {c.window_days} days: no trajectory "
            "could be released; sweep fewer settings or raise the budget"
        )
    t0 = time.perf_counter()
    space, locations = load_space(spark, cfg.dataset)
    voided = interrupted_runs(spark, ctx.run_id)
    figures["voided_runs"] = voided
    plan_timer = spark.sparkContext.accumulator(0.0)
    plan = build_plan(
        read_window(spark, cfg),
        prior_spend(spark, cfg, policy, ctx.run_id, voided),
        cost=cost,
        policy=policy,
        n_locations=space.n,
        max_len=c.max_len,
        partitions=int(spark.conf.get("spark.sql.shuffle.partitions")),
        traj_key_of=functools.partial(pseudonym, pseudonym_key(cfg.storage.secrets)),
        dataset=cfg.dataset,
        timer=plan_timer,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        summary = summarise_plan(plan)
        figures["plan_s"] = round(time.perf_counter() - t0, 3)
        figures["plan_kernel_cpu_s"] = round(plan_timer.value, 3)
        counts = summary["counts"]
        n_released = counts.get(K.RELEASED, {}).get("trajectories", 0)
        figures.update(
            trajectories_in_window=sum(v["trajectories"] for v in counts.values()),
            trajectories_released=n_released,
            points_released=counts.get(K.RELEASED, {}).get("points", 0) or 0,
            users=summary["users"],
            users_released=summary["users_released"],
            refused={r: counts[r]["trajectories"] for r in counts if r != K.RELEASED},
        )
        if figures["trajectories_in_window"] == 0:
            log.warning("no trajectories of %s in %s; nothing collected", cfg.dataset, period)
            return figures
        validate_plan(summary, cost, c.user_budget)
        explain = explain_report(cfg, ctx.run_id, todo, reused, cost, policy, summary, space)
        figures["explain"] = write_explain(cfg, ctx.run_id, explain)
        figures["epsilon_spent"] = float(n_released * cost)

        # 3. Spend: ledger rows first, so a crash can only over-count.
        t1 = time.perf_counter()
        spent_at = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
        charges = spark.createDataFrame(
            [(s.mechanism, s.charge) for s in todo], "mechanism string, epsilon double"
        )
        ledger = (
            plan.where("released")
            .select("user_id", "window_start")
            .crossJoin(charges)
            .select(
                "user_id",
                F.lit(ctx.run_id).alias("run_id"),
                F.lit(STAGE).alias("stage"),
                "mechanism",
                "epsilon",
                F.lit(0.0).alias("delta"),
                "window_start",
                F.lit(spent_at).cast("timestamp").alias("spent_at"),
            )
        )
        # Every row falls in the one partition (stage, run_id), which dynamic overwrite
        # replaces (a retried run id rewrites its own spend). No `replace` scope: the plan
        # released >= 1 trajectory, so there is no stale partition to drop, and the scope check
        # would recompute the ledger rows in a second Spark job.
        write_table(ledger, LEDGER, partition_by=LEDGER_PARTITIONS)
        drop_voided(spark, voided)  # after our own rows: a crash in between voids both next time
        figures["ledger_s"] = round(time.perf_counter() - t1, 3)

        # 4. Release: the only random step, written once before anything reads it.
        t2 = time.perf_counter()
        bc = spark.sparkContext.broadcast(space)
        timer = spark.sparkContext.accumulator(0.0)
        released = plan.where("released").select(
            "user_id", "date", "traj_id", "loc_ids", "plan_partition"
        )
        out = perturb_released(released, bc, release_kernel(cfg, todo), timer).select(
            F.lit(ctx.run_id).alias("run_id"),
            F.lit(cfg.dataset).alias("dataset"),
            F.lit(c.run_label).alias("run_label"),
            F.lit(period).alias("period"),
            "mechanism",
            "epsilon",
            "pseudonym",
            "traj_key",
            "date",
            "loc_ids",
            "n",
        )
        # Each setting's partition (dataset, run_label, period, mechanism, epsilon) is overwritten
        # by this write (dynamic partition overwrite): a fresh release replaces the previous one
        # of its collection in one commit. The plan released >= 1 trajectory, and a released
        # trajectory is released under every setting, so every partition gets rows.
        write_table(out, PUBLISHED, partition_by=PUBLISHED_PARTITIONS)
        bc.destroy()
        figures["release_s"] = round(time.perf_counter() - t2, 3)
        figures["kernel_cpu_s"] = round(timer.value, 3)
        register_releases(spark, cfg, ctx.run_id, todo, counts)
        ensure_view(spark)

        # 5. Utility, from the written table joined with the raw trajectories.
        t3 = time.perf_counter()
        pairs = (
            _published_rows(spark, cfg, todo, ctx.run_id)
            .select("mechanism", "epsilon", "traj_key", F.col("loc_ids").alias("pert_ids"))
            .join(keyed_raw(plan), "traj_key")
        )
        rows = ldp_metrics(
            pairs,
            locations,
            diameter=space.diameter,
            prq_km=c.prq_km,
            top_fraction=c.acd_top_fraction,
            n_locations=space.n,
        )
        write_evaluation(
            spark,
            [
                {
                    "method": r["mechanism"],
                    "setting": r["epsilon"],
                    "metric": r["metric"],
                    "value": r["value"],
                }
                for r in rows
            ],
            run_id=ctx.run_id,
            dataset=cfg.dataset,
        )
        figures["metrics"] = {f"{r['mechanism']}@{r['epsilon']:g}": {} for r in rows}
        for r in rows:
            figures["metrics"][f"{r['mechanism']}@{r['epsilon']:g}"][r["metric"]] = (
                None if r["value"] != r["value"] else round(r["value"], 6)
            )
        figures["metrics_s"] = round(time.perf_counter() - t3, 3)
        return figures
    finally:
        plan.unpersist()


def register_releases(
    spark: SparkSession, cfg: Config, run_id: str, settings: list[K.Setting], counts: dict
) -> None:
    """One row per published (mechanism, epsilon) of this run: what later runs reuse."""
    released = counts.get(K.RELEASED, {})
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    rows = [
        (
            cfg.dataset,
            cfg.collect.run_label,
            period_name(cfg.collect),
            s.mechanism,
            float(s.epsilon),
            s.release_no,
            run_id,
            now,
            int(released.get("trajectories", 0)),
            int(released.get("points", 0) or 0),
            int(released.get("users", 0)),
        )
        for s in settings
    ]
    schema = (
        "dataset string, run_label string, period string, mechanism string, epsilon double, "
        "release_no int, run_id string, created_at timestamp, trajectories long, points long, "
        "users long"
    )
    write_table(
        spark.createDataFrame(rows, schema),
        RELEASES,
        partition_by=RELEASES_PARTITIONS,
        replace={"dataset": cfg.dataset, "run_id": run_id},
    )


# ----------------------------------------------------------------------------- explain
def explain_report(cfg, run_id, todo, reused, cost, policy, summary, space) -> dict[str, Any]:
    """Where epsilon goes: per trajectory, per setting, per mechanism step, and per user window."""
    c = cfg.collect
    options = {"granularity": c.granularity, "r_dir": c.r_dir, "calibrated": c.calibrated}
    return {
        "run_id": run_id,
        "dataset": cfg.dataset,
        "collection": {"run_label": c.run_label, "period": period_name(c)},
        "policy": {
            "user_budget": policy.user_budget,
            "window_days": policy.window_days,
            "window_epoch": K.EPOCH.isoformat(),
        },
        "epsilon_per_released_trajectory": cost,
        "settings": [
            {
                "mechanism": s.mechanism,
                "epsilon": s.epsilon,
                "release_no": s.release_no,
                "ledger_charge": s.charge,
            }
            for s in todo
        ],
        "reused": reused,
        "plan": {
            reason: {k: v for k, v in row.items() if k != "reason"}
            for reason, row in summary["counts"].items()
        },
        "mechanism_steps": K.explain_settings(space, todo, summary["lengths"] or [1], options),
    }


def write_explain(cfg: Config, run_id: str, report: dict[str, Any]) -> str:
    folder = cfg.storage.runs_dir / run_id
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "collect_explain.json"
    path.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
    return str(path)


if __name__ == "__main__":  # spark-submit jobs/collect.py --config ...
    from jobs import collect as _stage  # pickle the kernels by reference, not from __main__
    from jobs.stage import main

    sys.exit(main("collect", _stage.run, add_args=_stage.add_args))

"""`trajpriv collect`: one LDP release of raw trajectories on Spark (docs/architecture.md sections
3, 4, 10).

Reads `trajpriv_raw.trajectories` of one dataset inside the collection window (the DAG passes
its data interval), skips every trajectory already released under this setting (release once:
`--fresh` releases again, as new spend), plans each user's budget (`privacy:`), and releases
the rest with `collect.mechanism` at `collect.epsilon` into
`trajpriv_pub.perturbed_trajectories` (+ the view `perturbed_points`).

Commit protocol (the ledger's states, `jobs.spark.ledger`): plan (no noise) -> ledger `planned` +
`spent` rows -> perturbed rows of the release, computed from exactly its `spent` rows ->
`published` -> `trajpriv_pub.releases` row -> `registered` -> trusted utility figures ->
`evaluated`. Each run first rolls forward every release of the dataset that a crash left
short of `evaluated`, with the same secret seeds, so after a crash at any boundary and one
rerun the published rows equal an undisturbed run's and the ledger charges each published
trajectory exactly once. The privacy logic (budget windows, refusals, seeding, pseudonyms)
is in `udfs.collect_kernel`; this module reads, groups, calls the kernels and writes.

Utility figures (NE, PRQ, ACD, Kendall tau against the raw trajectories) are raw-derived: they
go to the trusted zone (`trajpriv_trusted.evaluation`), never to `trajpriv_pub`.

Run: `trajpriv collect --config conf/default.yaml [--fresh]` or
`spark-submit jobs/submit.py collect --config conf/default.yaml`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark import StorageLevel, TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.config import Config
from jobs.keys import pseudonym, pseudonym_key, pseudonyms, run_key, user_seed
from jobs.progress import spark_progress
from jobs.spark import ledger
from jobs.spark.catalog import ensure_view, read_table, table_exists, write_table
from jobs.spark.per_user import Shared, per_user, user_bounds
from jobs.spark.tables import (
    LOCATIONS,
    PERTURBED_POINTS,
    PERTURBED_TRAJECTORIES,
    RELEASES,
    TRAJECTORIES,
)
from udfs import collect_kernel as K
from udfs import faults
from udfs.budget import times_up
from udfs.collect import MECHANISM_OPTIONS
from udfs.errors import BudgetExceededError, InputDataError
from udfs.space import LocationSpace

log = logging.getLogger("trajpriv.collect")

STAGE = "collect"
ALREADY_RELEASED = "already_released"

#: Figures of a collect run that go to `trajpriv_pub.runs` (public by design: they describe
#: the published release, whose rows anyone can count). Everything else (refusal counts, the
#: plan, timings of raw work) stays in the run folder (trusted zone).
PUBLIC_FIGURES = ("dataset", "mechanism", "epsilon", "release_id", "trajectories_released",
                  "epsilon_spent", "recovered_releases", "fresh", "wall_s")

PLAN_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("date", T.DateType()),
        T.StructField("traj_id", T.LongType()),
        T.StructField("n", T.IntegerType()),
        T.StructField("window_start", T.DateType()),
        T.StructField("cost", T.DoubleType()),
        T.StructField("remaining", T.DoubleType()),
        T.StructField("released", T.BooleanType()),
        T.StructField("reason", T.StringType()),
        T.StructField("plan_partition", T.IntegerType()),
        T.StructField("traj_key", T.StringType()),  # released rows only: the published key
        # the first row of its user, and the first released row of its user (summarise_plan)
        T.StructField("first_of_user", T.BooleanType()),
        T.StructField("first_released_of_user", T.BooleanType()),
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
#: The release as collect computes it: the published columns plus each row's raw points
#: (`true_ids`, trusted zone only: cached for the utility metrics, never written).
RELEASE_WITH_TRUE_SCHEMA = T.StructType(
    [*RELEASE_SCHEMA.fields, T.StructField("true_ids", T.ArrayType(T.IntegerType()))])
SPEND_SCHEMA = T.StructType(
    [
        T.StructField("user_id", T.StringType()),
        T.StructField("epsilon", T.DoubleType()),
        T.StructField("window_start", T.DateType()),
        T.StructField("spends", T.LongType()),
    ]
)


def add_args(parser: argparse.ArgumentParser) -> None:
    """`--fresh`: release trajectories already released under this setting again (new spend)."""
    if "--fresh" not in parser._option_string_actions:  # `trajpriv run` merges every stage's args
        parser.add_argument(
            "--fresh",
            action="store_true",
            help="release again trajectories already released under this setting (new spend, "
            "charged in the ledger; averaging two releases weakens each one's protection)",
        )


def policy_of(cfg: Config) -> K.BudgetPolicy:
    return K.BudgetPolicy(cfg.privacy.budget, cfg.privacy.window_days)


def publish_options(cfg: Config) -> K.PublishOptions:
    p = cfg.publish
    return K.PublishOptions(date=p.date, traj_key=p.traj_key, pseudonym=p.pseudonym,
                            window_days=cfg.privacy.window_days)


# ----------------------------------------------------------------------------- inputs
def load_space(spark: SparkSession, dataset: str) -> LocationSpace:
    """The public location set P of `dataset` (loc_id must be 0..|P|-1)."""
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
    return LocationSpace.from_latlon(pdf["lat"].to_numpy(), pdf["lon"].to_numpy())


def raw_trajectories(spark: SparkSession, dataset: str) -> DataFrame:
    """(user_id, date, traj_id, loc_ids, n) of the dataset (no timestamps read)."""
    # A row without a user cannot be charged to anyone's budget (ingest never writes one).
    df = read_table(spark, TRAJECTORIES).where(
        (F.col("dataset") == dataset) & F.col("user_id").isNotNull()
    )
    return df.select(
        F.col("user_id").cast("string").alias("user_id"),
        F.col("date").cast("date").alias("date"),
        F.col("traj_id").cast("long").alias("traj_id"),
        F.col("loc_ids").cast("array<int>").alias("loc_ids"),
        F.col("n").cast("int").alias("n"),
    )


def read_window(spark: SparkSession, cfg: Config) -> DataFrame:
    """Raw trajectories of the dataset inside the collection window."""
    c = cfg.collect
    df = raw_trajectories(spark, cfg.dataset)
    if c.window_start is not None:
        df = df.where(F.col("date") >= F.lit(c.window_start))
    if c.window_end is not None:
        df = df.where(F.col("date") <= F.lit(c.window_end))
    return df


def prior_spend(spark: SparkSession, cfg: Config, policy: K.BudgetPolicy) -> DataFrame:
    """Prior collection spend (user_id, epsilon, window_start, spends) that can share a window
    with the trajectories of this run, from the trajectory dates of every ledger row.

    Aggregated in Spark to one row per (user, day, epsilon) with the number of such spends:
    the planner re-aligns days to the current windows and its sums stay exact (count x
    epsilon), and the ledger does not travel to Python row by row. Nothing is left out: every
    charge of every release, complete or not, counts.
    """
    c = cfg.collect
    df = ledger.collect_spend(spark, cfg.dataset)
    if c.window_start is not None:
        df = df.where(F.col("date") >= F.lit(policy.window_start(c.window_start)))
    if c.window_end is not None:
        end = policy.window_start(c.window_end) + dt.timedelta(days=policy.window_days)
        df = df.where(F.col("date") < F.lit(end))
    return (
        df.select("user_id", F.col("epsilon").cast("double"), F.col("date").alias("window_start"))
        .groupBy("user_id", "window_start", "epsilon")
        .agg(F.count(F.lit(1)).alias("spends"))
    )


def already_released(spark: SparkSession, cfg: Config) -> DataFrame:
    """(user_id, date, traj_id) of trajectories charged under this setting before."""
    c = cfg.collect
    return (
        ledger.collect_spend(spark, cfg.dataset)
        .where((F.col("mechanism") == c.mechanism) & (F.col("epsilon") == float(c.epsilon)))
        .select("user_id", "date", "traj_id")
        .distinct()
    )


# ----------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class PlanRule:
    """What the planner decides with (`udfs.collect_plan.plan_users`' rule arguments)."""

    cost: float
    policy: K.BudgetPolicy
    n_locations: int
    max_len: int | None


def build_plan(trajectories: DataFrame, ledger: DataFrame, rule: PlanRule, *, partitions: int,
               traj_keys_of=None, timer=None) -> DataFrame:
    """Budget plan of every user (no randomness). Row shape: PLAN_SCHEMA.

    Trajectories and prior ledger rows travel in one stream, hash-partitioned and sorted by
    user, and the vectorised planner takes many whole users per call (a call per user cost more
    in pandas overhead than the planning itself). The output stays partitioned by user_id
    (each row notes its `plan_partition`) and carries no points: the ledger's charges are
    written from it, and the release reads the points back from the raw table by them.
    Released rows get their published `traj_key` here (`traj_keys_of(users, iso dates,
    traj_ids)`, the keyed hashes the release publishes them under), so the ledger's charges
    name the published rows.
    """

    def planner(pdf: pd.DataFrame, _shared) -> pd.DataFrame | None:
        from pyspark import TaskContext

        part = TaskContext.get().partitionId()  # which user partition planned these rows
        is_ledger = pdf["is_ledger"].to_numpy(dtype=bool)
        trajs = pdf.loc[~is_ledger, ["user_id", "date", "traj_id", "loc_ids", "n"]]
        spent = pdf.loc[is_ledger, ["user_id", "epsilon", "window_start", "spends"]]
        if trajs.empty:
            return None
        t0 = time.perf_counter()
        out = K.plan_users(trajs, spent, cost=rule.cost, policy=rule.policy,
                           n_locations=rule.n_locations, max_len=rule.max_len)
        if timer is not None:
            timer.add(time.perf_counter() - t0)
        # the points stay behind: the release reads them from the raw table by its charges
        return out.drop(columns="loc_ids").assign(
            plan_partition=np.int32(part), traj_key=_published_keys(out, traj_keys_of),
            **_user_marks(out))

    return per_user(_plan_stream(trajectories, ledger), planner, PLAN_SCHEMA,
                    partitions=partitions)


def _plan_stream(trajectories: DataFrame, ledger: DataFrame) -> DataFrame:
    """Trajectories and prior ledger rows in one frame, told apart by `is_ledger`.

    Row shape: (user_id, date, traj_id, loc_ids, n, epsilon, window_start, spends, is_ledger).
    The other kind's numeric columns hold fillers, not nulls: pandas would turn an int column
    with nulls into floats."""
    return trajectories.select(
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


def _published_keys(plan: pd.DataFrame, traj_keys_of) -> np.ndarray:
    """The traj_key each released row of a planner call is published under (None otherwise)."""
    keys = np.full(len(plan), None, dtype=object)
    mine = plan["released"].to_numpy(dtype=bool)
    if traj_keys_of is not None and mine.any():
        rel = plan[mine]
        keys[mine] = traj_keys_of(rel["user_id"].tolist(), K.iso_dates(rel["date"]),
                                  rel["traj_id"].tolist())
    return keys


def _user_marks(plan: pd.DataFrame) -> dict[str, np.ndarray]:
    """first_of_user / first_released_of_user of a planner call's output (rows grouped by
    user, as `plan_users` returns them)."""
    users = plan["user_id"].to_numpy()
    first = np.ones(len(users), dtype=bool)
    first[1:] = users[1:] != users[:-1]
    released = np.flatnonzero(plan["released"].to_numpy(dtype=bool))
    first_released = np.zeros(len(users), dtype=bool)
    if released.size:
        by = users[released]
        first_released[released] = np.concatenate([[True], by[1:] != by[:-1]])
    return {"first_of_user": first, "first_released_of_user": first_released}


def summarise_plan(plan: DataFrame) -> dict[str, Any]:
    """Counts by reason (trajectories, points, users) from the persisted plan, in one job.

    Users are counted by the planner's first-row marks, not by a distinct count: `per_user`
    hands every user whole to one planner call, so each user has exactly one first row, and
    the count needs no shuffle of user ids (a distinct count of two columns would add a
    second shuffle stage)."""
    released = F.col("released")
    aggs = [
        F.count(F.when(F.col("first_of_user"), F.lit(1))).alias("users"),
        F.count(F.when(F.col("first_released_of_user"), F.lit(1))).alias("users_released"),
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


def nothing_to_release(summary: dict[str, Any], budget: float) -> str | None:
    """Why the plan releases nothing (None when it releases something).

    Only invalid trajectories: InputDataError (ingest is to blame, not the budget). Exhausted
    budgets are the budget working as declared: the run spends nothing and says so (a daily
    schedule then simply resumes in the next window).
    """
    counts = summary["counts"]
    if counts.get(K.RELEASED, {}).get("trajectories", 0):
        return None
    exhausted = counts.get(K.WINDOW_EXHAUSTED, {}).get("trajectories", 0)
    invalid = counts.get(K.INVALID, {}).get("trajectories", 0)
    if invalid and not exhausted:
        raise InputDataError(
            f"no trajectory can be released: {invalid} of the window's trajectories are invalid "
            "(empty, n disagreeing with loc_ids, a loc_id outside the dataset's locations or "
            "longer than collect.max_len); re-run ingest for this dataset"
        )
    if exhausted:
        return (f"every user with a new trajectory has spent their budget of {budget:g} in its "
                f"window ({exhausted} trajectories refused); they are released in later windows "
                "or not at all")
    return "no new trajectory in the window"


# ----------------------------------------------------------------------------- release
def release_fn(kernel: K.ReleaseKernel, timer=None):
    """The per-user kernel of the release: a frame of whole users -> their published rows.

    One batched call per Arrow batch (all its users at once): each trajectory's noise comes
    from its own secret stream key (`udfs.collect_kernel.trajectory_keys`), so the rows do
    not depend on how users are cut into partitions or batches. `per_user` guarantees every
    user arrives whole. With a release fault seam on (tests only) the batch is released
    user by user, so a seam can fire between users after rows have streamed back; the rows
    are the same either way.
    """
    def release(frame, space: LocationSpace):
        if not faults.release_seams_on():
            t0 = time.process_time()  # CPU of this worker: not inflated by a loaded machine
            out = kernel(frame, space)
            if timer is not None:
                timer.add(time.process_time() - t0)
            yield out
            return
        users = frame.column("user_id").to_numpy(zero_copy_only=False) \
            if not isinstance(frame, pd.DataFrame) else frame["user_id"].to_numpy()
        for a, b in user_bounds(users):
            faults.on_release_group(TaskContext.get)  # test seam; a no-op unless a test sets it
            yield kernel(frame.slice(a, b - a) if not isinstance(frame, pd.DataFrame)
                         else frame.iloc[a:b], space)

    return release


def mechanism_options(c) -> dict[str, Any]:
    """The mechanism options (`udfs.collect.MECHANISM_OPTIONS`) the `collect:` section sets."""
    return {k: getattr(c, k) for k in MECHANISM_OPTIONS if k in type(c).model_fields}


def release_kernel(cfg: Config, settings: list[K.Setting],
                   keep_true: bool = False) -> K.ReleaseKernel:
    """The release kernel of `settings` under the config's keys, mechanism options and
    publication rules (`keep_true`: rows also carry their raw points, trusted use only)."""
    secrets_dir = cfg.storage.secrets
    pkey = pseudonym_key(secrets_dir)
    c = cfg.collect
    return K.ReleaseKernel(
        dataset=cfg.dataset,
        settings=tuple(settings),
        seed_for=functools.partial(user_seed, run_key(secrets_dir)),
        pseudonym_of=functools.partial(pseudonym, pkey),
        traj_key_of=functools.partial(pseudonym, pkey),
        options={**mechanism_options(c), "max_len": c.max_len},
        publish=publish_options(cfg),
        keep_true=keep_true,
    )


def perturb_users(rows: DataFrame, space: Shared, kernel: K.ReleaseKernel,
                  timer=None) -> DataFrame:
    """(user_id, date, traj_id, loc_ids[, traj_key]) -> RELEASE_SCHEMA rows, whole users per
    call (a `traj_key` column: the keys the rows are published under, see
    `udfs.collect_kernel.ReleaseKernel`); `space`: the broadcast location space (its creator
    frees it after the last action on the result)."""
    cols = ["user_id", "date", "traj_id", "loc_ids"] + (
        ["traj_key"] if "traj_key" in rows.columns else [])
    schema = RELEASE_WITH_TRUE_SCHEMA if kernel.keep_true else RELEASE_SCHEMA
    return per_user(rows.select(*cols), release_fn(kernel, timer), schema, shared=space,
                    order=("date", "traj_id"), arrow=True)


def ensure_points_view(spark: SparkSession) -> None:
    """`perturbed_points`: one row per published point with its public coordinates."""
    if not table_exists(spark, PERTURBED_TRAJECTORIES):
        return
    ensure_view(spark, PERTURBED_POINTS, f"""
        SELECT x.release_id, x.dataset, x.mechanism, x.epsilon, x.pseudonym,
               x.traj_key, x.date, x.seq, x.loc_id, l.lat, l.lon
        FROM (
            SELECT t.*, p.seq, p.loc_id
            FROM {PERTURBED_TRAJECTORIES} t LATERAL VIEW posexplode(t.loc_ids) p AS seq, loc_id
        ) x
        JOIN {LOCATIONS} l ON l.dataset = x.dataset AND l.loc_id = x.loc_id
        """)


def published_rows(spark: SparkSession, dataset: str) -> DataFrame | None:
    """Every published row of `dataset` (all releases), or None before the first release."""
    if not table_exists(spark, PERTURBED_TRAJECTORIES):
        return None
    return spark.table(PERTURBED_TRAJECTORIES).where(F.col("dataset") == dataset)


def published_with_raw(spark: SparkSession, dataset: str) -> DataFrame | None:
    """Trusted zone only: each published row next to its raw trajectory's identity.

    Row shape: (release_id, mechanism, epsilon, traj_key, pert array<int>, user_id, date,
    traj_id): the published rows joined with the ledger's charges of their release (which
    name the raw trajectory), so no published key needs recomputing.
    """
    pub = published_rows(spark, dataset)
    if pub is None:
        return None
    charges = ledger.rows(spark).where(
        (F.col("stage") == STAGE) & (F.col("state") == ledger.SPENT)
        & (F.col("dataset") == dataset)
    ).select("release_id", "traj_key", "user_id", "date", "traj_id")
    return pub.select("release_id", "mechanism", "epsilon", "traj_key",
                      F.col("loc_ids").alias("pert")).join(charges, ["release_id", "traj_key"])


# ----------------------------------------------------------------------------- one release
def finish_release(spark: SparkSession, cfg: Config, release: ledger.Release,
                   space: LocationSpace, figures: dict[str, Any]) -> None:
    """Take `release` from its last recorded state to `evaluated` (idempotent steps).

    Its perturbed rows are computed from exactly its `spent` rows in the ledger (joined with
    the raw trajectories they name), seeded by (key, dataset, release id, user): the same rows
    whether this is the run that planned it or a later one rolling it forward. The run that
    computes the rows measures their utility from its cached copy (which carries the raw
    points); a run that finds them published joins them back (:func:`release_pairs`).
    """
    measured = None  # utility of the rows this run computes, measured before any mark
    if ledger.PUBLISHED not in release.states:
        with Shared(spark, space) as shared_space:
            computed = publish_release(spark, cfg, release, shared_space, figures)
            try:
                # Measured now, from the cached rows: the next ledger append refreshes every
                # cached plan that reads the ledger (these rows do: their charges), so later
                # the release would be computed all over again.
                t0 = time.perf_counter()
                with spark_progress(spark, "collect utility metrics", "tasks"):
                    measured = measure_release(spark, cfg, release, space, computed)
                _add_seconds(figures, "metrics_s", t0)
            finally:
                computed.unpersist()
        faults.crash_point("after_publish")
        ledger.mark(spark, release, ledger.PUBLISHED)
        faults.crash_point("after_published_mark")
    if ledger.REGISTERED not in release.states:
        register_release(spark, cfg, release)
        ensure_points_view(spark)
        faults.crash_point("after_registry")
        ledger.mark(spark, release, ledger.REGISTERED)
        faults.crash_point("after_registered_mark")
    if ledger.EVALUATED not in release.states:
        t0 = time.perf_counter()
        if measured is None:
            with spark_progress(spark, "collect utility metrics", "tasks"):
                measured = measure_release(spark, cfg, release, space)
        write_release_metrics(spark, cfg, release, measured)
        figures.setdefault("metrics", {}).update(
            {r["metric"]: (None if r["value"] != r["value"] else round(r["value"], 6))
             for r in measured})
        faults.crash_point("after_evaluation")
        ledger.mark(spark, release, ledger.EVALUATED)
        _add_seconds(figures, "metrics_s", t0)


def _add_seconds(figures: dict[str, Any], name: str, t0: float) -> None:
    """figures[name] += seconds since t0 (summed over the releases a run finishes)."""
    figures[name] = round(figures.get(name, 0.0) + time.perf_counter() - t0, 3)


def publish_release(spark: SparkSession, cfg: Config, release: ledger.Release,
                    space: Shared, figures: dict[str, Any]) -> DataFrame:
    """Perturb the trajectories the release's `spent` rows name and write the published rows.

    Returns the release as computed, each row with its raw points (`true_ids`), cached:
    trusted zone only, for this run's utility metrics (the caller measures them before the
    next ledger write, then unpersists it and frees `space`). The points never reach
    the published table (its columns are chosen here).
    """
    t0 = time.perf_counter()
    setting = K.Setting(release.mechanism, release.epsilon, release.release_id)
    raw = raw_trajectories(spark, cfg.dataset)
    # the charges' traj_keys (the plan derived them) are the keys the rows are published
    # under: one derivation per trajectory, and charge and row name each other
    todo = ledger.spent_rows(spark, release.release_id).select(
        "user_id", "date", "traj_id", "traj_key").join(raw, ["user_id", "date", "traj_id"])
    timer = spark.sparkContext.accumulator(0.0)
    computed = perturb_users(todo, space, release_kernel(cfg, [setting], keep_true=True),
                             timer).persist(StorageLevel.MEMORY_AND_DISK)
    out = computed.select(
        F.lit(release.run_id).alias("run_id"),
        F.lit(cfg.dataset).alias("dataset"),
        F.lit(release.release_id).alias("release_id"),
        "mechanism", "epsilon", "pseudonym", "traj_key", "date", "loc_ids", "n",
    )
    n = release.detail.get("trajectories")  # public: the release's published count
    try:
        with spark_progress(spark, "collect release", "tasks",
                            work=(n, "trajectories") if n else None):
            # One partition (dataset, release_id): a redo replaces exactly this release's rows.
            write_table(out, PERTURBED_TRAJECTORIES,
                        covers=[{"dataset": cfg.dataset, "release_id": release.release_id}])
    except BaseException:  # a failed write leaves no cached raw points behind
        computed.unpersist()
        raise
    _add_seconds(figures, "release_s", t0)
    figures["kernel_cpu_s"] = round(timer.value, 3)
    return computed


def register_release(spark: SparkSession, cfg: Config, release: ledger.Release) -> None:
    """One row in `trajpriv_pub.releases` (counts of the published rows: public by design)."""
    pub = spark.table(PERTURBED_TRAJECTORIES).where(
        (F.col("dataset") == cfg.dataset) & (F.col("release_id") == release.release_id))
    counts = pub.agg(F.count(F.lit(1)).alias("t"), F.sum("n").alias("p")).first()
    row = (cfg.dataset, release.release_id, release.mechanism, float(release.epsilon),
           int(counts["t"]), int(counts["p"] or 0), ledger.now())
    schema = ("dataset string, release_id string, mechanism string, epsilon double, "
              "trajectories long, points long, created_at timestamp")
    write_table(spark.createDataFrame([row], schema), RELEASES,
                covers=[{"dataset": cfg.dataset, "release_id": release.release_id}])


def release_pairs(spark: SparkSession, cfg: Config, release: ledger.Release,
                  computed: DataFrame | None = None) -> DataFrame:
    """(mechanism, epsilon, traj_key, pert_ids, true_ids) of each published row of `release`
    (trusted zone). From `computed` (the run's cached release, which carries the raw points)
    when the run computed it; else the published rows joined with their charges and the raw
    trajectories (a release rolled forward after a crash). Both give the same pairs."""
    if computed is not None:
        return computed.select("mechanism", "epsilon", "traj_key",
                               F.col("loc_ids").alias("pert_ids"), "true_ids")
    raw = raw_trajectories(spark, cfg.dataset).select(
        "user_id", "date", "traj_id", F.col("loc_ids").alias("true_ids"))
    return (published_with_raw(spark, cfg.dataset)
            .where(F.col("release_id") == release.release_id)
            .join(raw, ["user_id", "date", "traj_id"])
            .select("mechanism", "epsilon", "traj_key", F.col("pert").alias("pert_ids"),
                    "true_ids"))


def measure_release(spark: SparkSession, cfg: Config, release: ledger.Release,
                    space: LocationSpace,
                    computed: DataFrame | None = None) -> list[dict[str, Any]]:
    """NE/PRQ/ACD/Kendall tau of one release against the raw trajectories (trusted zone, not
    written); `computed`: see :func:`release_pairs`."""
    from jobs.collect.metrics import ldp_metrics

    return ldp_metrics(release_pairs(spark, cfg, release, computed), space=space,
                       prq_km=cfg.study.prq_km, top_fraction=cfg.study.acd_top_fraction)


def write_release_metrics(spark: SparkSession, cfg: Config, release: ledger.Release,
                          rows: list[dict[str, Any]]) -> None:
    """The release's utility rows into `trajpriv_trusted.evaluation` (run_id = release id)."""
    from jobs.spark.evaluation import write_evaluation

    write_evaluation(
        spark,
        [{"method": f"{r['mechanism']}-release", "setting": r["epsilon"],
          "metric": r["metric"], "value": r["value"]} for r in rows],
        run_id=release.release_id,
        dataset=cfg.dataset,
    )


# ----------------------------------------------------------------------------- the stage
def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    """Roll forward, plan, charge, publish: each step below is one function."""
    c = cfg.collect
    fresh = bool(getattr(ctx.args, "fresh", False))
    figures: dict[str, Any] = {
        "dataset": cfg.dataset, "mechanism": c.mechanism, "epsilon": float(c.epsilon),
        "fresh": fresh, "window": [str(c.window_start), str(c.window_end)],
    }
    policy = policy_of(cfg)
    setting = K.Setting(c.mechanism, float(c.epsilon))
    cost = affordable_cost(policy, setting)
    space = load_space(spark, cfg.dataset)

    # 1. Roll forward what a crash left unfinished (its spend is already in the ledger).
    releases = roll_forward(spark, cfg, space, figures)

    # 2. Plan, then spend: validate the whole budget plan before any noise is drawn.
    release_id = ledger.new_release_id(ctx.run_id, {r.release_id for r in releases})
    figures["release_id"] = release_id
    t0 = time.perf_counter()
    plan, before, plan_timer = plan_release(spark, cfg, policy, cost, space.n, release_id, fresh)
    try:
        with spark_progress(spark, "collect plan", "tasks"):
            summary = summarise_plan(plan)
        figures["plan_s"] = round(time.perf_counter() - t0, 3)
        figures["plan_kernel_cpu_s"] = round(plan_timer.value, 3)
        n_released = plan_figures(figures, summary, before)
        why = nothing_to_release(summary, policy.user_budget)
        if why is not None:
            # No counts in the log line (raw-derived; Airflow task logs leave the trusted
            # zone): they are in the run folder's figures.json.
            log.warning("collect %s: nothing released, nothing spent: %s", c.window_text(),
                        why.split(" (")[0])
            figures.update(release_id=None, nothing_released=why)
            ensure_points_view(spark)
            return figures
        release = ledger.Release(release_id, ctx.run_id, cfg.dataset, c.mechanism,
                                 float(c.epsilon), frozenset(),
                                 {"epsilon": float(c.epsilon), "trajectories": n_released})
        figures["explain"] = write_explain(
            cfg, ctx.run_id, explain_report(cfg, release, cost, policy, summary, space))
        figures["epsilon_spent"] = times_up(cost, n_released)

        # 3. Spend: the planned marker and one charge per trajectory, in one append.
        charge_release(spark, release, plan, setting, figures)
    finally:
        plan.unpersist()

    # 4. Release, register, measure: the same steps a rolled-forward release takes.
    finish_release(spark, cfg, release, space, figures)
    return figures


def affordable_cost(policy: K.BudgetPolicy, setting: K.Setting) -> float:
    """Epsilon one trajectory costs under `setting`; refused when no budget could pay it."""
    cost = K.sweep_cost([setting])
    if cost > policy.user_budget:
        raise BudgetExceededError(
            f"collect.epsilon {cost:g} per trajectory exceeds privacy.budget "
            f"{policy.user_budget:g} per {policy.window_days} days: no trajectory could be "
            "released; lower collect.epsilon or raise privacy.budget"
        )
    return cost


def roll_forward(spark: SparkSession, cfg: Config, space: LocationSpace,
                 figures: dict[str, Any]) -> list[ledger.Release]:
    """Finish every release of the dataset a crash left short of `evaluated` (same noise, no
    new spend); returns every release the ledger knows."""
    releases = ledger.collect_releases(spark, cfg.dataset)
    pending = [r for r in releases if not r.complete]
    for rel in pending:
        log.warning("release %s (run %s) stopped before %s: finishing it from its ledger rows "
                    "(same noise, no new spend)", rel.release_id, rel.run_id,
                    next(s for s in (ledger.PUBLISHED, ledger.REGISTERED, ledger.EVALUATED)
                         if s not in rel.states))
        finish_release(spark, cfg, rel, space, figures)
    figures["recovered_releases"] = [r.release_id for r in pending]
    return releases


def plan_release(spark: SparkSession, cfg: Config, policy: K.BudgetPolicy, cost: float,
                 n_locations: int, release_id: str, fresh: bool):
    """The persisted budget plan of the collection window (no noise drawn), the window before
    already-released trajectories were skipped (None with `fresh`), and the planner's CPU
    timer."""
    pkey = pseudonym_key(cfg.storage.secrets)
    publish = publish_options(cfg)
    window = read_window(spark, cfg)
    before = None
    if not fresh:
        before = window
        window = window.join(already_released(spark, cfg), ["user_id", "date", "traj_id"],
                             "left_anti")
    timer = spark.sparkContext.accumulator(0.0)
    plan = build_plan(
        window,
        prior_spend(spark, cfg, policy),
        PlanRule(cost, policy, n_locations, cfg.collect.max_len),
        partitions=int(spark.conf.get("spark.sql.shuffle.partitions")),
        traj_keys_of=lambda users, dates, tids: pseudonyms(pkey, [
            publish.key_message(cfg.dataset, u, d, int(t), release_id)
            for u, d, t in zip(users, dates, tids, strict=True)]),
        timer=timer,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    return plan, before, timer


def plan_figures(figures: dict[str, Any], summary: dict[str, Any],
                 before: DataFrame | None) -> int:
    """The plan's counts into `figures`; the number of trajectories it releases."""
    counts = summary["counts"]
    n_released = counts.get(K.RELEASED, {}).get("trajectories", 0)
    planned = sum(v["trajectories"] for v in counts.values())
    skipped = 0 if before is None else before.count() - planned
    figures.update(
        trajectories_in_window=planned + skipped,
        trajectories_released=n_released,
        points_released=counts.get(K.RELEASED, {}).get("points", 0) or 0,
        users=summary["users"],
        users_released=summary["users_released"],
        refused={**{r: counts[r]["trajectories"] for r in counts if r != K.RELEASED},
                 **({ALREADY_RELEASED: skipped} if skipped else {})},
        epsilon_spent=0.0,
    )
    return n_released


def charge_release(spark: SparkSession, release: ledger.Release, plan: DataFrame,
                   setting: K.Setting, figures: dict[str, Any]) -> None:
    """The charge, before any noise is drawn: the `planned` marker and one `spent` row per
    released trajectory of `plan`, in one ledger append."""
    faults.crash_point("before_ledger")
    t1 = time.perf_counter()
    charges = ledger.ledger_rows(
        plan.where("released").select("user_id", "date", "traj_id", "traj_key"),
        dataset=release.dataset, run_id=release.run_id, mechanism=release.mechanism,
        epsilon=setting.charge, delta=0.0, state=ledger.SPENT, stage=STAGE,
        release_id=release.release_id)
    ledger.append(charges.unionByName(
        ledger.marker_frame(spark, release, ledger.PLANNED, release.detail)))
    figures["ledger_s"] = round(time.perf_counter() - t1, 3)
    faults.crash_point("after_ledger")


# ----------------------------------------------------------------------------- explain
def explain_report(cfg, release, cost, policy, summary, space) -> dict[str, Any]:
    """Where epsilon goes: per trajectory, per mechanism step, and per user window."""
    c = cfg.collect
    options = mechanism_options(c)
    setting = K.Setting(release.mechanism, release.epsilon, release.release_id)
    return {
        "run_id": release.run_id,
        "release_id": release.release_id,
        "dataset": cfg.dataset,
        "window": [str(c.window_start), str(c.window_end)],
        "policy": {
            "unit": cfg.privacy.unit,
            "budget": policy.user_budget,
            "window_days": policy.window_days,
            "window_epoch": K.EPOCH.isoformat(),
        },
        "epsilon_per_released_trajectory": cost,
        "plan": {
            reason: {k: v for k, v in row.items() if k != "reason"}
            for reason, row in summary["counts"].items()
        },
        "publish": cfg.publish.model_dump(),
        "mechanism_steps": K.explain_settings(space, [setting], summary["lengths"] or [1],
                                              options),
    }


def write_explain(cfg: Config, run_id: str, report: dict[str, Any]) -> str:
    from jobs.run_folder import write_run_json

    return write_run_json(cfg, run_id, "collect_explain.json", report)


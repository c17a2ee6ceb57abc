"""`trajpriv evaluate`: mobility divergences of published data against real days.

Comparisons made for `cfg.dataset`, each one row per metric in `trajpriv_trusted.evaluation`
(every one is computed from raw data, so none is published):
- `real_train` vs real held-out days: the floor (what two samples of real behaviour differ by);
  needs the train/held-out split written by `trajpriv train`.
- each synthetic model of the latest synthesize run vs real held-out days (setting = epsilon),
  next to `uniform_random`: as many days (`synthesize.n_days`) with every slot drawn uniformly
  from the public location map, the trivial generator a private model has to beat (the report
  says, per model, on which metrics it does);
- each (mechanism, epsilon) of the latest study, and each published release, vs the same raw
  trajectories: the raw and
  the perturbed points are put into 48-slot days with the raw timestamps (this runs in the
  trusted zone; only the divergences are published), so the only difference is the mechanism.
Beside the six divergences, each real and synthetic comparison (not the perturbed ones) gets
the long-range statistics of `udfs.longrange` (daily motifs, home return, train on the
compared days / test on the held-out days): one more Spark pass of integer counts,
`jobs/evaluate/longrange.py`, the same in both modes.
With `--attacks` (or `evaluate.attacks`), also the attacks of `jobs/evaluate/attacks.py`: home
re-identification, and white-box MIA and LiRA against the train runs behind the synthetic days
compared above (rows with the same method and setting as their divergences).
Statistics per `evaluate.mode` (`geo` by default, `paper` for the PateGail definitions): Spark
reduces each set of days to small integer histograms (a `DaySummary`), the driver computes the
JSDs with the numpy core (`udfs.mobility.compare_summaries`). Two Spark passes in all:
- real and synthetic days: the held-out, the training and every synthetic table together,
  grouped by table (`jobs.evaluate.summaries.summarize_groups_pandas`);
- perturbed: each published trajectory joined with its raw one, hash-partitioned by user, and
  per task of whole users the raw and perturbed slot days of every setting built and summarised
  at once (`pair_summaries`); a setting's raw days are summarised once per distinct set of
  published trajectories. Only integer counts are added up, so the divergences equal those of
  one `udfs.mobility.jsd_metrics` call on each comparison's days (tests/jobs/
  test_evaluate_stage.py). (Exploding every setting into point rows and building slot days per
  (setting, side, user) group would take one pass per comparison.)
Row shapes: slot days (part, slots) -> histogram rows (part, kind, key, w) -> DaySummary per
part; pairs (mechanism, epsilon, traj_key, user_id, ts[], raw[], pert[]) one per published
trajectory -> per task: points -> slot days -> histogram rows (mechanism, epsilon, side, kind,
key, w) -> DaySummary per setting and side; then six numbers per comparison -> evaluation rows
(method, setting, metric, value).
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.config import Config
from jobs.evaluate.longrange import longrange_summaries
from jobs.evaluate.pairs import latest_runs, perturbed_pairs
from jobs.evaluate.summaries import (
    SUMMARY_ROW_DDL,
    summaries_by_group,
    summarize_groups_pandas,
    summary_rows,
)
from jobs.ingest.shaping import build_slot_days
from jobs.progress import spark_progress
from jobs.spark.catalog import read_table, table_exists
from jobs.spark.evaluation import write_evaluation
from jobs.spark.per_user import per_partition
from jobs.spark.tables import (
    LOCATIONS,
    SLOT_DAYS,
    SLOT_DAYS_SPLIT,
    SYNTHETIC_TRAJECTORIES,
)
from udfs.errors import InputDataError, InvalidTrajectoryError
from udfs.longrange import compare_longrange
from udfs.mobility import compare_summaries, metric_bins, validate_coords
from udfs.mobility_bins import SLOTS, MetricBins
from udfs.mobility_stats import DaySummary

log = logging.getLogger("trajpriv.evaluate")

HELD_OUT = "held-out"  # the group of the real days every other table is compared with
UNIFORM_BASELINE = "uniform_random"  # method of the trivial generator beside synthetic days
UNIFORM_SEED = 0  # one fixed draw: the baseline is the same in every evaluate run


def uniform_days(spark: SparkSession, n_locations: int, n_days: int) -> DataFrame:
    """(part, slots): n_days days of SLOTS slots, each slot a uniform dense location row.

    Needs only the public location count, so it is a baseline any analyst could publish; the
    rows are dense indices already (no remapping)."""
    rng = np.random.default_rng(UNIFORM_SEED)
    slots = rng.integers(n_locations, size=(n_days, SLOTS), dtype=np.int32)
    pdf = pd.DataFrame({"part": UNIFORM_BASELINE, "slots": list(slots)})
    return spark.createDataFrame(pdf, "part string, slots array<int>")


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--attacks",
        action="store_true",
        help="also attack the output: home re-identification, white-box membership inference "
        "and LiRA (evaluate.attacks / evaluate.attack_kinds in config)",
    )


def dense_locations(spark: SparkSession, dataset: str, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(coords, ids): the dataset's locations sorted by id, row i = location id ids[i].

    coords is the (L, 2) lat/lon array the metric code indexes by row (checked for `mode`).
    """
    locs = read_table(spark, LOCATIONS).where(F.col("dataset") == dataset)
    pdf = locs.select("loc_id", "lat", "lon").toPandas().sort_values("loc_id")
    if pdf.empty:
        raise InputDataError(f"no locations for dataset {dataset!r}: run datagen/ingest first")
    ids = pdf["loc_id"].to_numpy(dtype=np.int64)
    if (np.diff(ids) == 0).any():
        raise InputDataError(f"{LOCATIONS} holds a loc_id twice for dataset {dataset!r}")
    return validate_coords(pdf[["lat", "lon"]].to_numpy(), mode), ids


def dense_ids(ids: np.ndarray) -> np.ndarray | None:
    """None when location id == row already (no remapping needed), else the ids."""
    return None if np.array_equal(ids, np.arange(ids.size)) else ids


def remap_slots(days: DataFrame, loc_ids: np.ndarray | None, part=None) -> DataFrame:
    """(part, slots) or (slots): location ids replaced by their row in `loc_ids` (kept when
    loc_ids is None: ids are rows already; an unknown id becomes null, an invalid day); `part`
    labels the rows."""
    label = [] if part is None else [part.alias("part")]
    if loc_ids is None:
        return days.select(*label, "slots")
    lut = F.create_map(*[F.lit(int(x)) for row, i in enumerate(loc_ids) for x in (i, row)])
    return days.select(*label, F.transform("slots", lambda s: lut[s]).alias("slots"))


def real_days(spark: SparkSession, dataset: str) -> tuple[DataFrame, DataFrame | None]:
    """(held-out or all real days, training days or None when no split exists yet)."""
    if table_exists(spark, SLOT_DAYS_SPLIT):
        split = spark.table(SLOT_DAYS_SPLIT).where(F.col("dataset") == dataset)
        holdout = split.where(F.col("split") == "holdout")
        if holdout.limit(1).count():
            return holdout, split.where(F.col("split") == "train")
    days = read_table(spark, SLOT_DAYS).where(F.col("dataset") == dataset)
    return days, None


#: Rows per piece of whole users that `pair_summaries` puts into slot days at once.
CHUNK_ROWS = 200_000
PAIR_KEYS = ["mechanism", "epsilon", "side"]
PAIR_SUMMARY_DDL = "mechanism string, epsilon double, side string, " + SUMMARY_ROW_DDL


def pair_summaries(
    pairs: pa.Table,
    coords: np.ndarray,
    loc_ids: np.ndarray | None,
    bins: MetricBins,
    chunk_rows: int = CHUNK_ROWS,
) -> pd.DataFrame:
    """Summary rows of the raw and the perturbed 48-slot days of whole users' trajectory pairs.

    pairs: rows of `perturbed_pairs` (every row of each user present). Per (mechanism,
    epsilon) and side (raw, perturbed), the points of each user are put into slot days with
    the ingest rules (`jobs.ingest.shaping.build_slot_days`, the raw timestamps for both sides), the
    days' ids mapped to coords rows (`loc_ids`: the sorted location ids, row i = id
    loc_ids[i]; None when ids are already 0..L-1; an unknown id makes the day invalid) and
    summarised by the numpy core. Settings that published the same trajectories of these users
    have the same raw days: those are summarised once and their rows repeated.
    Returns (mechanism, epsilon, side, kind, key, w) rows, summed per key (integers only).
    Row shapes: pairs (one per trajectory and setting) -> points (group, user, ts, loc) ->
    slot days (group, user, date, 48 ids) -> summary rows per group.
    """
    cols = {c: pairs.column(c) for c in ("ts", "raw", "pert")}
    lengths = {c: pc.fill_null(pc.list_value_length(a), 0).to_numpy() for c, a in cols.items()}
    n = lengths["ts"]
    bad = np.flatnonzero((lengths["raw"] != n) | (lengths["pert"] != n))
    if bad.size:
        i = int(bad[0])
        raise InvalidTrajectoryError(
            f"{bad.size} published trajectories do not have one location per raw point, e.g. "
            f"traj_key {pairs.column('traj_key')[i]}: {n[i]} timestamps, {lengths['raw'][i]} "
            f"raw and {lengths['pert'][i]} published ids (a published trajectory must keep "
            "its raw one's length)"
        )
    flat = {}
    for c, a in cols.items():
        values = pc.list_flatten(a)
        if values.null_count:
            raise InvalidTrajectoryError(f"null values in the {c} arrays of the trajectory pairs")
        flat[c] = values.to_numpy().astype(np.int64, copy=False)
    offsets = np.r_[0, np.cumsum(n)]
    settings = pd.MultiIndex.from_arrays(
        [pairs.column("mechanism").to_numpy(), pairs.column("epsilon").to_numpy()]
    )
    setting, setting_values = pd.factorize(settings)
    user, users = pd.factorize(pairs.column("user_id").to_numpy())
    traj = pd.factorize(pairs.column("traj_key").to_numpy())[0]
    by_user = np.argsort(user, kind="stable")
    ends = np.cumsum(np.bincount(user, minlength=len(users)))  # row count through each user
    parts = []
    lo = 0
    while lo < len(by_user):
        # whole users: cut after the last user whose rows end within chunk_rows of lo
        last = max(
            int(np.searchsorted(ends, lo + chunk_rows, side="right")) - 1,
            int(np.searchsorted(ends, lo, side="right")),
        )
        hi = int(ends[last])
        rows = by_user[lo:hi]
        parts.append(
            _chunk_summaries(
                rows,
                setting[rows],
                user[rows],
                traj[rows],
                len(users),
                offsets,
                n,
                flat,
                coords,
                loc_ids,
                bins,
            )
        )
        lo = hi
    out = pd.concat(parts, ignore_index=True)
    out = out.groupby(["setting", "side", "kind", "key"], sort=True)["w"].sum().reset_index()
    codes = out["setting"].to_numpy(dtype=np.int64)
    return pd.DataFrame(
        {
            "mechanism": setting_values.get_level_values(0)[codes].to_numpy(dtype=object),
            "epsilon": setting_values.get_level_values(1)[codes].to_numpy(dtype=np.float64),
            "side": out["side"].to_numpy(dtype=object),
            "kind": out["kind"].to_numpy(dtype=np.int32),
            "key": out["key"].to_numpy(dtype=np.int64),
            "w": out["w"].to_numpy(dtype=np.int64),
        }
    )


def _chunk_summaries(rows, setting, user, traj, n_users, offsets, n, flat, coords, loc_ids, bins):
    """Summary rows (setting, side, kind, key, w) of one piece of whole users (`rows`)."""
    # Raw days depend only on which trajectories a setting published: one class per distinct
    # multiset of traj keys, summarised once.
    present = np.unique(setting)
    classes: list[tuple[np.ndarray, list[int]]] = []  # (sorted traj codes, settings)
    for s in present:
        sig = np.sort(traj[setting == s])
        for known, members in classes:
            if np.array_equal(known, sig):
                members.append(int(s))
                break
        else:
            classes.append((sig, [int(s)]))
    # groups: 0..C-1 raw days of each class, C + s the perturbed days of setting s
    n_cls = len(classes)
    rep_of = np.full(int(present.max()) + 1, -1)
    for c, (_, members) in enumerate(classes):
        rep_of[members[0]] = c
    raw_rows = rep_of[setting] >= 0
    pieces = [
        (rows[raw_rows], rep_of[setting[raw_rows]], user[raw_rows], flat["raw"]),
        (rows, n_cls + setting, user, flat["pert"]),
    ]
    gs, us, ts, locs = [], [], [], []
    for r, group, u, values in pieces:
        counts = n[r]
        idx = _point_index(offsets[r], counts)
        gs.append(np.repeat(group, counts))
        us.append(np.repeat(u, counts))
        ts.append(flat["ts"][idx])
        locs.append(values[idx])
    g = np.concatenate(gs).astype(np.int64)
    points = pd.DataFrame(
        {
            "user_id": g * n_users + np.concatenate(us),
            "ts": (np.concatenate(ts) * 1000).view("datetime64[ns]"),
            "loc_id": np.concatenate(locs),
        }
    )
    days = build_slot_days(points)
    if days.empty:  # only empty trajectories: no day, no rows (as if they were not published)
        return pd.DataFrame({c: [] for c in ("setting", "side", "kind", "key", "w")})
    grid = np.stack(days["slots"].to_numpy()).astype(np.int64)
    group = days["user_id"].to_numpy(dtype=np.int64) // n_users
    grid, ok = _dense(grid, coords.shape[0], loc_ids)
    out = []

    def emit(mask, members, side):
        if not mask.any():
            return
        part = summary_rows(grid[mask & ok], int((mask & ~ok).sum()), coords, bins)
        for s in members:
            out.append(part.assign(setting=s, side=side))

    for c, (_, members) in enumerate(classes):
        emit(group == c, members, "raw")
    for s in present:
        emit(group == n_cls + s, [int(s)], "perturbed")
    return pd.concat(out, ignore_index=True)


def _point_index(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Flat positions starts[i] .. starts[i] + counts[i] - 1, for each i in order."""
    total = int(counts.sum())
    first = np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + (np.arange(total) - first)


def _dense(grid: np.ndarray, n_loc: int, loc_ids: np.ndarray | None):
    """(grid with ids replaced by their coords row, True for days whose ids all exist)."""
    if loc_ids is None:
        return grid, ((grid >= 0) & (grid < n_loc)).all(axis=1)
    pos = np.minimum(np.searchsorted(loc_ids, grid), loc_ids.size - 1)
    return pos, (loc_ids[pos] == grid).all(axis=1)


def perturbed_summaries(
    spark: SparkSession, pairs: DataFrame, coords: np.ndarray, loc_ids, bins: MetricBins
) -> dict[tuple, DaySummary]:
    """{(mechanism, epsilon, side): DaySummary} of every setting's raw and perturbed days in
    one Spark pass: pairs hash-partitioned by user (whole users per task), `pair_summaries`
    per partition, integer counts summed by Spark."""

    def kernel(table: pa.Table, _shared) -> pa.RecordBatch:
        rows = pair_summaries(table, coords, loc_ids, bins)
        return pa.RecordBatch.from_pandas(rows, schema=PAIR_ARROW, preserve_index=False)

    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    rows = (
        per_partition(pairs, kernel, PAIR_SUMMARY_DDL, partitions=parts, arrow=True)
        .groupBy(*PAIR_KEYS, "kind", "key")
        .agg(F.sum("w").alias("w"))
        .collect()
    )
    settings = sorted({(r["mechanism"], r["epsilon"]) for r in rows})
    expected = [(m, e, side) for m, e in settings for side in ("raw", "perturbed")]
    return summaries_by_group(
        rows, PAIR_KEYS, coords.shape[0], bins, "perturbed comparison", expected
    )


PAIR_ARROW = pa.schema(
    [
        ("mechanism", pa.string()),
        ("epsilon", pa.float64()),
        ("side", pa.string()),
        ("kind", pa.int32()),
        ("key", pa.int64()),
        ("w", pa.int64()),
    ]
)


def metric_rows(method: str, setting: float | None, values: dict[str, float]) -> list[dict]:
    return [
        {"method": method, "setting": setting, "metric": name, "value": value}
        for name, value in values.items()
    ]


def run(spark: SparkSession, cfg: Config, ctx) -> dict[str, Any]:
    mode = cfg.evaluate.mode
    bins = metric_bins(mode)
    coords, ids = dense_locations(spark, cfg.dataset, mode)
    loc_ids = dense_ids(ids)
    held_out, train = real_days(spark, cfg.dataset)
    rows: list[dict] = []
    timings: dict[str, float] = {}
    compared: list[str] = []

    def record(label: str, method: str, setting: float | None, values: dict[str, float]) -> None:
        compared.append(label)
        rows.extend(metric_rows(method, setting, values))
        # divergences from raw data: trusted-zone figures, kept off the INFO log
        log.debug("%s: %s", label, {k: round(v, 5) for k, v in values.items()})

    # Real and synthetic days: every table against the held-out days, in one pass.
    tables = []  # (label, method, setting): label also names the days' group
    parts = []  # (part, slots) per table
    if train is not None:
        tables.append(("real_train", "real_train", None))
        parts.append(remap_slots(train, loc_ids, F.lit("real_train")))
    targets: list[tuple[str, str, float]] = []  # train runs behind the synthetic days
    if table_exists(spark, SYNTHETIC_TRAJECTORIES):
        synth = latest_runs(spark, SYNTHETIC_TRAJECTORIES, cfg.dataset, ["model"])
        label = F.lit(None).cast("string")
        for row in synth.select("run_id", "model", "epsilon").distinct().collect():
            targets.append((row["run_id"], row["model"], float(row["epsilon"])))
            name = f"synthetic {row['model']}"
            tables.append((name, row["model"], row["epsilon"]))
            mine = (F.col("model") == row["model"]) & (F.col("epsilon") == row["epsilon"])
            label = F.when(mine, F.lit(name)).otherwise(label)
        parts.append(remap_slots(synth, loc_ids, label).where(F.col("part").isNotNull()))
        if targets:
            tables.append((UNIFORM_BASELINE, UNIFORM_BASELINE, None))
            parts.append(uniform_days(spark, len(coords), cfg.synthesize.n_days))
    if tables:
        t0 = time.perf_counter()
        days = remap_slots(held_out, loc_ids, F.lit(HELD_OUT))
        for part in parts:
            days = days.unionByName(part)
        # (part, slots): one row per day of every table -> {part: DaySummary}
        expected = [(HELD_OUT,), *{(t[0],) for t in tables}]
        with spark_progress(spark, "evaluate real and synthetic days", "tasks"):
            summaries = summarize_groups_pandas(days, ["part"], coords, bins, "days", expected)
        timings["real and synthetic"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        with spark_progress(spark, "evaluate long-range statistics", "tasks"):
            longrange = longrange_summaries(days, len(coords), [g[0] for g in expected])
        for label, method, setting in tables:
            values = compare_summaries(summaries[(HELD_OUT,)], summaries[(label,)], bins)
            values.update(compare_longrange(longrange[HELD_OUT], longrange[label], len(coords)))
            record(label, method, setting, values)
        timings["long-range"] = round(time.perf_counter() - t0, 2)
    pairs = perturbed_pairs(spark, cfg)
    if pairs is not None:
        t0 = time.perf_counter()
        with spark_progress(spark, "evaluate perturbed trajectories", "tasks"):
            summaries = perturbed_summaries(spark, pairs, coords, loc_ids, bins)
        for m, e in sorted({(m, e) for m, e, _ in summaries}):
            values = compare_summaries(
                summaries[(m, e, "raw")], summaries[(m, e, "perturbed")], bins
            )
            record(f"perturbed {m} eps={e}", f"perturbed_{m}", float(e), values)
        timings["perturbed"] = round(time.perf_counter() - t0, 2)
    if not rows:
        raise InputDataError(
            f"nothing to evaluate for dataset {cfg.dataset!r}: run train+synthesize or collect"
        )
    attack_figures: dict[str, Any] = {}
    if cfg.evaluate.attacks or getattr(ctx.args, "attacks", False):
        from jobs.evaluate.attacks import run_attacks

        t0 = time.perf_counter()
        attack_rows, attack_figures = run_attacks(spark, cfg, targets or None)
        timings["attacks"] = round(time.perf_counter() - t0, 2)
        rows.extend(attack_rows)
    written = write_evaluation(spark, rows, run_id=ctx.run_id, dataset=cfg.dataset)
    finite = [r for r in rows if r["value"] is not None and math.isfinite(r["value"])]
    return {
        "mode": mode,
        "comparisons": len(compared),
        "rows": written,
        "finite_rows": len(finite),
        "seconds": timings,
        **attack_figures,
    }


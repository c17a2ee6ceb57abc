"""`trajpriv evaluate`: the divergences of each perturbed setting and the grouped summaries.

Oracles, computed without Spark: slot days built by `jobs.ingest.shaping.build_slot_days` straight
from the raw and the published points of each setting, compared by `udfs.mobility.jsd_metrics`
(numpy); and `udfs.mobility_stats.summarize_days` of each group of days taken alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import fields

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jobs.evaluate import stage as E
from jobs.ingest.shaping import build_slot_days
from jobs.spark import tables
from udfs.errors import InvalidTrajectoryError
from udfs.mobility import jsd_metrics, metric_bins
from udfs.mobility_stats import summarize_days

DATASET = "evaluate_test"
N_LOC = 25
START, END = dt.date(2014, 6, 2), dt.date(2014, 6, 11)
METRICS = ("distance", "radius", "duration", "dailyloc", "grank", "irank")


def raw_data(seed: int = 5):
    """Locations and trajectories: several points per half hour (slot modes and ties),
    trajectories across slots, 0-3 trajectories a day."""
    rng = np.random.default_rng(seed)
    locations = pd.DataFrame({"dataset": DATASET, "loc_id": np.arange(N_LOC, dtype=np.int32),
                              "lat": 31.2 + rng.random(N_LOC) * 0.1,
                              "lon": 121.4 + rng.random(N_LOC) * 0.1})
    trajs = []
    for u in range(6):
        for day in range((END - START).days + 1):
            date = START + dt.timedelta(days=day)
            for k in range(int(rng.choice([0, 1, 2, 3]))):
                n = int(rng.integers(1, 7))
                start = int(rng.integers(0, 86_400 - 3_600))
                secs = np.sort(start + rng.choice(3 * 3_600, n, replace=False)) % 86_400
                trajs.append({"dataset": DATASET, "user_id": f"user-{u}", "traj_id": k,
                              "date": date,
                              "loc_ids": rng.integers(0, N_LOC, n).astype(np.int32).tolist(),
                              "ts": [dt.datetime.combine(date, dt.time()) +
                                     dt.timedelta(seconds=int(s)) for s in np.sort(secs)],
                              "n": n})
    return locations, pd.DataFrame(trajs)


def study_config(spark_config, mechanisms, epsilons, end: dt.date):
    """The config of a study of `mechanisms` x `epsilons` over START to `end`."""
    from jobs.config import config_from_mapping

    tree = spark_config.model_dump(mode="json")
    tree["dataset"] = DATASET
    tree["study"] = {"mechanisms": mechanisms, "epsilons": epsilons, "synthesis_methods": []}
    tree["collect"] = {"window_start": START.isoformat(), "window_end": end.isoformat()}
    return config_from_mapping(tree)


@pytest.mark.spark
def test_perturbed_divergences_equal_numpy_on_slot_days_of_the_points(spark, spark_config):
    from jobs.harness import execute
    from jobs.spark.catalog import write_table

    locations, trajs = raw_data()
    write_table(spark.createDataFrame(locations), tables.LOCATIONS, partition_by=["dataset"],
                replace={"dataset": DATASET})
    schema = ("dataset string, user_id string, traj_id int, date date, loc_ids array<int>, "
              "ts array<timestamp>, n int")
    cols = [c.split()[0] for c in schema.split(", ")]
    write_table(spark.createDataFrame(trajs[cols], schema), tables.TRAJECTORIES,
                partition_by=["dataset", "date"], replace={"dataset": DATASET})
    points = trajs[["user_id", "ts", "loc_ids"]].explode(["ts", "loc_ids"])
    points = points.rename(columns={"loc_ids": "loc_id"}).astype({"loc_id": np.int64})
    points["ts"] = pd.to_datetime(points["ts"])
    days = build_slot_days(points).assign(dataset=DATASET)
    write_table(spark.createDataFrame(days.assign(date=days["date"].dt.date),
                                      "user_id string, date date, slots array<int>, "
                                      "dataset string"),
                tables.SLOT_DAYS, partition_by=["dataset", "date"], replace={"dataset": DATASET})

    from jobs.study import stage as S

    cfg = study_config(spark_config, ["atp", "exp"], [1.0, 4.0], END)
    execute("study", S.run, cfg, argparse.Namespace(), spark, "eval-study")
    # A third setting with every other trajectory only (by hand: a second study would cost
    # more than the rest of the test), so the settings do not all share their raw days.
    pub = spark.table(tables.STUDY_PERTURBED).where(f"dataset = '{DATASET}'")
    part = pub.where("mechanism = 'exp' AND epsilon = 4.0").toPandas().sort_values(
        ["user_id", "date", "traj_id"])
    part = part.iloc[::2].assign(run_id="eval-partial", mechanism="tp", epsilon=2.0)
    write_table(spark.createDataFrame(part[pub.columns], pub.schema), tables.STUDY_PERTURBED)
    figures = execute("evaluate", E.run, cfg, argparse.Namespace(attacks=False), spark,
                      "eval-stage-1")
    assert figures["comparisons"] == 5

    got = spark.table("trajpriv_trusted.evaluation").where(
        f"dataset = '{DATASET}' AND run_id = 'eval-stage-1'").toPandas()
    got = {(r.method, r.setting, r.metric): r.value for r in got.itertuples()}
    pub = spark.table(tables.STUDY_PERTURBED).where(f"dataset = '{DATASET}'").toPandas()
    truth = {(r.user_id, r.date, r.traj_id): r for r in trajs.itertuples()}
    coords = locations[["lat", "lon"]].to_numpy()
    sizes = set()
    for (mech, eps, _run), grp in pub.groupby(["mechanism", "epsilon", "run_id"]):
        raw = [truth[k] for k in zip(grp["user_id"], grp["date"], grp["traj_id"], strict=True)]
        sizes.add(len(raw))
        sides = {}
        for side, ids in (("raw", [r.loc_ids for r in raw]), ("perturbed", grp["loc_ids"])):
            pts = pd.DataFrame({"user_id": np.repeat([r.user_id for r in raw],
                                                     [len(r.ts) for r in raw]),
                                "ts": pd.to_datetime(np.concatenate([r.ts for r in raw])),
                                "loc_id": np.concatenate(list(ids)).astype(np.int64)})
            sides[side] = np.stack(build_slot_days(pts)["slots"].to_numpy())
        want = jsd_metrics(sides["raw"], sides["perturbed"], coords, "geo")
        for metric in METRICS:
            # the same integer histograms, then the very same numpy JSD: equal, not approximate
            assert got[(f"perturbed_{mech}", eps, metric)] == want[metric], (mech, eps, metric)
    assert len(sizes) == 2  # the partial release did leave trajectories out
    assert len([k for k in got if k[0].startswith("perturbed_")]) == 5 * len(METRICS)


def pairs_table(rng: np.random.Generator, loc_ids: np.ndarray) -> pa.Table:
    """Trajectory pairs (rows of `evaluate.perturbed_pairs`) of 7 users and 3 settings, the
    third publishing fewer trajectories, one row present twice."""
    rows = []
    for u in range(7):
        for d in range(6):
            for k in range(int(rng.integers(0, 3))):
                n = int(rng.integers(1, 6))
                t0 = np.datetime64("2014-06-02") + np.timedelta64(d, "D")
                secs = np.sort(rng.choice(86_400, n, replace=False))
                ts = ((t0 + secs.astype("timedelta64[s]")).astype("datetime64[us]")
                      .astype(np.int64))
                raw = rng.choice(loc_ids, n)
                for s, (mech, eps) in enumerate([("atp", 1.0), ("exp", 1.0), ("exp", 4.0)]):
                    if s == 2 and rng.random() < 0.4:
                        continue
                    rows.append((mech, eps, f"k{u}-{d}-{k}", f"u{u}", ts, raw,
                                 rng.choice(loc_ids, n)))
    rows.append(rows[3])
    cols = list(zip(*rows, strict=True))
    return pa.table({
        "mechanism": pa.array(cols[0], pa.string()), "epsilon": pa.array(cols[1], pa.float64()),
        "traj_key": pa.array(cols[2], pa.string()), "user_id": pa.array(cols[3], pa.string()),
        "ts": pa.array([list(a) for a in cols[4]], pa.list_(pa.int64())),
        "raw": pa.array([list(a) for a in cols[5]], pa.list_(pa.int32())),
        "pert": pa.array([list(a) for a in cols[6]], pa.list_(pa.int32())),
    })


def pair_oracle(table: pa.Table, coords: np.ndarray, loc_ids: np.ndarray, bins) -> dict:
    """{(mechanism, epsilon, side): summarize_days} of slot days of each setting's points."""
    pdf = table.to_pandas()
    out = {}
    for (mech, eps), grp in pdf.groupby(["mechanism", "epsilon"]):
        for side in ("raw", "pert"):
            pts = pd.DataFrame({
                "user_id": np.repeat(grp["user_id"].to_numpy(), grp["ts"].map(len)),
                "ts": (np.concatenate(grp["ts"].to_numpy()) * 1000).view("datetime64[ns]"),
                "loc_id": np.concatenate(grp[side].to_numpy()).astype(np.int64)})
            days = np.stack(build_slot_days(pts)["slots"].to_numpy())
            dense = np.searchsorted(loc_ids, days)
            key = (mech, eps, "raw" if side == "raw" else "perturbed")
            out[key] = summarize_days(dense, coords, bins)
    return out


def as_summaries(rows: pd.DataFrame, n_loc: int, bins) -> dict:
    from jobs.evaluate.summaries import summaries_by_group

    return summaries_by_group(rows.to_dict("records"), E.PAIR_KEYS, n_loc, bins, "pairs")


def test_pair_summaries_equal_summaries_of_each_settings_slot_days():
    rng = np.random.default_rng(21)
    loc_ids = np.sort(rng.choice(1000, 40, replace=False))  # not 0..L-1: ids are mapped
    coords = np.column_stack([31.0 + rng.random(40) * 0.3, 121.3 + rng.random(40) * 0.3])
    table = pairs_table(rng, loc_ids)
    bins = metric_bins("geo")
    want = pair_oracle(table, coords, loc_ids, bins)
    for chunk_rows in (10_000, 7, 1):  # one piece, pieces of whole users, one user a piece
        rows = E.pair_summaries(table, coords, loc_ids, bins, chunk_rows=chunk_rows)
        got = as_summaries(rows, len(loc_ids), bins)
        assert set(got) == set(want)
        for key, summary in want.items():
            for f in fields(summary):
                np.testing.assert_array_equal(getattr(got[key], f.name),
                                              getattr(summary, f.name), (chunk_rows, key, f.name))


def test_pair_summaries_reject_unknown_ids_and_length_mismatches():
    rng = np.random.default_rng(22)
    loc_ids = np.arange(10, 30)
    coords = np.column_stack([31.0 + rng.random(20) * 0.3, 121.3 + rng.random(20) * 0.3])
    table = pairs_table(rng, loc_ids)
    bins = metric_bins("geo")
    pert = table.column("pert").to_pylist()
    pert[0] = [5] * len(pert[0])  # an id outside the location set: an invalid day
    bad = table.set_column(6, "pert", pa.array(pert, pa.list_(pa.int32())))
    with pytest.raises(InvalidTrajectoryError, match=r"pairs .*'perturbed'.*: \d+ days do not"):
        as_summaries(E.pair_summaries(bad, coords, loc_ids, bins), len(loc_ids), bins)
    pert[0] = pert[0] + [10]
    bad = table.set_column(6, "pert", pa.array(pert, pa.list_(pa.int32())))
    with pytest.raises(InvalidTrajectoryError, match=r"1 published trajectories do not have"):
        E.pair_summaries(bad, coords, loc_ids, bins)


@pytest.mark.spark
def test_grouped_summaries_equal_per_group_summaries(spark):
    from jobs.evaluate.summaries import summarize_days_pandas, summarize_groups_pandas

    rng = np.random.default_rng(23)
    n_loc = 30
    coords = np.column_stack([rng.uniform(30.7, 31.6, n_loc), rng.uniform(120.9, 121.95, n_loc)])
    days = rng.integers(0, n_loc, (300, 48))
    days[rng.random((300, 48)) < 0.8] = -1
    days[:, 0] = np.abs(days[:, 0])
    idx = np.where(days >= 0, np.arange(48), 0)
    days = np.take_along_axis(days, np.maximum.accumulate(idx, axis=1), axis=1)
    model = rng.choice(["a", "b", "c"], 300)
    eps = rng.choice([1.0, 4.0], 300)
    pdf = pd.DataFrame({"model": model, "epsilon": eps, "slots": list(days.astype(np.int32))})
    df = spark.createDataFrame(pdf, "model string, epsilon double, slots array<int>")
    bins = metric_bins("geo")
    got = summarize_groups_pandas(df.repartition(3), ["model", "epsilon"], coords, bins, "days")
    groups = sorted({(m, e) for m, e in zip(model, eps, strict=True)})
    assert sorted(got) == groups
    for m, e in groups:
        mine = (model == m) & (eps == e)
        want = summarize_days(days[mine], coords, bins)
        for f in fields(want):
            np.testing.assert_array_equal(getattr(got[(m, e)], f.name), getattr(want, f.name))
    one = df.where("model = 'a' AND epsilon = 1.0")
    plain = summarize_days_pandas(one, coords, bins, "days")
    for f in fields(plain):
        np.testing.assert_array_equal(getattr(plain, f.name), getattr(got[("a", 1.0)], f.name))

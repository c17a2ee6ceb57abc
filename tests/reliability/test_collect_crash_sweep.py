"""Crash anywhere, lose nothing: `collect` dies at each write boundary in turn, then one rerun.

The crash is the test seam of `udfs.faults` (`TRAJPRIV_FAULT_CRASH_AT=<point>:raise`):
an `InjectedCrash` (a BaseException no handler catches) at the named boundary leaves exactly
the durable state a SIGKILL there would (the writes before it committed, none after it began;
tests/reliability/test_collect_faults.py kills a real driver process mid-release). Each
boundary is hit on a dataset that was never collected ("fresh"), and the boundaries around the
ledger append and the first partition overwrite also on one with a complete earlier release
("existing"). After the crash and one rerun (a new run id, as a person or
Airflow's retry starts it), for every release in the ledger:
- the published rows equal what the undisturbed release publishes: the release kernel applied
  to exactly the trajectories the budget rules release (an independent oracle of the plan:
  the first 4 trajectories of each user and week in time order), seeded by that release;
- the ledger charges each published trajectory once: its spend equals the sum of the costs of
  what is published, never less and never twice; no user is over budget in any week;
- every release reached its final state (`evaluated`).
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from jobs.collect import stage as C
from jobs.config import config_from_mapping
from jobs.harness import execute
from jobs.spark import ledger as L
from jobs.spark import tables
from jobs.spark.catalog import write_table
from udfs import collect_kernel as K
from udfs.faults import COLLECT_CRASH_POINTS as CRASH_POINTS
from udfs.faults import CRASH_AT, InjectedCrash
from udfs.space import LocationSpace

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N_LOC = 20
EPS, BUDGET = 2.5, 10.0  # 4 trajectories per user and week
WEEK1, WEEK2, WEEK3 = dt.date(2014, 6, 2), dt.date(2014, 6, 9), dt.date(2014, 6, 16)


def _raw(seed: int = 3):
    rng = np.random.default_rng(seed)
    locations = pd.DataFrame({"loc_id": np.arange(N_LOC, dtype=np.int32),
                              "lat": 31.2 + rng.random(N_LOC) * 0.05,
                              "lon": 121.4 + rng.random(N_LOC) * 0.05})
    rows = []
    for u in range(6):
        for day in range(21):
            date = WEEK1 + dt.timedelta(days=day)
            for k in range(int(rng.choice([0, 1, 1, 2]))):
                n = int(rng.integers(1, 6))
                ts = [dt.datetime.combine(date, dt.time(8 + k)) + dt.timedelta(minutes=5 * i)
                      for i in range(n)]
                rows.append((f"crash-user-{u}", k, date,
                             rng.integers(0, N_LOC, n).astype(int).tolist(), ts, n))
    trajs = pd.DataFrame(rows, columns=["user_id", "traj_id", "date", "loc_ids", "ts", "n"])
    return locations, trajs


@pytest.fixture(scope="module")
def raw():
    return _raw()


def _setup(spark, dataset, raw):
    locations, trajs = raw
    write_table(spark.createDataFrame(locations.assign(dataset=dataset)), tables.LOCATIONS,
                partition_by=["dataset"], replace={"dataset": dataset})
    write_table(spark.createDataFrame(
        trajs.assign(dataset=dataset)[["dataset", "user_id", "traj_id", "date", "loc_ids", "ts",
                                       "n"]],
        "dataset string, user_id string, traj_id int, date date, loc_ids array<int>, "
        "ts array<timestamp>, n int"),
        tables.TRAJECTORIES, partition_by=["dataset", "date"], replace={"dataset": dataset})


def _config(spark_config, dataset, start, end):
    tree = spark_config.model_dump(mode="json")
    tree.update(dataset=dataset, privacy={"budget": BUDGET, "window_days": 7},
                study={"prq_km": [1.0]},
                collect={"mechanism": "atp", "epsilon": EPS, "window_start": start.isoformat(),
                         "window_end": end.isoformat()})
    return config_from_mapping(tree)


def _collect(spark, cfg, run_id):
    return execute("collect", C.run, cfg, argparse.Namespace(fresh=False), spark, run_id)


def _oracle(trajs: pd.DataFrame, end: dt.date) -> pd.DataFrame:
    """The trajectories the budget rules release up to `end`: 4 per user-week, time order."""
    t = trajs[trajs["date"] <= end].sort_values(["user_id", "date", "traj_id"])
    week = [K.window_start_of(d, 7) for d in t["date"]]
    return t[t.assign(week=week).groupby(["user_id", "week"]).cumcount() < 4]


def _expected_rows(cfg, space, release_id, charged: pd.DataFrame) -> pd.DataFrame:
    """What the undisturbed release publishes: the kernel on its trajectories, per user."""
    kernel = C.release_kernel(cfg, [K.Setting("atp", EPS, release_id)])
    parts = [kernel(g[["user_id", "date", "traj_id", "loc_ids"]], space)
             for _, g in charged.groupby("user_id")]
    return pd.concat(parts, ignore_index=True)


def _canon(df: pd.DataFrame) -> pd.DataFrame:
    cols = ["pseudonym", "traj_key", "date", "loc_ids", "n"]
    out = df[cols].assign(loc_ids=df["loc_ids"].map(lambda a: tuple(int(x) for x in a)),
                          n=df["n"].astype(int))
    return out.sort_values("traj_key").reset_index(drop=True)


# Every boundary on a dataset never collected ("fresh": weeks 1-2). Then, on the same dataset
# with those releases complete ("existing": weeks 1-3, week 3 new), the boundaries whose state
# differs there: before and after the ledger append, and after the first overwrite of an
# existing table's partitions (later boundaries write the same way on both). The existing case
# starts from the fresh case's end: no collection of its own to set it up.
EXISTING = ("before_ledger", "after_ledger", "after_publish")


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_each_write_boundary_then_one_rerun(spark, spark_config, raw, point,
                                                       monkeypatch):
    dataset = f"crash_{CRASH_POINTS.index(point)}"
    _setup(spark, dataset, raw)
    _crash_then_rerun(spark, spark_config, raw, dataset, point, WEEK2, "fresh", monkeypatch)
    if point in EXISTING:
        _crash_then_rerun(spark, spark_config, raw, dataset, point, WEEK3, "existing",
                          monkeypatch)


def _crash_then_rerun(spark, spark_config, raw, dataset, point, last_week, scenario,
                      monkeypatch):
    """Collect weeks 1..`last_week` crashing at `point`, rerun once, check every release."""
    locations, trajs = raw
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    end = last_week + dt.timedelta(6)
    cfg = _config(spark_config, dataset, WEEK1, end)

    monkeypatch.setenv(CRASH_AT, f"{point}:raise")
    with pytest.raises(InjectedCrash):
        _collect(spark, cfg, f"{dataset}-{scenario}-crashed")
    monkeypatch.delenv(CRASH_AT)
    rerun = _collect(spark, cfg, f"{dataset}-{scenario}-rerun")

    releases = L.collect_releases(spark, dataset)
    assert releases and all(r.complete for r in releases), releases
    crashed_release_recorded = CRASH_POINTS.index(point) >= CRASH_POINTS.index("after_ledger")
    assert bool(rerun["recovered_releases"]) == crashed_release_recorded, scenario

    charges = L.rows(spark).where(f"dataset = '{dataset}' AND state = 'spent'").toPandas()
    published = (spark.table(tables.PERTURBED_TRAJECTORIES).where(f"dataset = '{dataset}'")
                 .toPandas())
    # Spend equals what is published: one charge per published row, none twice, none missing.
    assert not charges.duplicated(["user_id", "date", "traj_id"]).any()
    assert sorted(charges["traj_key"]) == sorted(published["traj_key"])
    assert charges["epsilon"].sum() == pytest.approx(EPS * len(published))
    # The released trajectories are exactly the undisturbed plan's ...
    want = _oracle(trajs, end)
    assert sorted(zip(charges["user_id"], charges["date"], charges["traj_id"], strict=True)) == \
        sorted(zip(want["user_id"], want["date"], want["traj_id"], strict=True))
    week = [K.window_start_of(d, 7) for d in charges["date"]]
    assert charges.assign(week=week).groupby(["user_id", "week"])["epsilon"].sum().max() <= BUDGET
    # ... and each release's published rows are the undisturbed release's, row for row.
    for release in releases:
        mine = charges[charges["release_id"] == release.release_id]
        charged = trajs.merge(mine[["user_id", "date", "traj_id"]],
                              on=["user_id", "date", "traj_id"])
        expected = _expected_rows(cfg, space, release.release_id, charged)
        got = published[published["release_id"] == release.release_id]
        pd.testing.assert_frame_equal(_canon(got), _canon(expected), obj=release.release_id)

"""The long-range statistics of `trajpriv evaluate` (jobs/evaluate/longrange.py): the Spark pass
equals the numpy core per group, and the stage writes the rows beside the six in both modes.

Oracle: `udfs.longrange.summarize_longrange` / `compare_longrange` on each group's days taken
alone (numpy, no Spark)."""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from udfs.errors import InvalidTrajectoryError
from udfs.longrange import LONGRANGE_METRICS, compare_longrange, summarize_longrange

pytestmark = [pytest.mark.spark]

DATASET = "longrange_eval"
N_LOC = 30


def commuter_days(rng: np.random.Generator, n: int) -> np.ndarray:
    """Home, work from about slot 16 to 36, sometimes an errand: a handful of motifs."""
    t = np.arange(48)
    home, work = rng.integers(0, 20, n), rng.integers(20, N_LOC, n)
    go, back = rng.integers(14, 19, n), rng.integers(34, 39, n)
    days = np.where((t >= go[:, None]) & (t < back[:, None]), work[:, None], home[:, None])
    errand = rng.random(n) < 0.3
    return np.where(errand[:, None] & (t >= 40) & (t < 43), (work[:, None] + 1) % N_LOC, days)


def _assert_summaries_equal(got, want) -> None:
    for f in fields(want):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), f.name)


def test_spark_summaries_equal_numpy_per_group(spark):
    from jobs.evaluate.longrange import longrange_summaries

    rng = np.random.default_rng(31)
    days = np.vstack([commuter_days(rng, 200), rng.integers(0, N_LOC, (100, 48))])
    part = rng.choice(["held-out", "a", "b"], len(days))
    pdf = pd.DataFrame({"part": part, "slots": list(days.astype(np.int32))})
    df = spark.createDataFrame(pdf, "part string, slots array<int>").repartition(3)
    got = longrange_summaries(df, N_LOC, ["held-out", "a", "b"])
    for p in ("held-out", "a", "b"):
        _assert_summaries_equal(got[p], summarize_longrange(days[part == p], N_LOC))
    bad = pd.DataFrame({"part": ["a", "a"], "slots": [[0] * 48, [N_LOC] * 48]})
    with pytest.raises(InvalidTrajectoryError, match=r"'a': 1 days do not hold exactly 48"):
        longrange_summaries(spark.createDataFrame(bad, "part string, slots array<int>"),
                            N_LOC, ["a"])


def _write_inputs(spark, holdout: np.ndarray, train: np.ndarray, synth: np.ndarray) -> None:
    from jobs.spark import tables
    from jobs.spark.catalog import RunRecord, record_run, write_table

    rng = np.random.default_rng(0)
    locs = pd.DataFrame({"dataset": DATASET, "loc_id": np.arange(N_LOC, dtype=np.int32),
                         "lat": 31.2 + rng.random(N_LOC) * 0.1,
                         "lon": 121.4 + rng.random(N_LOC) * 0.1})
    write_table(spark.createDataFrame(locs, "dataset string, loc_id int, lat double, "
                                            "lon double"),
                tables.LOCATIONS, replace={"dataset": DATASET})
    split = pd.DataFrame({
        "user_id": [f"u{i % 17}" for i in range(len(holdout) + len(train))],
        "date": [dt.date(2014, 6, 1) + dt.timedelta(days=i // 17)
                 for i in range(len(holdout) + len(train))],
        "slots": list(np.vstack([holdout, train]).astype(np.int32)),
        "dataset": DATASET, "split": ["holdout"] * len(holdout) + ["train"] * len(train)})
    write_table(spark.createDataFrame(split, tables.SLOT_DAYS_SPLIT.columns),
                tables.SLOT_DAYS_SPLIT, replace={"dataset": DATASET})
    syn = pd.DataFrame({"model": "pategail", "epsilon": 4.0, "delta": 1e-5,
                        "privacy_model": "central", "traj_no": np.arange(len(synth)),
                        "slots": list(synth.astype(np.int32)), "dataset": DATASET,
                        "run_id": "lr-synth"})
    write_table(spark.createDataFrame(syn, tables.SYNTHETIC_TRAJECTORIES.columns),
                tables.SYNTHETIC_TRAJECTORIES, replace={"dataset": DATASET})
    now = dt.datetime(2026, 1, 1)
    record_run(spark, RunRecord(run_id="lr-synth", stage="synthesize",
                                config_yaml=f"dataset: {DATASET}", started_at=now,
                                finished_at=now, status="ok", figures={}))


def test_stage_writes_longrange_rows_beside_the_six_in_both_modes(spark, spark_config):
    from jobs.config import config_from_mapping
    from jobs.evaluate import stage as E
    from jobs.harness import execute

    rng = np.random.default_rng(32)
    holdout, train, synth = (commuter_days(rng, n) for n in (120, 150, 90))
    _write_inputs(spark, holdout, train, synth)
    real = summarize_longrange(holdout, N_LOC)
    want = {"real_train": compare_longrange(real, summarize_longrange(train, N_LOC), N_LOC),
            "pategail": compare_longrange(real, summarize_longrange(synth, N_LOC), N_LOC)}
    for mode in ("geo", "paper"):
        tree = spark_config.model_dump(mode="json")
        tree.update(dataset=DATASET, evaluate={"mode": mode, "attacks": False})
        tree["synthesize"] = {**tree.get("synthesize", {}), "n_days": 90}
        cfg = config_from_mapping(tree)
        figures = execute("evaluate", E.run, cfg, argparse.Namespace(attacks=False), spark,
                          f"lr-eval-{mode}")
        assert "long-range" in figures["seconds"]
        got = spark.table("trajpriv_trusted.evaluation").where(
            f"dataset = '{DATASET}' AND run_id = 'lr-eval-{mode}'").toPandas()
        got = {(r.method, r.metric): r.value for r in got.itertuples()}
        for method, values in want.items():
            for metric in LONGRANGE_METRICS:
                assert got[(method, metric)] == values[metric], (mode, method, metric)
            assert (method, "dailyloc") in got  # beside the six
        uniform = {m: got[("uniform_random", m)] for m in LONGRANGE_METRICS}
        assert uniform["tstr_acc1"] < 0.5 * want["pategail"]["tstr_acc1"]
        assert uniform["end_home_gap"] > 0.9

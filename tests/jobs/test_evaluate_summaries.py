"""Evaluate's Spark summaries equal the numpy core's on the same days (jobs/evaluate)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark")
from pyspark.sql import types as T  # noqa: E402

from jobs.evaluate.summaries import summarize_days_pandas, summarize_groups_pandas  # noqa: E402
from udfs.errors import InvalidTrajectoryError  # noqa: E402
from udfs.mobility import compare_summaries, jsd_metrics, metric_bins  # noqa: E402
from udfs.mobility_stats import summarize_days  # noqa: E402

pytestmark = pytest.mark.spark


def synthetic_days(rng: np.random.Generator, n: int, n_loc: int) -> np.ndarray:
    """Days with stays and jumps, plus days of 46, 47 and 48 distinct ids (paper-mode quirks)."""
    start = rng.integers(0, n_loc, (n, 1))
    moves = rng.random((n, 48)) < rng.uniform(0.02, 0.5, (n, 1))
    days = np.where(moves, rng.integers(0, n_loc, (n, 48)), -1)
    days[:, :1] = start
    idx = np.where(days >= 0, np.arange(48), 0)
    days = np.take_along_axis(days, np.maximum.accumulate(idx, axis=1), axis=1)  # forward fill
    spread = np.stack([rng.permutation(n_loc)[:48] for _ in range(3)])
    spread[0, 46:] = spread[0, 0]
    spread[1, 47] = spread[1, 1]
    return np.vstack([days, spread])


def to_df(spark, days: np.ndarray):
    rows = [(i, d.tolist()) for i, d in enumerate(days)]
    schema = T.StructType(
        [
            T.StructField("day_no", T.LongType()),
            T.StructField("slots", T.ArrayType(T.IntegerType())),
        ]
    )
    return spark.createDataFrame(rows, schema)


@pytest.mark.parametrize("mode", ["paper", "geo"])
def test_spark_summaries_equal_numpy(spark, mode):
    rng = np.random.default_rng(12)
    coords = np.column_stack([rng.uniform(30.7, 31.6, 60), rng.uniform(120.9, 121.95, 60)])
    coords[:5] = [[0.0, 0.0], [3.0, 4.0], [0.0, 1.0], [50.0, 50.0], [-30.0, 170.0]]  # far jumps
    days = synthetic_days(rng, 60, 60)
    bins = metric_bins(mode)
    want = summarize_days(days, coords, bins)
    got = summarize_days_pandas(to_df(spark, days), coords, bins, "days")
    # the numpy core itself per batch; Spark adds integers only, so the summaries are equal
    for f in fields(want):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), f.name)


def test_grouped_summaries_equal_each_group_alone(spark):
    rng = np.random.default_rng(13)
    coords = np.column_stack([rng.uniform(39.8, 40.1, 50), rng.uniform(116.2, 116.6, 50)])
    days = synthetic_days(rng, 80, 50)
    group = rng.integers(0, 3, days.shape[0])
    rows = [(int(g), d.tolist()) for g, d in zip(group, days, strict=True)]
    df = spark.createDataFrame(rows, "g long, slots array<int>")
    bins = metric_bins("geo")
    got = summarize_groups_pandas(df, ["g"], coords, bins, "days")
    assert sorted(got) == [(0,), (1,), (2,)]
    for (g,), summary in got.items():
        want = summarize_days(days[group == g], coords, bins)
        assert compare_summaries(summary, want, bins) == pytest.approx(
            compare_summaries(want, want, bins), abs=1e-12)
        for f in fields(want):
            np.testing.assert_array_equal(getattr(summary, f.name), getattr(want, f.name))


def test_invalid_days_are_reported_not_crashed(spark):
    coords = np.array([[0.0, 0.0], [1.0, 1.0]])
    rows = [(0, [0] * 48), (1, [0] * 47), (2, [0] * 47 + [2]), (3, [0] * 47 + [None]), (4, None)]
    df = spark.createDataFrame(rows, "day_no long, slots array<int>")
    with pytest.raises(InvalidTrajectoryError, match=r"real_df: 4 days do not hold exactly 48"):
        summarize_days_pandas(df, coords, metric_bins("paper"), "real_df")


@pytest.mark.realdata
def test_spark_summaries_match_numpy_on_geolife(spark, shared_data: Path):
    folder = shared_data / "geolife_pategail"
    coords = np.loadtxt(folder / "gps")
    real = np.loadtxt(folder / "real.data", dtype=np.int64)[:400]
    test = np.loadtxt(folder / "test.data", dtype=np.int64)[:300]
    bins = metric_bins("paper")
    got = compare_summaries(summarize_days_pandas(to_df(spark, test), coords, bins, "test"),
                            summarize_days_pandas(to_df(spark, real), coords, bins, "real"), bins)
    assert got == pytest.approx(jsd_metrics(test, real, coords, "paper"), abs=1e-12)

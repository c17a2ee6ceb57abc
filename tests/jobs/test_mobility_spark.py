"""Spark and numpy mobility metrics agree on the same data (jobs/mobility_spark.py)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyspark")
from pyspark.sql import types as T  # noqa: E402

from jobs.mobility_spark import (  # noqa: E402
    _bucket,
    jsd_metrics_spark,
    summarize_days_pandas,
    summarize_days_spark,
)
from udfs.errors import InvalidTrajectoryError  # noqa: E402
from udfs.mobility import jsd_metrics, metric_bins  # noqa: E402
from udfs.mobility_bins import bucket_index  # noqa: E402
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


def coords_df(spark, coords: np.ndarray):
    return spark.createDataFrame(
        [(i, float(a), float(b)) for i, (a, b) in enumerate(coords)],
        "loc_id int, lat double, lon double",
    )


def test_bucket_expression_equals_numpy_bucket_index(spark):
    rng = np.random.default_rng(11)
    for spec in (metric_bins("paper").distance, metric_bins("geo").distance):
        e = spec.edges
        some = np.concatenate([e[:3], rng.choice(e, 60), e[-3:]])  # exact edges and neighbours
        values = np.concatenate(
            [
                some,
                np.nextafter(some, -np.inf),
                np.nextafter(some, np.inf),
                rng.uniform(0, e[-1] * 1.2, 100),
                [0.0, 1e300],
            ]
        )
        values = values[values >= 0]
        df = spark.createDataFrame([(float(v),) for v in values], "v double").crossJoin(
            spark.createDataFrame([(e.tolist(),)], "edges array<double>")
        )
        got = [r[0] for r in df.select(_bucket(df.v, spec, df.edges)).collect()]
        assert got == bucket_index(values, spec).tolist()


@pytest.mark.parametrize("engine,mode", [("sql", "paper"), ("sql", "geo"), ("pandas", "geo")])
def test_spark_summaries_equal_numpy(spark, engine, mode):
    rng = np.random.default_rng(12)
    coords = np.column_stack([rng.uniform(30.7, 31.6, 60), rng.uniform(120.9, 121.95, 60)])
    coords[:5] = [[0.0, 0.0], [3.0, 4.0], [0.0, 1.0], [50.0, 50.0], [-30.0, 170.0]]  # far jumps
    days = synthetic_days(rng, 60, 60)
    bins = metric_bins(mode)
    want = summarize_days(days, coords, bins)
    if engine == "sql":
        got = summarize_days_spark(
            to_df(spark, days), coords, mode, bins.distance, bins.radius, "days"
        )
    else:
        got = summarize_days_pandas(to_df(spark, days), coords, bins, "days")
    # pandas engine: the numpy core itself. SQL engine, paper mode: the same IEEE operations in
    # the same order (pairwise means included). SQL engine, geo mode: the JVM's sin/cos/asin may
    # differ from numpy's in the last ulp, so a value within ~1e-13 km of a 0.25 km edge could
    # change bin (none does here; such a flip would move a JSD by about 1/n_values, not 1e-9).
    for f in fields(want):
        np.testing.assert_array_equal(getattr(got, f.name), getattr(want, f.name), f.name)


@pytest.mark.parametrize("engine,mode", [("sql", "paper"), ("pandas", "geo")])
def test_jsd_metrics_spark_matches_numpy(spark, engine, mode):
    rng = np.random.default_rng(13)
    coords = np.column_stack([rng.uniform(39.8, 40.1, 50), rng.uniform(116.2, 116.6, 50)])
    real, gen = synthetic_days(rng, 50, 50), synthetic_days(rng, 40, 50)
    got = jsd_metrics_spark(
        to_df(spark, real), to_df(spark, gen), coords_df(spark, coords), mode, engine=engine
    )
    # equal summaries (above); the driver-side JSDs then run the very same numpy code
    assert got == pytest.approx(jsd_metrics(real, gen, coords, mode), abs=1e-12)


@pytest.mark.parametrize("engine", ["sql", "pandas"])
def test_invalid_days_are_reported_not_crashed(spark, engine):
    coords = np.array([[0.0, 0.0], [1.0, 1.0]])
    rows = [(0, [0] * 48), (1, [0] * 47), (2, [0] * 47 + [2]), (3, [0] * 47 + [None]), (4, None)]
    df = spark.createDataFrame(rows, "day_no long, slots array<int>")
    with pytest.raises(InvalidTrajectoryError, match=r"real_df: 4 days do not hold exactly 48"):
        jsd_metrics_spark(df, df, coords_df(spark, coords), "paper", engine=engine)


@pytest.mark.realdata
def test_spark_sql_matches_numpy_on_geolife(spark, shared_data: Path):
    folder = shared_data / "geolife_pategail"
    coords = np.loadtxt(folder / "gps")
    real = np.loadtxt(folder / "real.data", dtype=np.int64)[:400]
    test = np.loadtxt(folder / "test.data", dtype=np.int64)[:300]
    got = jsd_metrics_spark(
        to_df(spark, test), to_df(spark, real), coords_df(spark, coords), "paper"
    )
    assert got == pytest.approx(jsd_metrics(test, real, coords, "paper"), abs=1e-12)

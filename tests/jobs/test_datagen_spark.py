"""`trajpriv datagen` on Spark: determinism across partitionings, landing files, locations."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from jobs.config import load_config
from jobs.datagen.model import simulate_users
from jobs.datagen.stage import generate, mobility_params, run, station_table
from jobs.datagen.stations import StationIndex
from jobs.harness import execute

pytestmark = pytest.mark.spark


def _cfg(spark_root, *extra: str):
    return load_config(
        None,
        [
            f"storage.root={spark_root}",
            "spark.master=local[2]",
            "dataset=dg_test",
            "datagen.users=40",
            "datagen.days=7",
            "datagen.n_stations=300",
            "datagen.partitions=3",
            *extra,
        ],
    )


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["user", "start"]).reset_index(drop=True)


def test_same_seed_identical_records_whatever_the_partitioning(spark, spark_root):
    cfg = _cfg(spark_root)
    stations, _ = station_table(cfg)
    params = mobility_params(cfg)
    one = generate(spark, stations, params, 40, 1).toPandas()
    four = generate(spark, stations, params, 40, 4).toPandas()
    assert len(one) > 0
    pd.testing.assert_frame_equal(_sorted(one), _sorted(four), check_exact=True)
    # The oracle: the pure kernel on plain pandas, without Spark.
    local = simulate_users(np.arange(40), StationIndex.from_table(stations), params)
    np.testing.assert_array_equal(_sorted(one)["loc_id"], _sorted(local)["loc_id"])
    np.testing.assert_array_equal(
        _sorted(one)["start"].to_numpy("datetime64[us]"), _sorted(local)["start"].to_numpy()
    )


def test_stage_writes_landing_files_and_locations(spark, spark_root):
    cfg = _cfg(spark_root)
    figures = execute("datagen", run, cfg, argparse.Namespace(), spark, run_id="datagen-dg-1")
    landing = spark_root.resolve() / "landing" / "dg_test"
    parts = sorted((landing / "records").glob("part-*.csv"))
    assert parts, "no CSV part files landed"
    records = pd.concat(pd.read_csv(p) for p in parts)
    assert list(records.columns) == ["user", "start", "end", "lat", "lon", "loc_id"]
    assert len(records) == figures["records"]
    assert pd.to_datetime(records["start"], format="%Y-%m-%d %H:%M:%S").notna().all()
    stations = pd.read_csv(landing / "stations.csv")
    assert list(stations.columns) == ["loc_id", "lat", "lon"] and len(stations) == 300
    assert records["loc_id"].isin(stations["loc_id"]).all()
    locs = spark.sql("SELECT count(*) FROM trajpriv_pub.locations WHERE dataset = 'dg_test'")
    assert locs.collect()[0][0] == 300
    for key in ("distinct_median", "rg_median_km", "jump_median_km", "active_share"):
        assert key in figures
    row = spark.sql(
        "SELECT status, figures FROM trajpriv_pub.runs WHERE run_id = 'datagen-dg-1'"
    ).collect()
    assert len(row) == 1 and row[0]["status"] == "ok"
    assert json.loads(row[0]["figures"])["records"] == figures["records"]

    # A rerun replaces, never appends: same files content, same location count.
    again = execute("datagen", run, cfg, argparse.Namespace(), spark)
    assert again["records"] == figures["records"]
    assert locs.collect()[0][0] == 300
    rerun = pd.concat(pd.read_csv(p) for p in sorted((landing / "records").glob("part-*.csv")))
    pd.testing.assert_frame_equal(_sorted(records), _sorted(rerun))
    assert not list(landing.glob("*.tmp-*")) and not list(landing.glob("*.old"))


def test_parquet_output(spark, spark_root):
    cfg = _cfg(spark_root, "dataset=dg_parquet", "datagen.output_format=parquet")
    figures = execute("datagen", run, cfg, argparse.Namespace(), spark)
    landing = spark_root.resolve() / "landing" / "dg_parquet" / "records"
    frame = pd.read_parquet(landing)
    assert len(frame) == figures["records"]
    assert str(frame["start"].dtype).startswith("datetime64")

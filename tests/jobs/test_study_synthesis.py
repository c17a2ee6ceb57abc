"""The synthesis study of `trajpriv study` (jobs/study/synthesis.py) on the shared session: each
method trained at the target epsilon on the training split, scored against the held-out days
beside uniform random days and the real floor, nothing released and nothing charged."""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from jobs.config import load_config
from jobs.report.tables import MOBILITY_METRICS
from tests.models._toy import tiny_overrides, toy_data

pytestmark = [pytest.mark.spark]

DATASET = "synth_study_toy"


@pytest.fixture(scope="module")
def study_cfg(spark, spark_config):
    from jobs.spark.catalog import write_table

    data = toy_data(n_users=8, days=10, seed=3)
    rows = [(DATASET, f"u{u}", dt.date(2014, 6, 1) + dt.timedelta(days=i), d.astype(int).tolist())
            for u, days in enumerate(data.days_per_user) for i, d in enumerate(days)]
    write_table(spark.createDataFrame(rows, "dataset string, user_id string, date date, "
                                            "slots array<int>"),
                "trajpriv_raw.slot_days", partition_by=["dataset", "date"],
                replace={"dataset": DATASET})
    locs = pd.DataFrame({"dataset": DATASET, "loc_id": np.arange(len(data.coords), dtype=np.int32),
                         "lat": data.coords[:, 0], "lon": data.coords[:, 1]})
    write_table(spark.createDataFrame(locs, "dataset string, loc_id int, lat double, lon double"),
                "trajpriv_pub.locations", partition_by=["dataset"], replace={"dataset": DATASET})
    return load_config(None, [f"storage.root={spark_config.storage.root}",
                              "spark.conf.spark.sql.shuffle.partitions=2", f"dataset={DATASET}",
                              "train.rounds=2", "train.target_epsilon=10", "train.blocks=1",
                              *tiny_overrides(seed=7), "synthesize.n_days=200",
                              "study.synthesis_methods=[markov, pategail]",
                              "study.synthesis_seeds=2"])


def test_every_method_is_scored_at_the_target_beside_uniform_and_the_floor(spark, study_cfg):
    from jobs.study.synthesis import PREFIX, run_study

    rows, figures = run_study(spark, study_cfg, seed=5)
    got = pd.DataFrame(rows)
    assert set(got["method"]) == {PREFIX + m for m in
                                  ("real_train", "uniform_random", "markov", "pategail")}
    wide = got.pivot_table(index="method", columns="metric", values="value")
    for m in ("markov", "pategail"):
        row = wide.loc[PREFIX + m]
        assert row[list(MOBILITY_METRICS)].notna().all()
        assert 9.9 < row["epsilon_spent"] <= 10.0 * (1 + 1e-6), m  # equal epsilon, not above
        assert row[[f"{k}_sd" for k in MOBILITY_METRICS]].notna().all()  # two seeds: a spread
    floor, uniform = wide.loc[PREFIX + "real_train"], wide.loc[PREFIX + "uniform_random"]
    assert (floor[list(MOBILITY_METRICS)] < uniform[list(MOBILITY_METRICS)]).sum() >= 5
    assert set(got.loc[got["method"].str.endswith("markov"), "setting"]) == {10.0}
    assert got.loc[got["method"].str.endswith("real_train"), "setting"].isna().all()
    assert figures == {"synthesis_methods": ["markov", "pategail"], "synthesis_epsilon": 10.0,
                       "synthesis_seeds": 2, "synthesis_s": figures["synthesis_s"]}


def test_the_study_stage_writes_trusted_rows_and_charges_nothing(spark, study_cfg):
    """Through `trajpriv study`: the synthesis rows land in the trusted evaluation table next
    to the LDP study's (neither erases the other), the published figures are only the public
    ones, and the ledger has no row of the study run."""
    from jobs.harness import execute
    from jobs.study import stage as S

    cfg = study_cfg.model_copy(update={"study": study_cfg.study.model_copy(
        update={"synthesis_methods": ["markov"], "synthesis_seeds": 1, "mechanisms": []})})
    figures = execute("study", S.run, cfg, argparse.Namespace(), spark, "synth-study-1")
    ev = spark.table("trajpriv_trusted.evaluation").where(
        "run_id = 'synth-study-1'").toPandas()
    assert {"synthesis-study:markov", "synthesis-study:uniform_random",
            "synthesis-study:real_train"} <= set(ev["method"])
    published = spark.sql("SELECT figures FROM trajpriv_pub.runs "
                          "WHERE run_id = 'synth-study-1'").first()["figures"]
    assert "dailyloc" not in published and "synthesis_methods" in published
    assert figures["synthesis_methods"] == ["markov"]
    from jobs.spark.catalog import table_exists

    if table_exists(spark, "trajpriv_raw.privacy_ledger"):  # absent: nothing was ever charged
        ledger = spark.table("trajpriv_raw.privacy_ledger").where("run_id = 'synth-study-1'")
        assert ledger.count() == 0

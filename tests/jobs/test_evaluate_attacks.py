"""`trajpriv evaluate --attacks` on a tiny trained run writes white-box MIA, LiRA and home
re-identification rows to trajpriv_trusted.evaluation, next to the divergences of the same model.

One 2-rank training (TorchDistributor, tens of seconds on a loaded 2-core machine) feeds the
whole module, so the critics the attack reads are merged from two ranks' shards. The figures
themselves are not asserted beyond their ranges: the tiny run (8 users, 2 rounds) is not
expected to leak; tests/models/test_attacks_*.py show the attacks can succeed and stay at
chance on their own oracles.
"""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from jobs import harness
from jobs.config import load_config
from jobs.evaluate import stage as eval_stage
from jobs.ingest.shaping import points_from_slot_days
from jobs.synthesize import stage as synth_stage
from jobs.train import stage as train_stage
from tests.models._attack_toy import walk_data
from udfs.errors import ConfigError
from udfs.longrange import LONGRANGE_METRICS
from udfs.mobility import METRICS

DATASET = "attack_toy"
TINY = [f"train.{k}={v}" for k, v in dict(
    seed=3, episodes_per_round=8, k_nearest=10, critic_hidden=8, critic_batch=16, critic_steps=2,
    policy_hidden=16, loc_dim=4, slot_dim=4, ppo_epochs=1, ppo_minibatch=128).items()]
LOC_OFFSET = 500  # location ids are not row numbers: the attack must map them like training


def _cfg(spark_config, *extra: str):
    return load_config(None, [f"storage.root={spark_config.storage.root}",
                              "spark.conf.spark.sql.shuffle.partitions=2",
                              f"dataset={DATASET}", "train.num_processes=2", "train.blocks=2",
                              "train.rounds=2", "train.noise=0.5", "train.target_epsilon=1e6",
                              *TINY, "synthesize.n_days=16",
                              "synthesize.partitions=2", "evaluate.lira_shadows=2",
                              "evaluate.attack_bootstrap=50", *extra])


@pytest.mark.spark
@pytest.mark.slow
def test_evaluate_attacks_writes_membership_lira_and_home_rows(spark, spark_config):
    from jobs.spark.catalog import write_table

    data = walk_data(n_users=8, days=12, n_loc=60, seed=4)
    days = pd.DataFrame([(f"u{u}", dt.datetime(2014, 6, 1) + dt.timedelta(days=i),
                          (d + LOC_OFFSET).astype(int).tolist())
                         for u, dd in enumerate(data.days_per_user) for i, d in enumerate(dd)],
                        columns=["user_id", "date", "slots"])
    days_df = spark.createDataFrame(days.assign(dataset=DATASET, date=days["date"].dt.date),
                                    "user_id string, date date, slots array<int>, "
                                    "dataset string")
    write_table(days_df.select("dataset", "user_id", "date", "slots"), "trajpriv_raw.slot_days",
                partition_by=["dataset", "date"], replace={"dataset": DATASET})
    loc_ids = np.arange(len(data.coords)) + LOC_OFFSET
    index = np.full(loc_ids.max() + 1, -1)
    index[loc_ids] = np.arange(len(loc_ids))
    points = points_from_slot_days(days, data.coords[:, 0], data.coords[:, 1], index)
    points = points.assign(dataset=DATASET, date=points["date"].dt.date,
                           loc_id=points["loc_id"].astype(np.int32))
    write_table(spark.createDataFrame(
        points[["dataset", "user_id", "ts", "lat", "lon", "loc_id", "date"]],
        "dataset string, user_id string, ts timestamp, lat double, lon double, loc_id int, "
        "date date"), "trajpriv_raw.points", partition_by=["dataset", "date"],
        replace={"dataset": DATASET})
    locs = pd.DataFrame({"dataset": DATASET, "loc_id": loc_ids.astype(np.int32),
                         "lat": data.coords[:, 0], "lon": data.coords[:, 1]})
    write_table(spark.createDataFrame(locs, "dataset string, loc_id int, lat double, lon double"),
                "trajpriv_pub.locations", partition_by=["dataset"], replace={"dataset": DATASET})

    cfg = _cfg(spark_config)
    ns = argparse.Namespace(resume=None, train_run=None, attacks=True)
    trained = harness.execute("train", train_stage.run, cfg, ns, spark, "train-attk")
    run_dir = spark_config.storage.runs_dir / "train-attk"
    assert sorted(p.name for p in (run_dir / "critics").iterdir()) == ["rank0.pt", "rank1.pt"]
    harness.execute("synthesize", synth_stage.run, cfg, ns, spark, "synth-attk")
    figures = harness.execute("evaluate", eval_stage.run, cfg, ns, spark, "eval-attk")
    assert "whitebox_mia_auc" in figures and "lira_policy_auc" in figures

    rows = spark.table("trajpriv_trusted.evaluation").where(
        f"dataset = '{DATASET}' AND run_id = 'eval-attk'").toPandas()
    model = rows[rows["metric"] == "whitebox_mia_auc"]
    assert list(model["method"]) == [cfg.train.method]
    assert model["setting"].iloc[0] == pytest.approx(trained["epsilon"])
    mine = rows[rows["method"] == cfg.train.method].set_index("metric")["value"]
    assert "distance" in mine.index  # the utility of the same model, same method and setting
    for attack in ("whitebox_mia", "lira_policy", "lira_policy_offline", "lira_critic"):
        for fig in ("auc", "balanced_accuracy", "tpr_at_1pct_fpr"):
            lo, v, hi = (mine[f"{attack}_{fig}{s}"] for s in ("_lo", "", "_hi"))
            assert 0 <= lo <= v <= hi <= 1, (attack, fig, lo, v, hi)
        assert mine[f"{attack}_n_eval"] >= 20
    assert mine["attack_users"] == 8 and mine["lira_shadows"] == 2
    raw = rows[rows["method"] == "raw"].set_index("metric")["value"]
    assert 0 <= raw["home_reid_share_within_km"] <= 1
    # the trivial generator beside the synthetic days, on every mobility metric
    uniform = rows[rows["method"] == eval_stage.UNIFORM_BASELINE].set_index("metric")["value"]
    assert set(uniform.index) == set(METRICS) | set(LONGRANGE_METRICS)
    jsds = uniform[list(METRICS)]
    assert ((jsds > 0) & (jsds <= np.log(2) + 1e-9)).all()
    # the long-range figures are JSDs, a share gap and accuracies: all within [0, 1]
    assert ((uniform[list(LONGRANGE_METRICS)] >= 0) & (uniform[list(LONGRANGE_METRICS)] <= 1)).all()


def test_attack_settings_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="evaluate.lira_shadows"):
        load_config(None, ["evaluate.lira_shadows=1"])
    with pytest.raises(ConfigError, match="evaluate.attack_kinds"):
        load_config(None, ["evaluate.attack_kinds=[home, home]"])
    with pytest.raises(ConfigError, match="evaluate.attack_kinds"):
        load_config(None, ["evaluate.attack_kinds=[mia]"])
    cfg = load_config(None, ["evaluate.attack_kinds=[whitebox]", "evaluate.attack_users=50"])
    assert cfg.evaluate.attack_kinds == ["whitebox"] and cfg.evaluate.lira_shadows == 4

"""`trajpriv train` and `trajpriv synthesize` on the shared local[2] session (TorchDistributor,
gloo, 2 processes). Each launch costs tens of seconds on a loaded 2-core machine, so one
uninterrupted run is shared by the tests (module fixture) and they are marked slow.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import stat

import numpy as np
import pandas as pd
import pytest

from jobs import harness
from jobs.config import load_config
from jobs.synthesize import stage as synth_stage
from jobs.train import stage as train_stage
from models.data import TrainData
from models.train import fit
from tests.models._toy import tiny_overrides, toy_data

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DATASET = "train_toy"
TINY = tiny_overrides(seed=7)
LOC_OFFSET = 100  # location ids are not row numbers: the job must map them


def _cfg(spark_config, *extra: str):
    return load_config(None, [f"storage.root={spark_config.storage.root}",
                              "spark.conf.spark.sql.shuffle.partitions=2",
                              f"dataset={DATASET}", "train.num_processes=2", "train.blocks=2",
                              "train.rounds=3", "train.noise=0.5", "train.target_epsilon=1e6",
                              *TINY, "synthesize.n_days=10",
                              "synthesize.partitions=2", *extra])


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"resume": None, "train_run": None, **kw})


@pytest.fixture(scope="module")
def toy_tables(spark, spark_config):
    return write_toy_tables(spark)


def write_toy_tables(spark):
    """The toy users' slot days and their locations (ids offset from rows) in the catalog."""
    from jobs.spark.catalog import write_table

    data = toy_data(n_users=6, days=8)
    rows = [(DATASET, f"u{u}", dt.date(2014, 6, 1) + dt.timedelta(days=i),
             (d + LOC_OFFSET).astype(int).tolist())
            for u, days in enumerate(data.days_per_user) for i, d in enumerate(days)]
    days_df = spark.createDataFrame(rows, "dataset string, user_id string, date date, "
                                          "slots array<int>")
    write_table(days_df, "trajpriv_raw.slot_days", partition_by=["dataset", "date"],
                replace={"dataset": DATASET})
    locs = pd.DataFrame({"dataset": DATASET,
                         "loc_id": np.arange(len(data.coords), dtype=np.int32) + LOC_OFFSET,
                         "lat": data.coords[:, 0], "lon": data.coords[:, 1]})
    write_table(spark.createDataFrame(locs, "dataset string, loc_id int, lat double, lon double"),
                "trajpriv_pub.locations", partition_by=["dataset"], replace={"dataset": DATASET})
    return data


class _Grab(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def trained(spark, spark_config, toy_tables):
    cfg = _cfg(spark_config)
    grab = _Grab()
    logging.getLogger().addHandler(grab)
    try:
        figures = harness.execute("train", train_stage.run, cfg, _args(), spark, "train-toy-a")
    finally:
        logging.getLogger().removeHandler(grab)
    figures["_log"] = "\n".join(grab.lines)  # the driver's INFO log of the stage
    return cfg, figures


def test_two_processes_equal_one_process(spark, trained):
    """Same seed and blocks: the 2-rank Spark job and one-process `fit` on the same training
    days give the same rewards and epsilon (tolerance: tests/models/test_distributed.py)."""
    cfg, figures = trained
    split = spark.table("trajpriv_raw.slot_days_split").where(
        f"dataset = '{DATASET}' AND split = 'train'").toPandas()
    split = split.sort_values(["user_id", "date"])
    days = [np.stack(g.slots.to_numpy()).astype(np.int64) - LOC_OFFSET
            for _, g in split.groupby("user_id", sort=True)]
    data = TrainData(days, toy_data(n_users=6, days=8).coords, sorted(split.user_id.unique()))
    one = fit(train_stage.model_config(cfg, 7), data, blocks=2)
    assert figures["rounds_done"] == one.rounds_done == 3
    for a, b in zip(figures["reward_mean"], [h["reward_mean"] for h in one.history], strict=True):
        assert a == pytest.approx(b, rel=1e-4)
    assert figures["epsilon"] == pytest.approx(one.accountant["epsilon"], rel=1e-9)
    assert figures["num_processes"] == 2
    holdout = spark.table("trajpriv_raw.slot_days_split").where(
        f"dataset = '{DATASET}' AND split = 'holdout'").count()
    assert 0 < holdout < 48  # 30% of 48 days held out, by a keyed hash


def test_runs_table_has_epsilon_and_artefacts(spark, trained, spark_config):
    row = spark.sql("SELECT figures FROM trajpriv_pub.runs WHERE run_id = 'train-toy-a'").first()
    figs = json.loads(row["figures"])
    assert figs["epsilon"] > 0 and figs["delta"] == 1e-5
    run_dir = spark_config.storage.runs_dir / "train-toy-a"
    for name in ("policy.pt", "accountant.json", "history.json", "train_config.json"):
        assert (run_dir / name).exists(), name
    assert "seed" not in json.loads((run_dir / "train_config.json").read_text())


def test_published_figures_are_dp_releases_or_public(spark, trained, spark_config):
    """Issue 15: the runs row held `reward_raw_mean` (exact mean critic rewards) and exact
    per-split day and user counts. Every published figure must be classified in
    jobs.train.stage.PUBLIC_FIGURES; the exact figures and the trained user ids sit in trusted.json
    (mode 0600 in the 0700 run folder) and appear neither in the row nor in the stage's log.
    (The ranks' own INFO lines are checked in tests/models/test_train_privacy.py.)"""
    _, figures = trained
    row = spark.sql("SELECT figures FROM trajpriv_pub.runs WHERE run_id = 'train-toy-a'").first()
    published = json.loads(row["figures"])
    assert set(published) - {"wall_s"} <= set(train_stage.PUBLIC_FIGURES)
    for key in ("reward_raw_mean", "split", "users_per_rank", "critic_loss"):
        assert key not in published
    assert published["privacy_model"] == "central" and published["method"] == "pategail"
    assert published["critic"] == "bce"
    run_dir = spark_config.storage.runs_dir / "train-toy-a"
    trusted_path = run_dir / "trusted.json"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(trusted_path.stat().st_mode) == 0o600
    trusted = json.loads(trusted_path.read_text())
    train_users = spark.table("trajpriv_raw.slot_days_split").where(
        f"dataset = '{DATASET}' AND split = 'train'").select("user_id").distinct().toPandas()
    assert trusted["trained_user_ids"] == sorted(train_users.user_id)
    assert sum(trusted["users_per_rank"]) == published["users"]
    assert trusted["split"]["train"]["days"] > 0
    text = row["figures"] + figures["_log"]
    for rec in trusted["rounds"]:
        raw = rec["reward_raw_mean"]
        assert 0 < raw < 1
        assert repr(raw) not in text and f"{raw:.4f}" not in text
    assert "users_per_rank" not in figures["_log"]
    assert str(trusted["users_per_rank"]) not in figures["_log"]


def test_ranks_as_barrier_tasks_with_local_mode_false(spark, trained, spark_config):
    """train.local_mode=false: TorchDistributor runs each rank as a barrier Spark task (on
    local[2]: two tasks, each starting its own torchrun node) instead of torchrun on the driver;
    the training is the same, so are its figures (same seed, blocks, split and reduction order)."""
    _, whole = trained
    cfg = _cfg(spark_config, "train.local_mode=false")
    figures = harness.execute("train", train_stage.run, cfg, _args(), spark, "train-toy-barrier")
    assert figures["num_processes"] == 2 and figures["rounds_done"] == 3
    assert figures["epsilon"] == whole["epsilon"]
    assert figures["reward_mean"] == pytest.approx(whole["reward_mean"], rel=1e-6)
    assert (spark_config.storage.runs_dir / "train-toy-barrier" / "policy.pt").exists()


def test_failing_rank_fails_the_job_with_its_message(spark, trained, spark_config, tmp_path,
                                                     monkeypatch, capsys):
    monkeypatch.setenv("TRAJPRIV_FAULT_TRAIN", "1:1")
    monkeypatch.setattr("jobs.spark.session.stop_spark", lambda s: None)  # keep the shared session
    conf = tmp_path / "c.yaml"
    conf.write_text(_cfg(spark_config).to_yaml())
    rc = harness.main("train", train_stage.run, ["--config", str(conf), "--run-id", "train-bad"],
                      add_args=train_stage.add_args)
    assert rc == 1
    assert "injected fault on rank 1 at round 1" in capsys.readouterr().err


def test_resume_after_kill_continues_with_the_accountant(spark, trained, spark_config,
                                                         monkeypatch):
    cfg, whole = trained
    monkeypatch.setenv("TRAJPRIV_FAULT_TRAIN", "0:2:exit")  # rank 0 dies hard before round 2
    with pytest.raises(Exception):  # noqa: B017 - TorchDistributor or RankFailedError
        harness.execute("train", train_stage.run, cfg, _args(), spark, "train-toy-killed")
    ckpt = spark_config.storage.runs_dir / "train-toy-killed" / "checkpoint"
    assert json.loads((ckpt / "LATEST.json").read_text())["round"] == 2
    monkeypatch.delenv("TRAJPRIV_FAULT_TRAIN")
    resumed = harness.execute("train", train_stage.run, cfg, _args(resume="train-toy-killed"),
                              spark, "train-toy-resumed")
    assert resumed["resumed_at_round"] == 2 and resumed["rounds_done"] == 3
    assert resumed["epsilon"] == whole["epsilon"]  # the accountant carried rounds 0-1
    assert resumed["reward_mean"] == pytest.approx(whole["reward_mean"], rel=1e-6)



def test_synthesize_schema_rows_and_locations(spark, trained):
    cfg, _ = trained
    ns = argparse.Namespace(resume=None, train_run="train-toy-a")
    figs = harness.execute("synthesize", synth_stage.run, cfg, ns, spark, "synth-toy")
    assert figs["days"] == 10 and figs["privacy_model"] == "central"
    df = spark.table("trajpriv_pub.synthetic_trajectories").where(
        f"dataset = '{DATASET}' AND run_id = 'train-toy-a'")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("model", "string"), ("epsilon", "double"), ("delta", "double"),
        ("privacy_model", "string"), ("traj_no", "bigint"),
        ("slots", "array<int>"), ("dataset", "string"), ("run_id", "string")]
    pdf = df.toPandas().sort_values("traj_no")
    assert pdf.traj_no.tolist() == list(range(10))
    slots = np.stack(pdf.slots.to_numpy())
    assert slots.shape == (10, 48)
    assert set(np.unique(slots)) <= set(range(LOC_OFFSET, LOC_OFFSET + 60))
    points = spark.table("trajpriv_pub.synthetic_points").where(
        f"dataset = '{DATASET}' AND run_id = 'train-toy-a'")
    assert points.count() == 480 and points.where("lat IS NULL").count() == 0
    again = harness.execute("synthesize", synth_stage.run, cfg, ns, spark, "synth-toy-2")
    assert again["days"] == 10  # idempotent: same rows replaced, not appended
    spark.catalog.refreshTable("trajpriv_pub.synthetic_trajectories")  # files were replaced
    pdf2 = spark.table("trajpriv_pub.synthetic_trajectories").where(
        f"dataset = '{DATASET}' AND run_id = 'train-toy-a'").toPandas().sort_values("traj_no")
    assert len(pdf2) == 10
    assert np.array_equal(np.stack(pdf2.slots.to_numpy()), slots)


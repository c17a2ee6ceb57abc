"""`trajpriv train` with `train.method: markov` and with `train.pretrain: markov` on the shared
local[2] session, and `trajpriv synthesize` of a markov run: the stage's plan, its ledger
charges and the sharded fit. The toy tables and config are test_train_spark.py's (its own file
so the two run on different workers)."""

from __future__ import annotations

import argparse
import json
import stat

import numpy as np
import pytest

from jobs import harness
from jobs.synthesize import stage as synth_stage
from jobs.train import stage as train_stage
from tests.jobs.test_train_spark import DATASET, LOC_OFFSET, _args, _cfg, write_toy_tables

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def toy_tables(spark):
    return write_toy_tables(spark)

# --- train.method: markov (jobs/train/markov.py) ----------------------------------------------

@pytest.fixture(scope="module")
def markov_run(spark, spark_config, toy_tables):
    cfg = _cfg(spark_config, "train.method=markov", "train.target_epsilon=4")
    figures = harness.execute("train", train_stage.run, cfg, _args(), spark, "train-toy-markov")
    return cfg, figures


def test_markov_run_publishes_only_classified_figures_and_charges_its_plan(spark, markov_run,
                                                                            spark_config):
    """The markov method through the train stage: every figure classified, epsilon at most the
    target, and each trained user charged `planned` at the target then `spent` at the
    accountant's epsilon (the ledger equals the plan)."""
    from jobs.spark.ledger import training_per_user

    _, figures = markov_run
    row = spark.sql("SELECT figures FROM trajpriv_pub.runs "
                    "WHERE run_id = 'train-toy-markov'").first()
    published = json.loads(row["figures"])
    assert set(published) - {"wall_s"} <= set(train_stage.PUBLIC_FIGURES)
    assert published["method"] == "markov" and published["privacy_model"] == "central"
    assert 3.9 < published["epsilon"] <= 4.0
    run_dir = spark_config.storage.runs_dir / "train-toy-markov"
    assert stat.S_IMODE((run_dir / "markov.npz").stat().st_mode) == 0o600
    trusted = json.loads((run_dir / "trusted.json").read_text())
    ledger = spark.table("trajpriv_raw.privacy_ledger").where(
        "run_id = 'train-toy-markov'").toPandas()
    assert set(ledger.state) == {"planned", "spent"}
    assert set(ledger.mechanism) == {"markov:central"}
    spent = ledger[ledger.state == "spent"]
    assert sorted(spent.user_id) == trusted["trained_user_ids"]
    assert np.allclose(spent.epsilon, published["epsilon"])
    assert np.allclose(ledger[ledger.state == "planned"].epsilon, 4.0)
    per_user = training_per_user(spark, DATASET).toPandas()
    assert len(per_user) == len(trusted["trained_user_ids"])


def test_markov_sharded_fit_equals_the_in_process_fit(spark, markov_run, spark_config,
                                                     toy_tables, tmp_path):
    """Summing per-shard statistics in Spark tasks and releasing once gives the model the
    in-process `fit_markov` gives on the same users with the same seed."""
    from jobs.spark.split import load_locations
    from jobs.train import markov
    from jobs.train.data import stage_shards
    from models.markov import fit_markov, move_cells, user_stats

    cfg, _ = markov_run
    meta = stage_shards(spark, cfg, tmp_path / "stage", 2)
    loc_ids, coords = load_locations(spark, DATASET)
    cell_of = move_cells(coords, cfg.train.markov.cell_depth)
    sharded = markov.sharded_stats(spark, tmp_path / "stage", loc_ids, coords, cell_of, 2)
    split = spark.table("trajpriv_raw.slot_days_split").where(
        f"dataset = '{DATASET}' AND split = 'train'").toPandas().sort_values(["user_id", "date"])
    days = [np.searchsorted(loc_ids, np.stack(g.slots.to_numpy()))
            for _, g in split.groupby("user_id", sort=True)]
    assert len(days) == meta["n_users"]
    exact = user_stats(days, cell_of, len(coords))
    for name in ("starts", "actions", "transitions", "destinations"):
        assert np.allclose(getattr(sharded, name), getattr(exact, name)), name
    model, _ = markov.fit(spark, cfg, tmp_path / "stage", seed=11)
    direct = fit_markov(days, coords, 4.0, cfg.train.delta, 11)
    assert np.allclose(model.action_probs, direct.action_probs)
    assert np.allclose(model.start_probs, direct.start_probs)


def test_markov_run_synthesizes_days_over_its_locations(spark, markov_run):
    cfg, _ = markov_run
    ns = argparse.Namespace(resume=None, train_run="train-toy-markov")
    figs = harness.execute("synthesize", synth_stage.run, cfg, ns, spark, "synth-toy-markov")
    assert figs["days"] == 10 and figs["model"] == "markov"
    pdf = spark.table("trajpriv_pub.synthetic_trajectories").where(
        f"dataset = '{DATASET}' AND run_id = 'train-toy-markov'").toPandas()
    assert set(pdf.model) == {"markov"}
    slots = np.stack(pdf.slots.to_numpy())
    assert slots.shape == (10, 48)
    assert set(np.unique(slots)) <= set(range(LOC_OFFSET, LOC_OFFSET + 60))


# --- train.pretrain: markov through the stage (models/pretrain.py) ------------------------------

@pytest.fixture(scope="module")
def pretrained_run(spark, spark_config, toy_tables):
    cfg = _cfg(spark_config, "train.method=pategail++", "train.mechanism=gaussian",
               "train.beta=0", "train.pretrain=markov", "train.markov_share=0.5",
               "train.bc_epochs=1", "train.bc_days=50", "train.rounds=2",
               "train.target_epsilon=8", "train.noise_for_target=true")
    figures = harness.execute("train", train_stage.run, cfg, _args(), spark, "train-toy-pre")
    return cfg, figures


def test_pretrained_run_spends_its_plan_and_the_ledger_says_so(spark, pretrained_run,
                                                              spark_config):
    """The Markov release and the rounds in one plan: the calibrated noise makes the plan
    (models.budget.planned_epsilon, Markov release included) reach the target, the run spends
    exactly that plan, and each trained user is charged the target `planned`, then the spent
    epsilon: one release id, one charge per user and state."""
    import dataclasses

    from jobs.spark.split import load_locations
    from models.budget import planned_epsilon

    cfg, figures = pretrained_run
    assert figures["rounds_done"] == 2
    assert not any("planned rounds" in w for w in figures["warnings"])
    mc = dataclasses.replace(train_stage.model_config(cfg, 0), noise=figures["noise"])
    _, coords = load_locations(spark, DATASET)
    plan = planned_epsilon(mc, figures["users"], coords, 2)
    assert 7.9 < plan <= 8.0
    assert figures["epsilon"] == pytest.approx(plan, rel=1e-6)
    ledger = spark.table("trajpriv_raw.privacy_ledger").where(
        "run_id = 'train-toy-pre'").toPandas()
    assert set(ledger.release_id) == {"train-toy-pre"}
    assert ledger.groupby(["user_id", "state"]).size().eq(1).all()
    assert np.allclose(ledger[ledger.state == "planned"].epsilon, 8.0)
    assert np.allclose(ledger[ledger.state == "spent"].epsilon, figures["epsilon"])
    assert len(ledger[ledger.state == "spent"]) == figures["users"]

"""Driver-side pieces of the collect stage that need no JVM."""

from __future__ import annotations

import argparse
import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from jobs.collect import stage as C
from jobs.collect.metrics import COUNT_FIELDS, counts_fn, counts_of_row
from jobs.config import load_config
from tests.metrics_oracle import reference_figures
from udfs.space import LocationSpace


def test_release_ids_never_repeat_for_a_reused_run_id():
    from jobs.spark.ledger import new_release_id

    assert new_release_id("collect-x", set()) == "collect-x.r0"
    assert new_release_id("collect-x", {"collect-x.r0", "collect-x.r1"}) == "collect-x.r2"
    assert new_release_id("dag run/1", set()) == "dag_run_1.r0"  # a partition-safe name


def test_the_default_budget_means_something_and_uniform_is_never_published():
    from udfs.errors import ConfigError

    cfg = load_config("conf/default.yaml")
    assert cfg.privacy.unit == "user"
    assert cfg.privacy.budget <= 10 and cfg.privacy.window_days == 7
    assert cfg.collect.epsilon <= cfg.privacy.budget
    # one published setting, not a sweep: a trajectory is released once by default
    assert not hasattr(cfg.collect, "epsilons")
    with pytest.raises(ConfigError, match="collect.mechanism"):
        load_config(None, ["collect.mechanism=uniform"])  # charged 0, reveals metadata
    with pytest.raises(ConfigError, match="collect.user_budget: unknown key"):
        load_config(None, ["collect.user_budget=1000"])


def test_fresh_flag_is_added_once_to_a_merged_parser():
    parser = argparse.ArgumentParser()
    C.add_args(parser)
    C.add_args(parser)  # `trajpriv run` merges every stage's arguments into one parser
    assert parser.parse_args(["--fresh"]).fresh is True
    assert parser.parse_args([]).fresh is False


def _pairs_batches(rng, space, groups, n_traj, batch_rows):
    """Random (true, perturbed) pairs of several groups as Arrow batches of `batch_rows`
    rows (groups interleaved), and the pairs per group as lists of arrays."""
    lens = rng.integers(1, 9, n_traj)
    true = [rng.integers(0, space.n, n) for n in lens]
    pert = [np.where(rng.random(n) < 0.3, t, rng.integers(0, space.n, n))
            for t, n in zip(true, lens, strict=True)]
    group = rng.integers(0, len(groups), n_traj)
    table = pa.table({
        "mechanism": [groups[k][0] for k in group], "epsilon": [groups[k][1] for k in group],
        "true_ids": pa.array([t.tolist() for t in true], pa.list_(pa.int32())),
        "pert_ids": pa.array([p.tolist() for p in pert], pa.list_(pa.int32()))})
    by_group = {groups[k]: ([true[i] for i in np.flatnonzero(group == k)],
                            [pert[i] for i in np.flatnonzero(group == k)])
                for k in range(len(groups))}
    return table.to_batches(max_chunksize=batch_rows), by_group


@pytest.mark.parametrize("batch_rows", [1, 7, 1000])
def test_the_metrics_task_counts_sum_to_the_reference_figures(batch_rows):
    """The Spark task function (`counts_fn`, run here on Arrow batches without a JVM): counts
    per group from batches of any size, added over two 'tasks', give the numpy definitions'
    figures for each group."""
    rng = np.random.default_rng(batch_rows)
    space = LocationSpace.from_latlon(41.8 + rng.random(60) * 0.2, -87.7 + rng.random(60) * 0.2)
    groups = [("atp", 1.0), ("tp", 1.0), ("atp", 4.0)]
    batches, by_group = _pairs_batches(rng, space, groups, 300, batch_rows)
    deltas = [0.5, 2.0]
    fn = counts_fn(["mechanism", "epsilon"], space.coords, deltas)
    half = len(batches) // 2
    out = [b for task in (batches[:half], batches[half:]) for b in fn(iter(task))]
    names = ["mechanism", "epsilon"] + [f.name for f in COUNT_FIELDS]
    totals = {}
    for b in out:
        assert b.schema.names == names
        for r in b.to_pylist():
            part = counts_of_row(r)
            key = (r["mechanism"], r["epsilon"])
            totals[key] = totals[key] + part if key in totals else part
    assert set(totals) == set(groups)
    for key, (true, pert) in by_group.items():
        got = totals[key].figures(space.diameter, deltas, 0.2)
        want = reference_figures(true, pert, space, deltas, 0.2)
        assert got.keys() == want.keys()
        for name, value in want.items():
            assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-15, nan_ok=True), name
    assert list(fn(iter([]))) == []  # an empty task writes no row


def test_the_metrics_task_refuses_pairs_of_different_lengths():
    from udfs.errors import InvalidTrajectoryError

    space = LocationSpace.from_latlon([41.8, 41.9, 42.0], [-87.7, -87.6, -87.5])
    batch = pa.record_batch({"mechanism": ["atp"], "epsilon": [1.0],
                             "true_ids": pa.array([[0, 1]], pa.list_(pa.int32())),
                             "pert_ids": pa.array([[2]], pa.list_(pa.int32()))})
    with pytest.raises(InvalidTrajectoryError, match="different lengths"):
        list(counts_fn(["mechanism", "epsilon"], space.coords, [1.0])(iter([batch])))


def test_window_order_is_validated():
    from udfs.errors import ConfigError

    with pytest.raises(ConfigError, match="window_end 2014-06-01 is before"):
        load_config(None, ["collect.window_start=2014-06-02", "collect.window_end=2014-06-01"])
    assert load_config(None, ["collect.window_start=2014-06-02"]).collect.window_start == (
        dt.date(2014, 6, 2))


def test_user_marks_count_each_user_and_each_releasing_user_once():
    import pandas as pd

    plan = pd.DataFrame({"user_id": ["a", "a", "a", "b", "c", "c"],
                         "released": [False, True, True, False, True, False]})
    marks = C._user_marks(plan)
    assert marks["first_of_user"].tolist() == [True, False, False, True, True, False]
    assert marks["first_released_of_user"].tolist() == [False, True, False, False, True, False]
    none = C._user_marks(plan.assign(released=False))
    assert not none["first_released_of_user"].any()

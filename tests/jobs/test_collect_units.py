"""Driver-side pieces of the collect stage that need no JVM."""

from __future__ import annotations

import argparse
import datetime as dt
import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from jobs.collect import stage as C
from jobs.collect.metrics import _tau_b
from jobs.config import load_config


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


@pytest.mark.parametrize("seed", range(5))
def test_tau_b_from_pair_sums_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 5, 40)
    y = rng.integers(0, 5, 40)
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
            for i in range(40) for j in range(i + 1, 40))

    def ties(v):
        return sum(c * (c - 1) // 2 for c in np.unique(v, return_counts=True)[1])

    assert _tau_b(int(s), 40, ties(x), ties(y)) == pytest.approx(
        kendalltau(x, y).statistic, rel=1e-12)


def test_tau_b_is_nan_for_a_constant_side():
    assert math.isnan(_tau_b(0, 5, 10, 3))
    assert math.isnan(_tau_b(0, 1, 0, 0))


def test_window_order_is_validated():
    from udfs.errors import ConfigError

    with pytest.raises(ConfigError, match="window_end 2014-06-01 is before"):
        load_config(None, ["collect.window_start=2014-06-02", "collect.window_end=2014-06-01"])
    assert load_config(None, ["collect.window_start=2014-06-02"]).collect.window_start == (
        dt.date(2014, 6, 2))

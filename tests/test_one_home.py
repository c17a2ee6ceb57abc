"""Each privacy fact has one home: the copies that used to drift are derived from it.

Source-level checks (no Spark session): they read the code the facts live in, or compare the
derived values with their home.
"""

from __future__ import annotations

import ast
import datetime as dt
import math
from pathlib import Path
from typing import get_args

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _sources(*packages: str):
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path, ast.parse(path.read_text(), filename=str(path))


def test_window_start_has_one_rule():
    from udfs.collect_kernel import window_start_of
    from udfs.collect_plan import EPOCH, UNIX_EPOCH, BudgetPolicy, window_start_days

    dates = [EPOCH + dt.timedelta(days=k) for k in range(-40, 40, 3)]
    for window_days in (1, 3, 7, 30):
        policy = BudgetPolicy(10.0, window_days)
        vec = policy.window_starts(dates).astype(object)
        days = window_start_days([(d - UNIX_EPOCH).days for d in dates], window_days)
        for d, v, n in zip(dates, vec, days, strict=True):
            assert window_start_of(d, window_days) == v == UNIX_EPOCH + dt.timedelta(int(n))
            assert (v - EPOCH).days % window_days == 0 and v <= d


def test_the_window_epoch_is_spelled_once():
    """A date literal 1970-01-05 (the window epoch) appears only in its home."""
    found = []
    for path, tree in _sources("jobs", "udfs", "models"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and len(node.args) == 3
                    and all(isinstance(a, ast.Constant) for a in node.args)
                    and [a.value for a in node.args] == [1970, 1, 5]):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == ["udfs/collect_plan.py:" + found[0].split(":")[1]], found


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf, -math.inf, 1e-12, 1.0, 100.0,
                                 100.5, 1e6])
def test_one_epsilon_rule(eps):
    from pydantic import ValidationError

    from jobs.config import CollectConfig
    from udfs.budget import MAX_CONFIG_EPSILON, check_epsilon, valid_epsilon
    from udfs.collect_kernel import Setting
    from udfs.errors import InvalidParameterError

    def accepts(fn) -> bool:
        try:
            fn()
        except (InvalidParameterError, ValidationError):
            return False
        return True

    assert accepts(lambda: check_epsilon(eps)) == valid_epsilon(eps)
    assert accepts(lambda: Setting("tp", eps)) == valid_epsilon(eps)
    assert (accepts(lambda: CollectConfig(epsilon=eps))
            == valid_epsilon(eps, at_most=MAX_CONFIG_EPSILON))


def test_config_mechanisms_and_options_come_from_the_registry():
    from jobs.collect.stage import mechanism_options
    from jobs.config import CollectConfig, Mechanism, PublishedMechanism
    from udfs.collect import (
        INPUT_FREE,
        MECHANISM_OPTIONS,
        MECHANISMS,
        PUBLISHED_MECHANISMS,
        TrajectoryMechanism,
        make_mechanism,
    )
    from udfs.collect_kernel import Setting
    from udfs.space import LocationSpace

    assert get_args(Mechanism) == MECHANISMS
    assert get_args(PublishedMechanism) == PUBLISHED_MECHANISMS
    assert set(PUBLISHED_MECHANISMS) | set(INPUT_FREE) == set(MECHANISMS)
    assert set(mechanism_options(CollectConfig())) <= set(MECHANISM_OPTIONS)
    space = LocationSpace.from_latlon(np.array([31.2, 31.21, 31.3]),
                                      np.array([121.4, 121.41, 121.5]))
    for name in MECHANISMS:
        mech = make_mechanism(space, 1.0, name)
        assert isinstance(mech, TrajectoryMechanism)
        assert mech.record(2).spent <= 1.0
        assert Setting(name, 1.0).charge == (0.0 if name in INPUT_FREE else 1.0)


def test_publish_choices_and_defaults_have_one_home():
    from jobs.config import PublishConfig
    from udfs.collect_kernel import PUBLISH_CHOICES, PublishOptions

    for name in PUBLISH_CHOICES:
        field = PublishConfig.model_fields[name]
        assert get_args(field.annotation) == PUBLISH_CHOICES[name]
        assert field.default == getattr(PublishOptions(), name)
    assert not hasattr(PublishOptions, "pseudonym_message")
    assert not hasattr(PublishOptions, "published_dates")


def test_stage_list_has_one_home():
    import jobs.cli
    import jobs.config

    assert jobs.cli.STAGES is jobs.config.STAGES
    stages = set(jobs.config.STAGES)
    copies = []
    for path, tree in _sources("jobs"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List) and len(node.elts) >= 3:
                names = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(names) == len(node.elts) and set(names) <= stages:
                    copies.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert [c.split(":")[0] for c in copies] == ["jobs/config/pipeline.py"], copies


def test_ledger_rows_are_built_in_the_ledger_only():
    """Only `jobs.spark.ledger` spells ledger columns as literals of a row."""
    spelled = []
    for path, tree in _sources("jobs"):
        if path.name == "ledger.py":
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "alias" and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in ("recorded_at", "state")):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not spelled, spelled


def test_one_region_rule():
    from udfs.sampling import in_region, region_rows
    from udfs.space import LocationSpace

    rng = np.random.default_rng(3)
    space = LocationSpace.from_latlon(31.0 + rng.random(40) * 0.2, 121.0 + rng.random(40) * 0.2)
    anchor = rng.integers(0, space.n, 25)
    radius = np.r_[0.0, rng.random(23) * 10.0, space.pair_dist(anchor[-1:], 3)[0]]
    dense = region_rows(space, anchor, radius)
    pointwise = in_region(space, anchor[:, None], radius[:, None], np.arange(space.n)[None, :])
    assert np.array_equal(dense, pointwise)
    assert dense[np.arange(anchor.size), anchor].all()

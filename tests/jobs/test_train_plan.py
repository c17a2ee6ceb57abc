"""The train stage's plan, said before the run (no Spark): with the default config's settings
the planned rounds must fit the target epsilon for the users the run will train, or the run
says after which round it stops and which noise would fit them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jobs.config import load_config
from jobs.train import stage as train_stage
from models.budget import planned_epsilon

COORDS = np.random.default_rng(0).uniform([31.0, 121.2], [31.4, 121.6], size=(400, 2))


DEFAULT = Path(__file__).resolve().parents[2] / "conf" / "default.yaml"


def _plan(tmp_path, *extra: str, users: int = 240, config: Path | None = None):
    cfg = load_config(config, [f"storage.root={tmp_path}", *extra])
    mc = train_stage.model_config(cfg, seed=1)
    return mc, *train_stage.plan_rounds(cfg, mc, users, COORDS)


def test_a_plan_that_overruns_its_target_says_where_it_stops(tmp_path):
    """The defect: `make run` planned 10 rounds and stopped at round 8 on budget, unannounced."""
    mc, planned, notes = _plan(tmp_path, "train.method=pategail", "train.noise=0.2",
                               "train.rounds=10", "train.target_epsilon=10")
    rounds = train_stage.affordable_rounds(mc, 240, COORDS)
    assert planned is mc and 0 < rounds < 10
    assert planned_epsilon(mc, 240, COORDS, rounds) <= 10 < planned_epsilon(mc, 240, COORDS,
                                                                         rounds + 1)
    assert len(notes) == 1 and f"pays for {rounds} of the 10 planned rounds" in notes[0]
    assert "train.noise_for_target" in notes[0]


def test_noise_for_target_fits_every_planned_round(tmp_path):
    mc, planned, notes = _plan(tmp_path, "train.method=pategail", "train.noise=0.2",
                               "train.rounds=10", "train.target_epsilon=10",
                               "train.noise_for_target=true")
    assert notes == [] and planned.noise > mc.noise
    assert planned_epsilon(planned, 240, COORDS, 10) <= 10
    assert planned_epsilon(planned, 240, COORDS, 10) > 9.9  # the smallest noise that fits


def test_the_default_config_plans_what_it_does(tmp_path):
    """`make run`'s config: every planned round of its learned settings fits its target for
    the users it trains (about 300 users, a few held out by days only)."""
    for users in (250, 300):
        mc, planned, notes = _plan(tmp_path, "train.method=pategail", users=users,
                                   config=DEFAULT)
        assert notes == [], notes
        assert planned_epsilon(planned, users, COORDS, planned.rounds) <= mc.target_epsilon

"""Utility shape on the paper's datasets (needs ../shared/data; skipped without it)."""

from __future__ import annotations

import numpy as np
import pytest

from udfs import metrics
from udfs.collect import perturb
from udfs.trajectories import load_ldp_dataset

pytestmark = pytest.mark.realdata


@pytest.mark.parametrize("name, eps", [("cps", 4.0), ("cps", 1.0), ("chi", 1.0)])
def test_atp_beats_exp_and_uniform_is_worst(shared_data, name, eps):
    space, trajs = load_ldp_dataset(shared_data, name)
    rng = np.random.default_rng(0)
    sample = [trajs[i] for i in rng.choice(len(trajs), size=min(4000, len(trajs)),
                                           replace=False)]
    ne = {m: metrics.ne(sample, perturb(sample, space, eps, m, 1), space)
          for m in ("atp", "exp", "uniform")}
    assert ne["atp"] < ne["exp"] < ne["uniform"], ne


def test_chi_diameter_matches_readme(shared_data):
    space, trajs = load_ldp_dataset(shared_data, "chi")
    assert space.n == 1000 and space.diameter == pytest.approx(50.65, abs=0.01)
    assert max(len(t) for t in trajs) == 8

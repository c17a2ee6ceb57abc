"""`expert_features` (the training setup's labelling of real days) equals replaying the days
through the environment (`expert_trajectories`), and the per-user padding puts each user's
pairs in its own row. Before it, the setup stepped the environment and kept all 47 states of
every day of a rank: minutes and gigabytes at Telecom scale (the launch cost of issue 16)."""

from __future__ import annotations

import numpy as np
import torch

from models.env import MobilityEnv
from models.features import expert_features, expert_features_per_user, expert_trajectories
from tests.models._toy import toy_data
from tests.models.test_env import _random_days


def _days() -> np.ndarray:
    days = _random_days(300, 600, seed=3)
    days[:5] = days[:5, :1]  # at home all day
    days[5] = np.arange(48)  # a new location every slot
    days[6] = np.r_[[7] * 10, [8] * 10, [7] * 10, [9] * 18]  # leave home, come back, leave
    return days


def test_expert_features_equal_the_replayed_trajectories():
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=20)
    days = _days()
    assert torch.equal(expert_features(env, days), expert_trajectories(env, days).features)


def test_expert_features_per_user_pads_each_users_pairs_in_order():
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=20)
    days = _days()
    ref = expert_trajectories(env, days).features
    cuts = [0, 7, 8, 100, 600]
    per_user = [days[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]
    out, counts = expert_features_per_user(env, per_user, chunk_days=50)  # chunks cross users
    assert counts.tolist() == [(b - a) * 47 for a, b in zip(cuts, cuts[1:], strict=False)]
    assert out.shape == (4, 500 * 47, ref.shape[-1])
    for u, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        flat = ref[a:b].reshape(-1, ref.shape[-1])
        assert torch.equal(out[u, :len(flat)], flat)
        assert not out[u, len(flat):].any()

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.env import EXPLORE, HOME, RETURN, STAY, MobilityEnv
from models.features import FEATURE_DIM, expert_trajectories
from tests.models._toy import toy_data
from udfs.errors import InvalidTrajectoryError


def _random_days(n_loc: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    days = np.empty((n, 48), dtype=np.int64)
    days[:, 0] = rng.integers(n_loc, size=n)
    for t in range(1, 48):
        move = rng.random(n) < 0.3
        days[:, t] = np.where(move, rng.integers(n_loc, size=n), days[:, t - 1])
        back = rng.random(n) < 0.1  # revisit an earlier slot's location
        days[back, t] = days[back, rng.integers(0, t)]
    return days


def test_replaying_expert_actions_reproduces_the_days():
    data = toy_data(n_loc=300)
    env = MobilityEnv(data.coords, k_nearest=20)  # small K: many targets outside the K nearest
    days = _random_days(300, 200, seed=1)
    traj = expert_trajectories(env, days)
    assert torch.equal(traj.days, torch.as_tensor(days))
    # every labelled action is valid in the state it was taken in
    assert bool(traj.mask.gather(2, traj.actions.unsqueeze(-1)).all())
    assert traj.features.shape == (200, 47, FEATURE_DIM)
    assert env.outside_k_fraction(days) > 0.5  # the explicit target handles those jumps


def test_label_definitions():
    env = MobilityEnv(toy_data().coords, k_nearest=10)
    day = np.array([[5, 5, 7, 8, 7, 5, 9] + [9] * 41])
    acts = expert_trajectories(env, day).actions[0, :6].tolist()
    assert acts == [STAY, EXPLORE, EXPLORE, RETURN, HOME, EXPLORE]


def test_generated_targets_follow_the_action_definitions():
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=30)
    g = torch.Generator().manual_seed(0)
    state = env.reset(torch.randint(300, (256,), generator=g))
    for _ in range(47):
        mask = env.action_mask(state)
        a = torch.multinomial(mask.float(), 1, generator=g).squeeze(1)
        tgt = env.sample_targets(state, a, g)
        nxt = env.step(state, a, tgt)
        relabel, _ = env.label(state, nxt.loc)
        # a generated move is labelled as the action that produced it (stay at home = stay)
        assert torch.equal(relabel, a)
        exp = a == EXPLORE
        assert bool((env.nearest[state.loc[exp]] == tgt[exp, None]).any(1).all())
        state = nxt
    assert int(state.slot[0]) == 47


def test_explore_rank_distribution():
    """P(k) ~ k^-0.6 from a fresh state (nothing visited but the start).
    False-failure rate: chi-square-like bound at 6 sd per bucket, < 1e-6."""
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=50)
    g = torch.Generator().manual_seed(3)
    n = 20000
    state = env.reset(torch.zeros(n, dtype=torch.long))
    tgt = env.sample_targets(state, torch.full((n,), EXPLORE), g)
    k = (env.nearest[0][None, :] == tgt[:, None]).float().argmax(1)
    p = np.arange(1, 51) ** -0.6
    p /= p.sum()
    counts = np.bincount(k.numpy(), minlength=50)
    sd = np.sqrt(n * p * (1 - p))
    assert np.all(np.abs(counts - n * p) < 6 * sd)


def test_bad_days_raise():
    env = MobilityEnv(toy_data().coords)
    with pytest.raises(InvalidTrajectoryError, match="location ids"):
        env.check_days(np.full((1, 48), 10_000))
    with pytest.raises(InvalidTrajectoryError, match=r"\(n, 48\)"):
        env.check_days(np.zeros((2, 47)))


@pytest.mark.realdata
def test_geolife_days_replay(shared_data):
    from models.data import load_geolife

    data, real, _ = load_geolife(shared_data / "geolife_pategail")
    env = MobilityEnv(data.coords)
    traj = expert_trajectories(env, real[:500])
    assert torch.equal(traj.days, torch.as_tensor(real[:500]))

from __future__ import annotations

import torch

from models.config import TrainConfig
from models.env import MobilityEnv
from models.policy import PolicyNet, ValueNet
from models.ppo import Experience, PPOSettings, gae, ppo_update, rollout
from tests.models._toy import toy_data


def _setup(seed: int = 0):
    env = MobilityEnv(toy_data().coords, k_nearest=10)
    torch.manual_seed(seed)
    pol, val = PolicyNet(env.n_locations, 8, 4, 32), ValueNet(env.n_locations, 8, 4, 32)
    g = torch.Generator().manual_seed(seed)
    ro = rollout(pol, val, env, torch.randint(env.n_locations, (16,), generator=g), g)
    return env, pol, val, ro, g


def test_gae_matches_hand_computation():
    r = torch.tensor([[1.0, 0.0, 2.0]])
    v = torch.tensor([[0.5, 0.2, 0.1]])
    g, lam = 0.9, 0.8
    d2 = 2.0 - 0.1
    d1 = 0.0 + g * 0.1 - 0.2
    d0 = 1.0 + g * 0.2 - 0.5
    a2, a1 = d2, d1 + g * lam * d2
    a0 = d0 + g * lam * a1
    adv, ret = gae(r, v, g, lam)
    assert torch.allclose(adv, torch.tensor([[a0, a1, a2]]))
    assert torch.allclose(ret, adv + v)


def test_ratio_is_one_first_then_moves():
    env, pol, val, ro, g = _setup()
    opt = torch.optim.Adam(list(pol.parameters()) + list(val.parameters()), lr=1e-2)
    rewards = torch.rand(ro.logp.shape, generator=g)
    settings = PPOSettings.of(TrainConfig(ppo_epochs=3, ppo_minibatch=10_000))
    st = ppo_update(pol, val, opt, Experience(ro, rewards, env), settings, g)
    assert st["ratio_maxdev"][0] < 1e-6  # stored old log-probs: exactly the rollout policy
    assert st["ratio_maxdev"][1] > 1e-4 and st["ratio_maxdev"][2] > 1e-4


def test_clipping_engages_with_a_large_step():
    env, pol, val, ro, g = _setup(1)
    opt = torch.optim.SGD(list(pol.parameters()) + list(val.parameters()), lr=5.0)
    rewards = torch.rand(ro.logp.shape, generator=g) * 10
    st = ppo_update(pol, val, opt, Experience(ro, rewards, env),
                    PPOSettings.of(TrainConfig(ppo_epochs=3, ppo_minibatch=10_000,
                                                max_grad_norm=100.0)), g)
    assert st["clip_frac"][0] == 0.0
    assert max(st["clip_frac"][1:]) > 0.05


def test_rollout_respects_masks_and_is_seeded():
    env, pol, val, ro, _ = _setup(2)
    assert bool(ro.traj.mask.gather(2, ro.traj.actions.unsqueeze(-1)).all())
    _, _, _, ro2, _ = _setup(2)
    assert torch.equal(ro.traj.days, ro2.traj.days)

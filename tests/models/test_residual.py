"""The residual policy on the DP Markov release (models/residual.py, train.destination:
residual): at initialisation its days have the release's six statistics; a check with power
(a shifted residual fails it)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.config import MarkovSettings
from models.env import STAY, MobilityEnv
from models.markov import fit_markov
from models.policy import PolicyNet, ValueNet
from models.synthesis import synthesize
from tests.models._toy import toy_data
from udfs.mobility import jsd_metrics

N = 5000  # days a side


@pytest.fixture(scope="module")
def release():
    torch.set_num_threads(1)
    data = toy_data(n_users=40, n_loc=60, days=10)
    return data.coords, fit_markov(data.days_per_user, data.coords, 50.0, 1e-5, 0,
                                   settings=MarkovSettings(cell_depth=3))


def residual_policy(coords, model, train_actions: bool = True) -> PolicyNet:
    pol = PolicyNet(len(coords), 4, 4, 16, "residual", model.cell_trans.shape[0], train_actions)
    pol.use_release(model, coords)
    return pol


def _policy_days(pol, coords, model, seed=0):
    g = torch.Generator()
    g.manual_seed(seed)
    return synthesize(pol, MobilityEnv(coords, 10), torch.as_tensor(model.start_probs), N, g)


def within_noise(coords, model, days) -> dict[str, tuple[float, float]]:
    """Each statistic: (JSD of `days` to N release days, the bound: 3 x the largest JSD between
    independent N-day samples of the release, plus 1e-3 for the JSD's own floor)."""
    a, b, c = (model.sample(N, np.random.default_rng(s)) for s in (11, 12, 13))
    ref = [jsd_metrics(a, x, coords, "geo") for x in (b, c)]
    got = jsd_metrics(a, days, coords, "geo")
    return {k: (got[k], 3 * max(r[k] for r in ref) + 1e-3) for k in got}


def test_round_zero_days_have_the_release_statistics(release):
    coords, model = release
    out = within_noise(coords, model, _policy_days(residual_policy(coords, model), coords, model))
    assert all(v <= bound for v, bound in out.values()), out


def test_the_check_fails_a_shifted_residual(release):
    """Power: r_theta = +1 on STAY (every state) moves the days' statistics beyond the bound."""
    coords, model = release
    pol = residual_policy(coords, model)
    with torch.no_grad():
        pol.head.bias[STAY] = 1.0
    out = within_noise(coords, model, _policy_days(pol, coords, model))
    assert any(v > bound for v, bound in out.values()), out


def test_a_saved_residual_policy_restores_as_one(release):
    coords, model = release
    pol = residual_policy(coords, model)
    back = PolicyNet.from_state(len(coords), 4, 4, 16, pol.state_dict())
    assert back.residual
    for k, v in pol.state_dict().items():
        assert torch.equal(v, back.state_dict()[k]), k


def _trained(coords, model, kl_coef: float, rounds: int = 10, *, random_rewards: bool = False,
             train_actions: bool = True) -> PolicyNet:
    """The residual policy after `rounds` PPO updates of the training loop's own code
    (`sharded_ppo_update`, one process) on all-zero rewards, or on random ones."""
    from models.ppo import Experience, PPOSettings, rollout
    from models.train import ActorCritic, LocalComm
    from models.train_round import sharded_ppo_update

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        pol = residual_policy(coords, model, train_actions)
        val = ValueNet(len(coords), 4, 4, 16)
    module = ActorCritic(pol, val)
    opt = torch.optim.Adam(module.parameters(), lr=3e-3)
    s = PPOSettings(0.2, 0.99, 0.95, 4, 512, 0.01, 0.5, 0.5, kl_coef)
    env, start = MobilityEnv(coords, 10), torch.as_tensor(model.start_probs).float()
    g = torch.Generator()
    g.manual_seed(1)
    for _ in range(rounds):
        ro = rollout(pol, val, env, torch.multinomial(start, 64, True, generator=g), g)
        rewards = torch.randn(64, 47, generator=g) if random_rewards else torch.zeros(64, 47)
        sharded_ppo_update(module, module, opt, Experience(ro, rewards, env), s, [g],
                           LocalComm())
    return pol


def _zero_reward_rounds(coords, model, kl_coef: float, rounds: int = 10) -> np.ndarray:
    """N days of the policy after `rounds` zero-reward PPO updates (`_trained`)."""
    return _policy_days(_trained(coords, model, kl_coef, rounds), coords, model, seed=2)


def _action_gap(pol: PolicyNet, coords, model) -> float:
    """The largest |pi(a | s) - P_release(a | s)| over the states of a rollout of `pol`."""
    from models.ppo import obs_of, rollout

    env, g = MobilityEnv(coords, 10), torch.Generator()
    g.manual_seed(3)
    start = torch.multinomial(torch.as_tensor(model.start_probs).float(), 64, True, generator=g)
    flat = obs_of(rollout(pol, ValueNet(len(coords), 4, 4, 16), env, start, g).traj)
    with torch.no_grad():
        got = torch.softmax(pol(flat, env.coords_norm), -1)
        want = torch.softmax(pol.base_logits(flat), -1)
    return float((got - want).abs().max())


def test_a_frozen_action_residual_keeps_the_release_actions_exactly(release):
    """train.residual_actions false: rounds on random rewards and no KL hold leave r_theta at
    zero (pi(a | s) is the release's in every state) and move the destination residual."""
    coords, model = release
    pol = _trained(coords, model, kl_coef=0.0, rounds=3, random_rewards=True,
                   train_actions=False)
    assert not pol.head.weight.any() and not pol.head.bias.any()
    assert _action_gap(pol, coords, model) < 1e-6
    assert pol.dest.explore.weight.abs().max() > 0, "the destination residual did not train"


def test_a_trained_action_residual_leaves_the_release_actions(release):
    """Companion: the same rounds with the action residual trained move pi(a | s)."""
    coords, model = release
    pol = _trained(coords, model, kl_coef=0.0, rounds=3, random_rewards=True)
    assert _action_gap(pol, coords, model) > 1e-3


def test_zero_reward_rounds_under_the_kl_penalty_keep_the_release_statistics(release):
    coords, model = release
    out = within_noise(coords, model, _zero_reward_rounds(coords, model, kl_coef=1.0))
    assert all(v <= bound for v, bound in out.values()), out


def test_without_the_kl_penalty_zero_reward_rounds_drift(release):
    """Companion: the same rounds with kl_coef 0 (value-net noise and the entropy bonus only)
    leave the release's statistics, so the test above has power."""
    coords, model = release
    out = within_noise(coords, model, _zero_reward_rounds(coords, model, kl_coef=0.0))
    assert any(v > bound for v, bound in out.values()), out

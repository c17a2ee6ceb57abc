"""The learned destination head (train.destination: learned, issue 16 lever 5)."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch

from models.checkpoint import Checkpointing
from models.config import TrainConfig
from models.env import EXPLORE, HOME, N_BANDS, RETURN, STAY, EnvState, MobilityEnv
from models.policy import (
    NEG,
    PolicyNet,
    ValueNet,
    _dest_log_prob,
    joint_log_prob,
    sample_destinations,
)
from models.ppo import Experience, PPOSettings, ppo_update, rollout
from models.synthesis import synthesize
from models.train import fit
from tests.models._toy import tiny_config, toy_data
from udfs.errors import ConfigError


def _state(env: MobilityEnv, n: int) -> EnvState:
    """n copies of one mid-day state: home 5, then 7, 8, 7, now at 9 (slot 4)."""
    hist = torch.full((n, 48), -1, dtype=torch.long)
    hist[:, :5] = torch.tensor([5, 7, 8, 7, 9])
    one = torch.ones(n, dtype=torch.long)
    return EnvState(9 * one, 5 * one, 4 * one, 4 * one, one.clone(), hist)


def _random_head(pol: PolicyNet, seed: int) -> None:
    """Random weights, plus biases that move the distributions clearly off the public ones
    (explore: favour near bands; return: visit count to the power -2 instead of 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pol.dest.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        pol.dest.explore.bias[:N_BANDS] -= torch.arange(N_BANDS, dtype=torch.float)
        pol.dest.ret.bias[-1] -= 3.0


def _agrees(targets: torch.Tensor, logp: dict, sd_bound: float = 6.0) -> bool:
    """Every location's sample count within sd_bound binomial sds of n * exp(logp) (logp of the
    location the row's own target would have; one row's per-location table)."""
    n = targets.numel()
    locs, counts = torch.unique(targets, return_counts=True)
    p = {int(k): float(np.exp(v)) for k, v in logp.items()}
    if set(locs.tolist()) - set(p):
        return False
    for loc, pr in p.items():
        c = int(counts[locs == loc].sum()) if loc in locs.tolist() else 0
        sd = max(np.sqrt(n * pr * (1 - pr)), 1.0)
        if abs(c - n * pr) > sd_bound * sd:
            return False
    return True


@torch.no_grad()
def _location_table(pol: PolicyNet, env: MobilityEnv, state: EnvState, action: int,
                    broken: bool = False) -> dict:
    """Exact log pi(target | s, a) of every candidate location, from `joint_log_prob` minus the
    action term. `broken`: the head ignored (the public base only), a wrong formula."""
    obs = {"loc": state.loc[:1], "home": state.home[:1], "slot": state.slot[:1],
           "n_distinct": state.n_distinct[:1], "stay_len": state.stay_len[:1],
           "mask": env.action_mask(state.rows(torch.tensor([0])))}
    ctx = env.destination_context(state.rows(torch.tensor([0])))
    logits, h = pol.logits_and_hidden(obs, env.coords_norm)
    head = pol.dest
    if broken:
        class head:  # noqa: N801  (a head object: the public base only)
            @staticmethod
            def log_prob(h, ctx, actions, targets):
                return _dest_log_prob(ctx.exp_base, ctx.ret_base, ctx, actions, targets)
    cand = ctx.exp_cand[0] if action == EXPLORE else ctx.ret_cand[0]
    base = ctx.exp_base[0] if action == EXPLORE else ctx.ret_base[0]
    out = {}
    a = torch.tensor([action])
    for loc in cand[base > NEG / 2].unique().tolist():
        lp, _ = joint_log_prob(logits, head, h, ctx, a, torch.tensor([loc]))
        out[loc] = float(lp[0] - torch.log_softmax(logits, -1)[0, action])
    return out


@pytest.mark.parametrize("action", [EXPLORE, RETURN])
def test_destination_samples_follow_the_exact_softmax(action):
    """Samples of the head against its exact per-location probabilities (the log-probs PPO
    uses). False-failure rate: 6 sd per location over <= 30 locations, < 1e-7."""
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=30)
    torch.manual_seed(0)  # the trunk's init: the same state whatever ran before
    pol = PolicyNet(env.n_locations, 8, 4, 32, "learned")
    _random_head(pol, 0)
    n = 20_000
    state = _state(env, n)
    obs = {"loc": state.loc, "home": state.home, "slot": state.slot,
           "n_distinct": state.n_distinct, "stay_len": state.stay_len,
           "mask": env.action_mask(state)}
    ctx = env.destination_context(state)
    with torch.no_grad():
        _, h = pol.logits_and_hidden(obs, env.coords_norm)
    acts = torch.full((n,), action)
    tgt = sample_destinations(pol.dest, h, ctx, acts, state.loc,
                              torch.Generator().manual_seed(1))
    table = _location_table(pol, env, state, action)
    assert abs(sum(np.exp(v) for v in table.values()) - 1) < 1e-4
    if action == RETURN:
        assert set(table) == {7, 8}  # neither home (5) nor the current location (9)
    assert _agrees(tgt, table)
    # the check has power: the head's samples do not follow the public base distribution
    assert not _agrees(tgt, _location_table(pol, env, state, action, broken=True))


def test_stay_and_home_carry_no_destination_term():
    env = MobilityEnv(toy_data().coords, k_nearest=10)
    torch.manual_seed(0)
    pol = PolicyNet(env.n_locations, 4, 4, 16, "learned")
    _random_head(pol, 1)
    state = _state(env, 2)
    obs = {"loc": state.loc, "home": state.home, "slot": state.slot,
           "n_distinct": state.n_distinct, "stay_len": state.stay_len,
           "mask": env.action_mask(state)}
    ctx = env.destination_context(state)
    with torch.no_grad():
        logits, h = pol.logits_and_hidden(obs, env.coords_norm)
    acts = torch.tensor([STAY, HOME])
    lp, _ = joint_log_prob(logits, pol.dest, h, ctx.rows(torch.zeros(0, dtype=torch.long)),
                           acts, torch.tensor([9, 5]))
    assert torch.allclose(lp, torch.log_softmax(logits, -1)[[0, 1], [STAY, HOME]])


def test_untrained_head_is_the_public_distribution():
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=30)
    torch.manual_seed(0)
    pub = PolicyNet(env.n_locations, 8, 4, 32)
    torch.manual_seed(0)
    lrn = PolicyNet(env.n_locations, 8, 4, 32, "learned")
    val = ValueNet(env.n_locations, 8, 4, 32)
    starts = torch.randint(env.n_locations, (32,), generator=torch.Generator().manual_seed(0))
    a = rollout(pub, val, env, starts, torch.Generator().manual_seed(5))
    b = rollout(lrn, val, env, starts, torch.Generator().manual_seed(5))
    assert torch.equal(a.traj.days, b.traj.days)  # same draws: zero tilt = public weights


def _far_mass(pol: PolicyNet, env: MobilityEnv, state: EnvState, far: int) -> float:
    """Mean over the states of P(explore destination in a band >= far from here)."""
    obs = {"loc": state.loc, "home": state.home, "slot": state.slot,
           "n_distinct": state.n_distinct, "stay_len": state.stay_len,
           "mask": env.action_mask(state)}
    ctx = env.destination_context(state)
    with torch.no_grad():
        _, h = pol.logits_and_hidden(obs, env.coords_norm)
        exp_logits = ctx.exp_base if pol.dest is None else pol.dest(h, ctx)[0]
        p = torch.softmax(exp_logits, -1)
    return float((p * (ctx.exp_band[..., 0] >= far)).sum(1).mean())


@pytest.mark.parametrize("destination", ["learned", "public"])
def test_ppo_moves_destinations_toward_a_rewarded_band(destination):
    """Reward 1 for an explore move into a far band (>= 2 km), 0 otherwise: PPO on that reward
    moves the head's explore distribution toward far candidates. The public mode has nothing
    to move (the companion: its far mass stays exactly where it started)."""
    torch.manual_seed(0)
    env = MobilityEnv(toy_data(n_loc=300).coords, k_nearest=30)
    pol = PolicyNet(env.n_locations, 8, 4, 32, destination)
    val = ValueNet(env.n_locations, 8, 4, 32)
    opt = torch.optim.Adam(list(pol.parameters()) + list(val.parameters()), lr=1e-2)
    settings = PPOSettings.of(TrainConfig(ppo_epochs=4, ppo_minibatch=512, entropy_coef=0.0))
    g = torch.Generator().manual_seed(0)
    far = 4  # band 4: more than 2 km
    probe = env.reset(torch.arange(0, 300, 3))
    before = _far_mass(pol, env, probe, far)
    for _ in range(6):
        ro = rollout(pol, val, env, torch.randint(env.n_locations, (64,), generator=g), g)
        t = ro.traj
        band = env.distance_band(t.loc, t.targets)
        rewards = ((t.actions == EXPLORE) & (band >= far)).float()
        ppo_update(pol, val, opt, Experience(ro, rewards, env), settings, g)
    after = _far_mass(pol, env, probe, far)
    assert 0.2 < before < 0.8
    if destination == "learned":
        assert after > before + 0.15, (before, after)
    else:
        assert after == before


def test_destination_setting_is_checked():
    with pytest.raises(ConfigError, match="'destination'"):
        TrainConfig(destination="anywhere")


def test_learned_destinations_resume_and_synthesize_round_trip(tmp_path):
    data = toy_data()
    cfg = tiny_config(rounds=4, destination="learned", noise=0.05)
    whole = fit(cfg, data)
    part = fit(cfg, data, checkpoint=Checkpointing(tmp_path), stop_after=2)
    resumed = fit(cfg, data, checkpoint=Checkpointing(tmp_path, resume=True))
    assert part.rounds_done == 2 and resumed.rounds_done == 4
    assert [h["reward_mean"] for h in whole.history] == [h["reward_mean"]
                                                         for h in resumed.history]
    for k in whole.policy_state:
        assert torch.equal(whole.policy_state[k], resumed.policy_state[k]), k
    # the head trained (not still at its zero initialisation)
    assert float(whole.policy_state["dest.explore.weight"].abs().sum()) > 0
    # policy.pt round trip: the state alone restores the learned head, same days as in memory
    buf = io.BytesIO()
    torch.save(whole.policy_state, buf)
    state = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    restored = PolicyNet.from_state(whole.n_locations, cfg.loc_dim, cfg.slot_dim,
                                    cfg.policy_hidden, state)
    assert restored.destination == "learned"
    env = MobilityEnv(data.coords, cfg.k_nearest)
    a = synthesize(whole.policy(), env, whole.start_probs, 40, torch.Generator().manual_seed(3))
    b = synthesize(restored, env, whole.start_probs, 40, torch.Generator().manual_seed(3))
    assert np.array_equal(a, b)
    # and the head is used: the same weights without it draw other days
    public = PolicyNet(whole.n_locations, cfg.loc_dim, cfg.slot_dim, cfg.policy_hidden)
    public.load_state_dict({k: v for k, v in state.items() if not k.startswith("dest.")})
    c = synthesize(public, env, whole.start_probs, 40, torch.Generator().manual_seed(3))
    assert not np.array_equal(a, c)


def test_synthesize_stage_kernel_restores_the_learned_head():
    from jobs.methods import get

    data = toy_data()
    cfg = dataclasses.replace(tiny_config(rounds=2, destination="learned"))
    res = fit(cfg, data)
    art = {"policy_state": res.policy_state, "n_locations": res.n_locations,
           "loc_dim": cfg.loc_dim, "slot_dim": cfg.slot_dim, "hidden": cfg.policy_hidden,
           "k_nearest": cfg.k_nearest, "explore_exponent": cfg.explore_exponent,
           "start_probs": res.start_probs, "scheme": cfg.scheme,
           "meta": {"coords": data.coords.tolist(), "loc_ids": list(range(res.n_locations))}}
    buf = io.BytesIO()
    torch.save(art, buf)
    out = get("pategail").load(buf.getvalue()).sample_partition(11, 0, 0, 25)
    gen = torch.Generator()
    gen.manual_seed(int(np.random.SeedSequence([11, 0]).generate_state(1, np.uint64)[0] >> 1))
    env = MobilityEnv(data.coords, cfg.k_nearest, cfg.explore_exponent)
    want = synthesize(res.policy(), env, res.start_probs, 25, gen)
    assert np.array_equal(np.stack(out["slots"].to_numpy()), want)


def test_learned_destinations_spend_what_public_ones_do():
    """The head is post-processing (models/PROOF.md section 8.3): with the uniform scheme (whose
    events do not depend on released values) the ledger is the same."""
    data = toy_data()
    kw = {"rounds": 2, "scheme": "pategail", "critic_kind": None}
    pub = fit(tiny_config(**kw), data)
    lrn = fit(tiny_config(**kw, destination="learned"), data)
    assert lrn.accountant == pub.accountant
    assert [h["epsilon"] for h in lrn.history] == [h["epsilon"] for h in pub.history]


def test_train_figures_report_the_plan_and_the_round_reached(tmp_path):
    """Lever 4's reporting: the run's public figures say how many rounds were planned, how many
    pairs each round releases, which destinations the policy used, and the round reached."""
    from jobs.train.stage import PUBLIC_FIGURES, figures_of

    mc = tiny_config(rounds=9, destination="learned", target_epsilon=50.0)
    hist = [{"epsilon_batch": 1.0, "reward_mean": 0.5, "epsilon": 10.0 * (r + 1)}
            for r in range(4)]
    summary = {"history": hist, "rounds_done": 4,
               "stopped_reason": "round 5 would spend 60 > target 50",
               "accountant": {"epsilon": 40.0, "delta": 1e-5, "basic_epsilon": 90.0,
                              "method": "rdp", "target_epsilon": 50.0},
               "ranks": [{"setup_s": 1.0, "rounds_s": 4.0, "rounds_run": 4}],
               "resumed_at": None, "world": 1, "blocks": 1}
    figs = figures_of(summary, mc, {"n_users": 5}, 1.0, 6.0, tmp_path)
    assert figs["rounds_planned"] == 9 and figs["rounds_done"] == 4
    assert figs["pairs_per_round"] == mc.episodes_per_round * 47
    assert figs["destination"] == "learned" and figs["stopped_reason"]
    assert set(figs) <= set(PUBLIC_FIGURES)

"""Rollouts and PPO (clipped surrogate, GAE, entropy bonus, value loss).

Old log-probabilities and values are stored at rollout time; the first minibatch of the first
epoch therefore sees ratio exactly 1, later ones see the policy move. Every random draw (actions,
targets, minibatch order) takes an explicit CPU torch.Generator; the draw is made on the CPU
and moved to the device of the networks and the environment (same numbers on any device).
A policy with a destination head (`PolicyNet(destination="learned")`) draws explore and return
targets from it instead of the environment's public distributions, and its stored and
recomputed log-probabilities are those of the pair (action, target) (`policy.joint_log_prob`);
the destination context of a stored step is rebuilt from the day (`step_states`).
`policy.joint_log_prob` computes the head only on the explore and return rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.config import TrainConfig
from models.env import HOME, SLOTS, DestContext, EnvState, MobilityEnv
from models.features import Trajectories, stack_steps, state_action_features
from models.policy import PolicyNet, ValueNet, moving_rows, sample_destinations

OBS_KEYS = ("loc", "home", "slot", "n_distinct", "stay_len", "mask")


@dataclass
class Rollout:
    traj: Trajectories
    logp: torch.Tensor  # (E, T) log pi_old(a|s)
    values: torch.Tensor  # (E, T) V_old(s)


def obs_of(traj: Trajectories, flat: bool = True) -> dict[str, torch.Tensor]:
    return {k: (traj.flat(k) if flat else getattr(traj, k)) for k in OBS_KEYS}


def step_states(traj: Trajectories) -> EnvState:
    """The (E * T) flat environment states of the stored steps, history included (the day up
    to each step's slot, -1 after)."""
    e, t = traj.actions.shape
    slot = traj.slot  # (E, T)
    idx = torch.arange(SLOTS, device=slot.device)
    hist = torch.where(idx[None, None, :] <= slot[:, :, None], traj.days[:, None, :],
                       torch.full_like(traj.days[:, None, :], -1))
    return EnvState(traj.flat("loc"), traj.flat("home"), traj.flat("slot"),
                    traj.flat("n_distinct"), traj.flat("stay_len"), hist.reshape(e * t, SLOTS))


@dataclass
class DestRows:
    """The destination context of the explore and return steps of a rollout (flat), and each
    flat step's row in it (-1: stay or home, no destination)."""

    pos: torch.Tensor  # (E * T,) long
    ctx: DestContext

    def take(self, i: torch.Tensor) -> DestContext:
        """The context of the moving steps among flat steps `i`, in their order."""
        p = self.pos[i]
        return self.ctx.rows(p[p >= 0])


def dest_context_of(policy: PolicyNet, env: MobilityEnv, traj: Trajectories
                    ) -> DestRows | None:
    """The destination context of the stored moving steps, or None for public destinations."""
    if policy.dest is None:
        return None
    sel = moving_rows(traj.flat("actions"))
    pos = torch.full((traj.actions.numel(),), -1, dtype=torch.long, device=sel.device)
    pos[sel] = torch.arange(sel.numel(), device=sel.device)
    return DestRows(pos, env.destination_context(step_states(traj).rows(sel)))


def ctx_rows(dest: DestRows | None, i: torch.Tensor) -> DestContext | None:
    return None if dest is None else dest.take(i)


@torch.no_grad()
def rollout(policy: PolicyNet, value: ValueNet, env: MobilityEnv, start_locs: torch.Tensor,
            gen: torch.Generator) -> Rollout:
    """Generate len(start_locs) days with the current policy."""
    state = env.reset(start_locs)
    states, masks, acts, tgts, feats = [], [], [], [], []
    for _ in range(SLOTS - 1):
        mask = env.action_mask(state)
        obs = {"loc": state.loc, "home": state.home, "slot": state.slot,
               "n_distinct": state.n_distinct, "stay_len": state.stay_len, "mask": mask}
        logits, h = policy.logits_and_hidden(obs, env.coords_norm)
        probs = torch.softmax(logits, -1)
        a = torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(1).to(probs.device)
        if policy.dest is None:
            tgt = env.sample_targets(state, a, gen)
        else:  # the head's draw for the explore and return rows
            sel = moving_rows(a)
            base = torch.where(a == HOME, state.home, state.loc)  # stay: here, home: home
            tgt = sample_destinations(policy.dest, h, env.destination_context(state.rows(sel)),
                                      a, base, gen)
        states.append(state)
        masks.append(mask)
        acts.append(a)
        tgts.append(tgt)
        feats.append(state_action_features(env, state, a))
        state = env.step(state, a, tgt)
    traj = stack_steps(states, masks, acts, tgts, feats, state.history)
    obs = obs_of(traj)
    acts = traj.flat("actions")
    logp, _ = policy.joint_log_prob(obs, env.coords_norm,
                                     ctx_rows(dest_context_of(policy, env, traj),
                                              torch.arange(acts.shape[0], device=acts.device)),
                                     acts, traj.flat("targets"))
    e = start_locs.shape[0]
    return Rollout(traj, logp.view(e, -1), value(obs, env.coords_norm).view(e, -1))


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float = 0.99,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over (E, T); the day ends after T (bootstrap 0)."""
    adv = torch.zeros_like(rewards)
    last = torch.zeros(rewards.shape[0], device=rewards.device)
    for t in range(rewards.shape[1] - 1, -1, -1):
        nxt = values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * nxt - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + values


@dataclass(frozen=True)
class PPOSettings:
    """The PPO fields of `models.config.TrainConfig` (their one home, defaults included), as
    `ppo_update` reads them."""

    clip: float
    gamma: float
    gae_lambda: float
    epochs: int
    minibatch: int
    entropy_coef: float
    value_coef: float
    max_grad_norm: float
    kl_coef: float = 0.0  # KL(pi || P_release) weight, residual policies only

    @classmethod
    def of(cls, cfg: TrainConfig) -> PPOSettings:
        return cls(cfg.clip, cfg.gamma, cfg.gae_lambda, cfg.ppo_epochs, cfg.ppo_minibatch,
                   cfg.entropy_coef, cfg.value_coef, cfg.max_grad_norm, cfg.kl_coef)


@dataclass(frozen=True)
class Experience:
    """What one PPO update learns from: a rollout, its per-step rewards (E, T) and the
    environment it was rolled out in (the policy reads its coordinates and destinations)."""

    rollout: Rollout
    rewards: torch.Tensor
    env: MobilityEnv


def ppo_update(policy: PolicyNet, value: ValueNet, opt: torch.optim.Optimizer,
               exp: Experience, s: PPOSettings, gen: torch.Generator) -> dict:
    """PPO epochs over the rollout; returns losses and per-minibatch ratio statistics."""
    ro, env = exp.rollout, exp.env
    adv, ret = gae(exp.rewards, ro.values, s.gamma, s.gae_lambda)
    adv, ret = adv.reshape(-1), ret.reshape(-1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    obs, acts, logp_old = obs_of(ro.traj), ro.traj.flat("actions"), ro.logp.reshape(-1)
    tgts, ctx = ro.traj.flat("targets"), dest_context_of(policy, env, ro.traj)
    n = acts.shape[0]
    stats: dict = {"ratio_mean": [], "ratio_maxdev": [], "clip_frac": [], "policy_loss": [],
                   "value_loss": [], "entropy": []}
    params = list(policy.parameters()) + list(value.parameters())
    for _ in range(s.epochs):
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n, s.minibatch):
            i = perm[start:start + s.minibatch].to(acts.device)
            o = {k: v[i] for k, v in obs.items()}
            lp, ent, kl = policy.joint_log_prob(o, env.coords_norm, ctx_rows(ctx, i), acts[i],
                                                tgts[i], kl=True)
            ratio = torch.exp(lp - logp_old[i])
            surr = torch.min(ratio * adv[i], ratio.clamp(1 - s.clip, 1 + s.clip) * adv[i])
            ent = ent.mean()
            v_loss = ((value(o, env.coords_norm) - ret[i]) ** 2).mean()
            loss = -surr.mean() + s.value_coef * v_loss - s.entropy_coef * ent
            if kl is not None:
                loss = loss + s.kl_coef * kl.mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            opt.step()
            with torch.no_grad():
                stats["ratio_mean"].append(float(ratio.mean()))
                stats["ratio_maxdev"].append(float((ratio - 1).abs().max()))
                stats["clip_frac"].append(float(((ratio - 1).abs() > s.clip).float().mean()))
                stats["policy_loss"].append(float(-surr.mean()))
                stats["value_loss"].append(float(v_loss))
                stats["entropy"].append(float(ent))
    return stats

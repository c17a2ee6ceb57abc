"""The steps of one training round (`models.train._Run.one_round` calls them in order): the
participants' critic steps, the DP release of the generated pairs' rewards (local or central
scheme, with the history pilot), PPO on this rank's blocks, and the round's public record and
trusted-zone diagnostics.

Apart from models/train.py, which holds the run's state, its setup and its checkpoints:
`RoundSteps` is a base of `_Run` and reads the run's attributes (cfg, comm, critics, scheme,
accountant, gens, ...) documented there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from models.aggregation import LocalRewards
from models.aggregation.pilot import pair_keys
from models.budget import normaliser, sampled
from models.critics import Moments, critic_rewards, local_moments, real_reward_means
from models.ppo import (
    Experience,
    PPOSettings,
    Rollout,
    ctx_rows,
    dest_context_of,
    gae,
    obs_of,
)

if TYPE_CHECKING:
    from models.train import ActorCritic, Comm


def _corr(a: torch.Tensor, b: torch.Tensor) -> float | None:
    a, b = a.double() - a.double().mean(), b.double() - b.double().mean()
    den = float(a.norm() * b.norm())
    return float((a * b).sum()) / den if den > 0 else None


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def moments_all(comm: Comm, mom: Moments) -> Moments:
    red = comm.all_reduce_sum(torch.stack([mom.sum, mom.sumsq]))
    cnt = comm.all_reduce_sum(torch.tensor([float(mom.count)], dtype=torch.float64))
    # on the CPU: the DP releases draw their noise there
    return Moments(red[0].cpu(), red[1].cpu(), int(round(float(cnt[0]))))


def sharded_ppo_update(model: nn.Module, module: ActorCritic, opt: torch.optim.Optimizer,
                       exp: Experience, s: PPOSettings, block_gens: list[torch.Generator],
                       comm: Comm) -> dict:
    """PPO epochs over this rank's blocks of episodes (clipped surrogate, GAE, entropy, value);
    `block_gens`: one generator per block of this rank (every rank holds as many).

    Advantages are normalised with all-reduced moments; each block has its own minibatch
    permutation, and a minibatch step takes minibatch/blocks pairs from every block. Losses are
    sums times W / (pairs in the global minibatch), so DDP's average over ranks is the mean over
    the global minibatch, exactly what one process computes with all blocks local.
    """
    ro, env = exp.rollout, exp.env
    n_blocks = len(block_gens) * comm.world  # every rank holds blocks / world (check_blocks)
    adv, ret = gae(exp.rewards, ro.values, s.gamma, s.gae_lambda)
    adv, ret = adv.reshape(-1).double(), ret.reshape(-1)
    st = comm.all_reduce_sum(torch.stack([adv.sum(), (adv * adv).sum(),
                                          torch.tensor(float(adv.numel()), dtype=torch.float64,
                                                       device=adv.device)]))
    n_all = float(st[2])
    mean = st[0] / n_all
    std = math.sqrt(max(0.0, float(st[1] - n_all * mean * mean) / max(1.0, n_all - 1)))
    adv = ((adv - mean) / (std + 1e-8)).float()
    obs, acts, logp_old = obs_of(ro.traj), ro.traj.flat("actions"), ro.logp.reshape(-1)
    tgts, ctx = ro.traj.flat("targets"), dest_context_of(module.policy, env, ro.traj)
    n_b = acts.shape[0] // len(block_gens)  # pairs per block (blocks are equal)
    mb = max(1, s.minibatch // n_blocks)
    rows: list[list[float]] = []
    params = list(module.parameters())
    for _ in range(s.epochs):
        perms = [torch.randperm(n_b, generator=g) for g in block_gens]
        for start in range(0, n_b, mb):
            i = torch.cat([j * n_b + p[start:start + mb] for j, p in enumerate(perms)]
                          ).to(acts.device)
            n_global = n_blocks * min(mb, n_b - start)
            o = {k: v[i] for k, v in obs.items()}
            lp, ent, kl, values = model(o, env.coords_norm, ctx_rows(ctx, i), acts[i], tgts[i])
            ratio = torch.exp(lp - logp_old[i])
            surr = torch.min(ratio * adv[i], ratio.clamp(1 - s.clip, 1 + s.clip) * adv[i]).sum()
            ent = ent.sum()
            v_loss = ((values - ret[i]) ** 2).sum()
            loss = -surr + s.value_coef * v_loss - s.entropy_coef * ent
            if kl is not None:
                loss = loss + s.kl_coef * kl.sum()
            loss = loss * (comm.world / n_global)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
            opt.step()
            with torch.no_grad():
                rows.append([float(-surr), float(v_loss), float(ent),
                             float(((ratio - 1).abs() > s.clip).sum()), float(n_global)])
    tot = comm.all_reduce_sum(torch.tensor(rows, dtype=torch.float64))
    # column 4 sums n_global over ranks (W copies of the same number): divide W back out
    per = tot[:, :4] / (tot[:, 4:5] / comm.world)
    keys = ("policy_loss", "value_loss", "entropy", "clip_frac")
    return {k: per[:, j].tolist() for j, k in enumerate(keys)}


@dataclass(frozen=True)
class _Released:
    """A round's reward release: the released rewards, the epsilon it spent and its released
    mean (what the pilot learns from); under a central scheme also the trusted-zone inputs of
    the diagnostics: the participants' summed mean reward of the generated pairs and their
    count, and the raw reward mean and pilot correlation."""

    rewards: torch.Tensor
    epsilon: float
    mean: Any
    gen_sum: float | None = None
    count: int = 0
    trusted: dict[str, Any] = field(default_factory=dict)


class RoundSteps:
    """The steps of `_Run.one_round` after the rollouts, as methods of the run."""

    def _step_critics(self, feats: torch.Tensor, lu: torch.Tensor, gu: torch.Tensor
                      ) -> tuple[torch.Tensor, float]:
        """`critic_steps` steps of the participants' critics (local indices lu, global gu);
        returns the last step's losses and the trusted-zone diagnostic: this rank's sum over
        its participants of mean R_u(real_u), not under LDP (the server must not see any exact
        aggregate of a user's critic)."""
        cfg = self.cfg
        step = self.critic_step()
        for _ in range(cfg.critic_steps):
            closs = step.rows(feats, lu, gu, self.gens["critic"])
        real_sum = (0.0 if self.scheme.local else float(real_reward_means(
            self.critics, self.gap_real, self.gap_counts, lu, cfg.score_chunk_elems).sum()))
        return closs, real_sum

    def _release_rewards(self, feats: torch.Tensor, lu: torch.Tensor, gu: torch.Tensor
                         ) -> _Released:
        """The round's DP release of the generated pairs' rewards, under the pilot's prior;
        the pilot then learns from the released means (post-processing, same on every rank)."""
        keys = pair_keys(feats) if self.pilot is not None else None
        prior = self.pilot.estimate(keys) if self.pilot is not None else None
        if self.scheme.local:
            rel = self._release_local(feats, lu, gu, prior)
        else:
            rel = self._release_central(feats, lu, prior)
        if self.pilot is not None:
            self.pilot.update(keys, rel.mean)
        return rel

    def _release_local(self, feats: torch.Tensor, lu: torch.Tensor, gu: torch.Tensor,
                       prior: torch.Tensor | None) -> _Released:
        # scored on the device; each user's rewards are perturbed with its own noise row
        # before anything is summed (no unperturbed sum exists in this mode): each rank
        # perturbs its users' rewards with their rows of the shared noise table, and only the
        # perturbed moments are all-reduced
        rw = critic_rewards(self.critics, feats, lu, self.cfg.score_chunk_elems).cpu()
        data = LocalRewards(rw, gu, self.n_total, reduce=lambda m: moments_all(self.comm, m))
        rel = self.scheme.release(data, gen=self.gens["noise"], spend=self.accountant.spend,
                                  prior=prior)
        return _Released(rel.rewards, rel.epsilon_spent, rel.mean)

    def _release_central(self, feats: torch.Tensor, lu: torch.Tensor,
                         prior: torch.Tensor | None) -> _Released:
        cfg = self.cfg
        mom = moments_all(self.comm,
                          local_moments(self.critics, feats, lu, cfg.score_chunk_elems))
        kw: dict[str, Any] = {"prior": prior} if self.pilot is not None else {}
        if cfg.sampling == "poisson":  # public normaliser q * N (beta = 0: one release)
            kw["normaliser"] = normaliser(cfg, self.n_total)

        def release():
            rel = self.scheme.release(
                mom, gen=self.gens["noise"],
                spend=lambda e: self.accountant.spend(sampled(cfg, e)), **kw)
            raw = mom.sum / max(mom.count, 1)  # trusted-zone diagnostics, never published
            return {"rewards": rel.rewards, "eps": rel.epsilon_spent, "mean": rel.mean,
                    "raw_mean": float(raw.mean()) if mom.count else None,
                    "pilot_corr": (None if rel.pilot is None or not mom.count
                                   else _corr(rel.pilot, raw))}

        out = self._from_rank0(release)
        # sum over participants of mean R_u(generated), for the critic gap
        gen_sum = float(mom.sum.sum()) / max(1, mom.sum.shape[0]) if mom.count else None
        return _Released(out["rewards"], out["eps"], out["mean"], gen_sum, mom.count,
                         {"reward_raw_mean": out["raw_mean"], "pilot_corr": out["pilot_corr"]})

    def _update_policy(self, ro: Rollout, rewards: torch.Tensor, ppo_seeds: list[int]) -> dict:
        """PPO on this rank's blocks of episodes, each block with its own seeded stream."""
        blocks = self.my_blocks()
        e_b = self.cfg.episodes_per_round // self.blocks
        local = Experience(ro, rewards[blocks.start * e_b:blocks.stop * e_b], self.env)
        return sharded_ppo_update(self.model, self.module, self.ppo_opt, local, self.ppo,
                                  [_gen(ppo_seeds[b]) for b in blocks], self.comm)

    def _trusted(self, users: torch.Tensor, closs: torch.Tensor, real_sum: float,
                 rel: _Released) -> dict[str, Any]:
        """The round's trusted-zone diagnostics (never logged or published)."""
        cl = self.comm.all_reduce_sum(torch.tensor(
            [float(closs.double().sum()), float(closs.numel()), real_sum], dtype=torch.float64))
        return {"critic_loss": float(cl[0] / cl[1]) if float(cl[1]) > 0 else None,
                **rel.trusted,
                "critic_gap": (None if rel.gen_sum is None
                               else (float(cl[2]) - rel.gen_sum) / rel.count),
                "participants": int(users.shape[0])}

    def _record(self, users: torch.Tensor, ro: Rollout, rewards: torch.Tensor, stats: dict,
                rel: _Released) -> dict:
        """The round's public figures (one_round adds its clocks and trusted part)."""
        cfg = self.cfg
        acts = self.comm.all_reduce_sum(torch.bincount(ro.traj.actions.reshape(-1), minlength=4)
                                        .double())
        # a Poisson sample's size is not public (publishing it would void the amplification)
        poisson = cfg.sampling == "poisson" and cfg.participation < 1
        return {"round": self.round, "participants": None if poisson else int(users.shape[0]),
                "reward_mean": float(rewards.mean()),
                "policy_loss": float(np.mean(stats["policy_loss"])),
                "value_loss": float(np.mean(stats["value_loss"])),
                "entropy": float(np.mean(stats["entropy"])),
                "clip_frac": float(np.mean(stats["clip_frac"])),
                "epsilon_batch": rel.epsilon, "epsilon": self.accountant.epsilon(),
                "action_freq": (acts / acts.sum()).tolist()}

"""Private pre-training of the policy on the DP Markov release (`TrainConfig.pretrain="markov"`).

After HRNet (Shibata & Takagi, PVLDB 2024): release a DP first-order model of the training
users' days first, pre-train the learned generator on it, then spend the rest of the budget on
private fine-tuning. Here:
1. the Markov release (`models.markov.release_markov`) of the training users' summed normalised
   statistics at `markov_share * target_epsilon`, charged to the run's own accountant before its
   noise is drawn (`markov_plan`: the same calibrated plan the budget planner composes);
2. its start distribution replaces the separate DP start histogram (the run makes no other start
   release), and its destination tables tilt the environment's explore distribution
   (`models.env.DestPrior`);
3. behaviour cloning (`behaviour_clone`): `bc_days` days sampled from the released model,
   labelled with the environment's own actions, and `bc_epochs` passes of maximum likelihood of
   the policy's (action, destination) on them;
4. the GAIL rounds, with what is left of target_epsilon.
Steps 2 and 3 read only the released tables (and a seeded generator): post-processing, no
epsilon (models/PROOF.md section 10). Runtime: the release as `models.markov`; cloning
O(bc_epochs * bc_days * 47) policy steps.
"""

from __future__ import annotations

import functools
import math

import dp_accounting
import numpy as np
import torch

from models.accounting import PrivacyAccountant
from models.config import TrainConfig
from models.env import DestPrior, MobilityEnv
from models.features import expert_trajectories
from models.markov import MarkovModel, Plan, calibrate
from models.policy import NEG, PolicyNet, moving_rows
from models.ppo import ctx_rows, dest_context_of, obs_of
from models.starts import kd_levels


def markov_epsilon(cfg: TrainConfig) -> float:
    """The Markov release's own epsilon: its share of the target (`markov_share_unit`
    "epsilon"), or the epsilon of one Gaussian of multiplier S / sqrt(markov_share) ("rho"), S
    the multiplier that alone spends the target. Why "rho" is the natural unit: under RDP a
    Gaussian of multiplier m has RDP alpha / (2 m^2) at every order, so compositions add
    1/m^2 exactly, and a Gaussian release composed of several (the Markov release's
    components, `models.markov.Plan`) is one Gaussian of multiplier `Plan.scale`; giving the
    release the share w of 1/S^2 is the multiplier S / sqrt(w), and the rounds' Gaussians
    (noise found by `models.budget.noise_for_epsilon` with the release in the plan) take the
    remaining (1 - w) / S^2. The calibration of the release to this epsilon
    (`models.markov.calibrate`) then finds the multiplier S / sqrt(w) up to its tolerance."""
    if cfg.markov_share_unit == "epsilon":
        return cfg.markov_share * float(cfg.target_epsilon)
    whole = gaussian_multiplier(float(cfg.target_epsilon), cfg.delta, cfg.accountant)
    return _gaussian_epsilon(whole / math.sqrt(cfg.markov_share), cfg.delta, cfg.accountant)


@functools.lru_cache(maxsize=64)
def gaussian_multiplier(epsilon: float, delta: float, method: str) -> float:
    """S: the smallest multiplier of one Gaussian whose accounted epsilon is <= epsilon."""
    return calibrate("gaussian", 1, epsilon, delta, method).scale


def _gaussian_epsilon(multiplier: float, delta: float, method: str) -> float:
    acc = PrivacyAccountant(delta, None, method)
    acc.spend(dp_accounting.GaussianDpEvent(multiplier))
    return acc.epsilon()


@functools.lru_cache(maxsize=64)
def _plan(mechanism: str, n_levels: int, epsilon: float, delta: float, method: str) -> Plan:
    return calibrate(mechanism, n_levels, epsilon, delta, method)


def markov_plan(cfg: TrainConfig, coords: np.ndarray) -> Plan:
    """The calibrated plan of the run's Markov release (the one `release_markov` computes)."""
    return _plan(cfg.markov_mechanism, len(kd_levels(np.asarray(coords, dtype=np.float64))),
                 markov_epsilon(cfg), cfg.delta, cfg.accountant)


def markov_events(cfg: TrainConfig, coords: np.ndarray) -> dp_accounting.DpEvent:
    return markov_plan(cfg, coords).events()


def dest_prior(model: MarkovModel, weight: float) -> DestPrior:
    """The release's destination tables, tilting the explore weights by `weight`."""
    return DestPrior(model.cell_of, model.cell_trans, model.within, weight)


def _bc_loss(policy: PolicyNet, env: MobilityEnv, obs: dict, acts: torch.Tensor,
             tgts: torch.Tensor, ctx) -> torch.Tensor:
    """Mean negative log-likelihood of the steps' actions and, with a destination head, of the
    destinations the head can produce (an explore target outside the K nearest has none: its
    action still counts)."""
    logits, h = policy.logits_and_hidden(obs, env.coords_norm)
    lp = torch.log_softmax(logits, -1).gather(1, acts[:, None]).squeeze(1)
    if policy.dest is not None:
        sel = moving_rows(acts)
        if sel.numel():
            dlp = policy.dest.log_prob(h[sel], ctx, acts[sel], tgts[sel])
            lp = lp.index_add(0, sel, torch.where(dlp > NEG / 2, dlp, torch.zeros_like(dlp)))
    return -lp.mean()


def behaviour_clone(policy: PolicyNet, env: MobilityEnv, days: np.ndarray, epochs: int,
                    minibatch: int, lr: float, gen: torch.Generator) -> list[float]:
    """`epochs` passes of Adam on the policy's log-likelihood of `days` (labelled and replayed
    by `env`, as real days are); returns the mean loss of each pass."""
    traj = expert_trajectories(env, days)
    obs, acts, tgts = obs_of(traj), traj.flat("actions"), traj.flat("targets")
    dest = dest_context_of(policy, env, traj)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    n, losses = acts.shape[0], []
    for _ in range(epochs):
        perm, tot = torch.randperm(n, generator=gen).to(acts.device), 0.0
        for start in range(0, n, minibatch):
            i = perm[start:start + minibatch]
            loss = _bc_loss(policy, env, {k: v[i] for k, v in obs.items()}, acts[i], tgts[i],
                            ctx_rows(dest, i))
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * i.numel()
        losses.append(tot / n)
    return losses

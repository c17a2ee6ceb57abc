"""Public state-action features, one definition for expert and generated pairs.

Feature vector of (s, a), F = 13 floats:
  0-1  standardised coordinates of the current location (public map statistics)
  2-3  standardised coordinates of home
  4-5  sin / cos of the slot angle 2*pi*t/48
  6    distinct locations so far / 48
  7    current stay length / 48
  8    1 if at home
  9-12 one-hot action (stay, explore, home, return)
Nothing here scales with the number of locations, so a critic per user stays small.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from models.env import N_ACTIONS, SLOTS, EnvState, MobilityEnv

FEATURE_DIM = 9 + N_ACTIONS


def state_action_features(env: MobilityEnv, state: EnvState, actions: torch.Tensor) -> torch.Tensor:
    """(E, FEATURE_DIM) float features of each episode's state and chosen action."""
    ang = state.slot.float() * (2 * math.pi / SLOTS)
    return torch.cat([
        env.coords_norm[state.loc],
        env.coords_norm[state.home],
        torch.stack([ang.sin(), ang.cos(), state.n_distinct.float() / SLOTS,
                     state.stay_len.float() / SLOTS, (state.loc == state.home).float()], 1),
        torch.nn.functional.one_hot(actions, N_ACTIONS).float(),
    ], 1)


@dataclass
class Trajectories:
    """Per-step tensors of E episodes over T = 47 transitions (leading dims (E, T))."""

    loc: torch.Tensor
    home: torch.Tensor
    slot: torch.Tensor
    n_distinct: torch.Tensor
    stay_len: torch.Tensor
    mask: torch.Tensor  # (E, T, 4) bool
    actions: torch.Tensor
    targets: torch.Tensor
    features: torch.Tensor  # (E, T, F)
    days: torch.Tensor  # (E, 48) resulting location sequence

    def flat(self, name: str) -> torch.Tensor:
        x = getattr(self, name)
        return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def stack_steps(states: list[EnvState], masks: list[torch.Tensor], actions: list[torch.Tensor],
                targets: list[torch.Tensor], features: list[torch.Tensor],
                days: torch.Tensor) -> Trajectories:
    def st(xs: list[torch.Tensor]) -> torch.Tensor:
        return torch.stack(xs, 1)

    return Trajectories(st([s.loc for s in states]), st([s.home for s in states]),
                        st([s.slot for s in states]), st([s.n_distinct for s in states]),
                        st([s.stay_len for s in states]), st(masks), st(actions), st(targets),
                        st(features), days)


def expert_trajectories(env: MobilityEnv, days: np.ndarray) -> Trajectories:
    """Label real days with the environment's own action definitions and replay them."""
    d = env.check_days(days)
    state = env.reset(d[:, 0])
    states, masks, acts, tgts, feats = [], [], [], [], []
    for t in range(SLOTS - 1):
        a, tgt = env.label(state, d[:, t + 1])
        states.append(state)
        masks.append(env.action_mask(state))
        acts.append(a)
        tgts.append(tgt)
        feats.append(state_action_features(env, state, a))
        state = env.step(state, a, tgt)
    return stack_steps(states, masks, acts, tgts, feats, state.history)


def expert_features_per_user(env: MobilityEnv, days_per_user: list[np.ndarray]
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded (U, Nmax, F) expert features (on the env's device) and (U,) CPU counts of real
    pairs per user."""
    all_days = np.concatenate(days_per_user)
    feats = expert_trajectories(env, all_days).features  # (n_days, T, F)
    counts = torch.tensor([len(d) * (SLOTS - 1) for d in days_per_user])
    out = torch.zeros(len(days_per_user), int(counts.max()), FEATURE_DIM, device=feats.device)
    start = 0
    for u, d in enumerate(days_per_user):  # one-off padding at setup, not in the training step
        f = feats[start:start + len(d)].reshape(-1, FEATURE_DIM)
        out[u, :len(f)] = f
        start += len(d)
    return out, counts

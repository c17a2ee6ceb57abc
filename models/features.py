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

from models.env import EXPLORE, HOME, N_ACTIONS, RETURN, SLOTS, STAY, EnvState, MobilityEnv

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


def expert_features(env: MobilityEnv, days: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(n, T, F) features of real days, equal to `expert_trajectories(env, days).features`
    without stepping the environment: every state variable of a real day is a function of the
    day itself (slot t's location, home = slot 0, distinct locations of slots 0..t, the run
    length ending at t) and the labels follow `MobilityEnv.label` (stay, else home, else return
    to a location of slots 0..t, else explore). It keeps no per-step states, so the training
    setup labels a rank's ~10^5-10^6 days in seconds and in O(n * 48 * 48) bools per chunk
    (tests/models/test_env.py checks the equality)."""
    d = env.check_days(np.asarray(days) if not torch.is_tensor(days) else days.cpu()).to(
        env.device)
    n, t_all = d.shape[0], torch.arange(SLOTS, device=d.device)
    earlier = t_all[None, :] < t_all[:, None]  # (48, 48): [t, s] = s before t
    seen = ((d[:, :, None] == d[:, None, :]) & earlier).any(2)  # slot t's location seen before t
    n_distinct = torch.cumsum((~seen).long(), 1)[:, :-1]  # distinct in slots 0..t, t < 47
    moved = torch.ones(n, SLOTS, dtype=torch.bool, device=d.device)
    moved[:, 1:] = d[:, 1:] != d[:, :-1]
    last_move = torch.cummax(torch.where(moved, t_all, torch.zeros_like(d)), 1).values
    stay_len = (t_all - last_move + 1)[:, :-1]
    loc, nxt, home = d[:, :-1], d[:, 1:], d[:, :1].expand(-1, SLOTS - 1)
    act = torch.full_like(nxt, EXPLORE)
    act = torch.where(seen[:, 1:], torch.full_like(nxt, RETURN), act)
    act = torch.where(nxt == home, torch.full_like(nxt, HOME), act)
    act = torch.where(nxt == loc, torch.full_like(nxt, STAY), act)
    ang = t_all[:-1].float() * (2 * math.pi / SLOTS)
    return torch.cat([
        env.coords_norm[loc], env.coords_norm[home],
        torch.stack([ang.sin().expand(n, -1), ang.cos().expand(n, -1),
                     n_distinct.float() / SLOTS, stay_len.float() / SLOTS,
                     (loc == home).float()], -1),
        torch.nn.functional.one_hot(act, N_ACTIONS).float(),
    ], -1)


def expert_features_per_user(env: MobilityEnv, days_per_user: list[np.ndarray],
                             chunk_days: int = 8192) -> tuple[torch.Tensor, torch.Tensor]:
    """Padded (U, Nmax, F) expert features (on the env's device) and (U,) CPU counts of real
    pairs per user. Days are labelled `chunk_days` at a time (`expert_features`) and written
    straight into their users' rows, so the setup holds the padded table and one chunk."""
    n_days = torch.tensor([len(d) for d in days_per_user])
    counts = n_days * (SLOTS - 1)
    u_n, max_days = len(days_per_user), int(n_days.max())
    out = torch.zeros(u_n, max_days, SLOTS - 1, FEATURE_DIM, device=env.device)
    user_of = torch.repeat_interleave(torch.arange(u_n), n_days)  # day -> user
    first = torch.cumsum(n_days, 0) - n_days
    pos_of = torch.arange(int(n_days.sum())) - first[user_of]  # day -> its index for the user
    all_days = np.concatenate(days_per_user)
    for start in range(0, len(all_days), chunk_days):
        sl = slice(start, start + chunk_days)
        out[user_of[sl].to(env.device), pos_of[sl].to(env.device)] = expert_features(
            env, all_days[sl])
    return out.view(u_n, max_days * (SLOTS - 1), FEATURE_DIM), counts

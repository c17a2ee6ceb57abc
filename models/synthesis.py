"""Sampling of synthetic days from a trained policy.

Start locations come from the DP start distribution of the train run (`models.starts`), drawn
once during training; sampling days from the policy is post-processing and spends nothing.
Destinations follow the policy: a policy with a destination head (train.destination: learned)
draws explore and return targets from it, exactly as in training (`models.ppo.rollout`).
"""

from __future__ import annotations

import numpy as np
import torch

from models.env import MobilityEnv
from models.policy import PolicyNet, ValueNet
from models.ppo import rollout


@torch.no_grad()
def synthesize(policy: PolicyNet, env: MobilityEnv, start_probs: torch.Tensor, n: int,
               gen: torch.Generator, batch: int = 1024) -> np.ndarray:
    """n synthetic days, int64 array (n, 48) of location ids."""
    value = ValueNet(env.n_locations, policy.trunk.loc_emb.embedding_dim,
                     policy.trunk.slot_emb.embedding_dim, policy.head.in_features)
    out = []
    for start in range(0, n, batch):
        m = min(batch, n - start)
        starts = torch.multinomial(start_probs.float(), m, replacement=True, generator=gen)
        out.append(rollout(policy, value, env, starts, gen).traj.days.numpy())
    return np.concatenate(out) if out else np.zeros((0, 48), dtype=np.int64)

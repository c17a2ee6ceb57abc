"""Toy candidates for the attack tests: users with diverse random-walk days on a small map."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from models.data import TrainData


def walk_data(n_users: int = 8, days: int = 50, n_loc: int = 80, seed: int = 0) -> TrainData:
    """Each day: home, then 3-8 stops (random locations, random durations), home at night."""
    rng = np.random.default_rng(seed)
    coords = np.column_stack([39.9 + rng.random(n_loc) * 0.3, 116.3 + rng.random(n_loc) * 0.3])
    per_user = []
    for _ in range(n_users):
        home = rng.integers(n_loc)
        favourites = rng.choice(n_loc, 10, replace=False)
        out = np.full((days, 48), home)
        for i in range(days):
            k = rng.integers(3, 9)
            cuts = np.sort(rng.choice(np.arange(12, 44), k, replace=False))
            stops = np.where(rng.random(k) < 0.6, rng.choice(favourites, k),
                             rng.integers(n_loc, size=k))
            for j in range(k - 1):
                out[i, cuts[j]:cuts[j + 1]] = stops[j]
        per_user.append(out.astype(np.int64))
    return TrainData(per_user, coords, list(range(n_users)))


class MemorisingCritics(nn.Module):
    """D_u(x) = 4 - 50 * (squared distance from x to the nearest of u's member pairs): a critic
    that has memorised its user's training pairs (reward ~0.98 on them, falling off quickly)."""

    def __init__(self, member_features: list[torch.Tensor]):
        super().__init__()
        self.n_users = len(member_features)
        self.members = member_features  # per user (m_u, F)

    def forward(self, x: torch.Tensor, users: torch.Tensor | None = None) -> torch.Tensor:
        users = torch.arange(self.n_users) if users is None else users
        rows = [4.0 - 50.0 * torch.cdist(x, self.members[int(u)]).pow(2).min(1).values
                for u in users]
        return torch.stack(rows)

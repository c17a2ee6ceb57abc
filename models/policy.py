"""Policy and value networks over the environment state (4-way masked softmax).

Inputs: a learned embedding of the current location and of home (one shared table), an
embedding of the slot, the standardised coordinates of both, and the counters (distinct/48,
stay/48, at-home). The policy models the action type; explore and return targets come from the
environment's public distributions (DESIGN section 6), so log pi(a|s) is over 4 actions.
"""

from __future__ import annotations

import torch
from torch import nn

from models.env import N_ACTIONS, SLOTS

NEG = -1e9


class _Trunk(nn.Module):
    def __init__(self, n_locations: int, loc_dim: int, slot_dim: int, hidden: int):
        super().__init__()
        self.loc_emb = nn.Embedding(n_locations, loc_dim)
        self.slot_emb = nn.Embedding(SLOTS, slot_dim)
        self.mlp = nn.Sequential(nn.Linear(2 * loc_dim + slot_dim + 7, hidden), nn.Tanh(),
                                 nn.Linear(hidden, hidden), nn.Tanh())

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        loc, home = obs["loc"], obs["home"]
        x = torch.cat([
            self.loc_emb(loc), self.loc_emb(home), self.slot_emb(obs["slot"]),
            coords_norm[loc], coords_norm[home],
            torch.stack([obs["n_distinct"].float() / SLOTS, obs["stay_len"].float() / SLOTS,
                         (loc == home).float()], -1)], -1)
        return self.mlp(x)


class PolicyNet(nn.Module):
    """pi(a | s): logits over (stay, explore, home, return), invalid actions masked out."""

    def __init__(self, n_locations: int, loc_dim: int = 16, slot_dim: int = 8, hidden: int = 64):
        super().__init__()
        self.trunk = _Trunk(n_locations, loc_dim, slot_dim, hidden)
        self.head = nn.Linear(hidden, N_ACTIONS)

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.trunk(obs, coords_norm))
        return logits.masked_fill(~obs["mask"], NEG)

    def distribution(self, obs: dict[str, torch.Tensor],
                     coords_norm: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self(obs, coords_norm))

    @classmethod
    def restore(cls, config, n_locations: int, state: dict) -> PolicyNet:
        """A trained policy from its state dict and the dimensions of its training config."""
        net = cls(n_locations, config.loc_dim, config.slot_dim, config.policy_hidden)
        net.load_state_dict(state)
        return net


class ValueNet(nn.Module):
    """V(s), same trunk architecture, separate parameters."""

    def __init__(self, n_locations: int, loc_dim: int = 16, slot_dim: int = 8, hidden: int = 64):
        super().__init__()
        self.trunk = _Trunk(n_locations, loc_dim, slot_dim, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, obs: dict[str, torch.Tensor], coords_norm: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(obs, coords_norm)).squeeze(-1)

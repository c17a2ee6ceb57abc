"""The free pilot of the sensitivity-aware schemes: previous rounds' released rewards.

PateGAIL++ weighs each generated pair's budget by a pilot estimate R_p of its mean reward. A
fresh noisy pilot must be paid for, and at the paper's rate (a tenth of the batch budget) its
noise is ten times the release's: at lambda 0.1 most pilot values clip to 0 or 1 and their
correlation with the true mean is about zero. This pilot costs nothing: it is a
function of rewards already released (post-processing), averaged per public key of a pair
(slot, action, at home: 48 * 4 * 2 keys, from the public features of `models.features`), with
older rounds down-weighted by `decay` per round. A key never released yet takes the average over
all released pairs; before the first release there is no pilot and the weights are uniform.
Guarantee: none needed (post-processing of DP releases; the keys are public features of the
generated pairs). Budget: 0. Runtime: O(B) per round. State: per-key decayed sums and weights,
part of the checkpoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from models.env import N_ACTIONS, SLOTS

N_KEYS = SLOTS * N_ACTIONS * 2


def pair_keys(features: torch.Tensor) -> torch.Tensor:
    """(B,) public key (slot, action, at home) of each pair from its (B, F) features."""
    f = features.detach().double().cpu()
    ang = torch.atan2(f[:, 4], f[:, 5])
    slot = torch.round(ang * (SLOTS / (2 * math.pi))).long() % SLOTS
    action = f[:, 9:9 + N_ACTIONS].argmax(1)
    home = (f[:, 8] > 0.5).long()
    return (slot * N_ACTIONS + action) * 2 + home


@dataclass
class HistoryPilot:
    decay: float = 0.5
    sums: torch.Tensor = field(default_factory=lambda: torch.zeros(N_KEYS, dtype=torch.float64))
    weights: torch.Tensor = field(
        default_factory=lambda: torch.zeros(N_KEYS, dtype=torch.float64))

    def estimate(self, keys: torch.Tensor) -> torch.Tensor | None:
        """(B,) pilot of pairs with these keys, in [0, 1]; None before any release."""
        total = float(self.weights.sum())
        if total <= 0:
            return None
        overall = float(self.sums.sum()) / total
        w = self.weights[keys]
        est = torch.where(w > 0, self.sums[keys] / w.clamp_min(1e-300),
                          torch.full_like(w, overall))
        return est.clamp(0, 1)

    def update(self, keys: torch.Tensor, released: torch.Tensor) -> None:
        """Add a round's released (noisy) mean rewards of pairs with these keys."""
        r = released.detach().double().cpu().clamp(0, 1)
        self.sums = self.decay * self.sums + torch.bincount(keys, r, minlength=N_KEYS)
        self.weights = self.decay * self.weights + torch.bincount(
            keys, minlength=N_KEYS).double()

    def state_dict(self) -> dict:
        return {"decay": self.decay, "sums": self.sums.clone(), "weights": self.weights.clone()}

    @classmethod
    def from_state_dict(cls, sd: dict) -> HistoryPilot:
        return cls(float(sd["decay"]), sd["sums"].clone(), sd["weights"].clone())

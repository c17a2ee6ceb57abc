"""One step of a rank's per-user critics, with what every step of the rank shares.

Apart from models/train.py because the step is the critics' own: the rounds and the critics'
private pretraining take the same step, and neither needs the trainer's state beyond it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.critic_training import critic_update
from models.critics import BatchedAdam, BatchedCritics, CriticLoss, Minibatch, sample_batches


@dataclass(frozen=True)
class CriticStep:
    """What every critic step of a rank shares: its critics and their optimiser, its users'
    padded real pairs and their counts, the number of users the draws are made for, and the
    loss (minibatch size, bce or wgan, the gradient penalty's weight)."""

    critics: BatchedCritics
    opt: BatchedAdam
    real: torch.Tensor
    counts: torch.Tensor
    n_total: int
    batch: int
    kind: str
    lambda_gp: float

    def rows(self, generated: torch.Tensor, users: torch.Tensor, rows: torch.Tensor,
             gen: torch.Generator) -> torch.Tensor:
        """One step of the critics `users` (local indices; global indices `rows`). The
        minibatch draws are made for all `n_total` users and each user takes its own row, so
        a user's batch does not depend on how users are sharded. Returns (A,) losses."""
        n_total, batch = self.n_total, self.batch
        u_real = torch.rand((n_total, batch), generator=gen)[rows]
        u_gen = torch.randint(generated.shape[0], (n_total, batch), generator=gen)[rows]
        alpha = torch.rand((n_total, batch, 1), generator=gen)[rows]
        if users.numel() == 0:
            return torch.zeros(0)
        dev = self.real.device  # draws and indices on the CPU (users, counts), rows on `dev`
        ridx = (u_real * self.counts[users][:, None]).long()
        real_b = self.real[users[:, None].to(dev), ridx.to(dev)]
        mb = Minibatch(real_b, generated[u_gen.to(dev)], alpha.to(dev))
        return critic_update(self.critics, self.opt, mb, users, self.loss)

    def own_draws(self, generated: torch.Tensor, users: torch.Tensor,
                  gen: torch.Generator) -> torch.Tensor:
        """One step of the critics `users` with minibatches drawn for those users alone
        (`critics.sample_batches`: each reads its own user's rows of `real`), so a user's batch
        depends on who else steps; `n_total` is not read. Returns (A,) losses."""
        mb = sample_batches(self.real, self.counts, generated, users, self.batch, gen)
        return critic_update(self.critics, self.opt, mb, users, self.loss)

    @property
    def loss(self) -> CriticLoss:
        return CriticLoss(self.kind, self.lambda_gp)

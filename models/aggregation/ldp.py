"""LDP reward aggregation: each user perturbs its own rewards before sending them.

Guarantee: epsilon-LDP per user and batch: the neighbouring relation is any two values of that
user's reward vector in [0, 1]^B (so the server need not be trusted). Per-sample L1 sensitivity
of one user's reward is 1.
Budget per user and batch (noise = lambda is the per-user Laplace scale of the uniform variant):
- uniform (sensitivity_aware=False): R~_u = R_u + Lap(lambda): 1/lambda per sample, B/lambda
  per batch;
- sensitivity-aware: every user derives the same eps_u(s,a) = (B / lambda) * w / sum(w),
  w = 1 - R_p + delta', from a published pilot R_p, and sends R_u + Lap(1/eps_u(s,a)). The pilot
  is either the previous rounds' published means of pairs with the same public key
  (`pilot="history"`, free: `models.aggregation.pilot`; uniform weights before the first
  release) or a paid pilot round R~_u + Lap(lambda / pilot_fraction) (`pilot="laplace"`,
  pilot_fraction * B / lambda more per user).
No rank ever sums unperturbed rewards: `perturbed_moments` adds each user's own noise row before
the sum, and only those sums cross ranks. The epsilon is LOCAL: per user and round, against any
two reward vectors of that user (the server is not trusted).
The server only averages; compensation uses the variance of the noisy rewards minus the known
noise variance 2 * scale^2 (post-processing, no extra budget).
Citations: PateGAIL++ section on LDP; Kasiviswanathan et al. 2011 (local DP).
Runtime: O(A * B) per rank. Utility: noise of the mean ~ sqrt(2 / N) * scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import dp_accounting
import torch

from models.aggregation.base import (
    LocalRewards,
    Release,
    Spend,
    check_common,
    compensate,
    laplace,
    refuse_normaliser,
)
from models.aggregation.sensitivity import laplace_events, per_sample_budgets
from models.config import DEFAULT_PILOT
from models.critics import Moments
from udfs.errors import InvalidParameterError


def ldp_noise(n_users_total: int, b: int, gen: torch.Generator) -> torch.Tensor:
    """(n_users_total, B) standard Laplace, drawn once; a rank uses the rows of its users, so the
    result does not depend on how users are sharded."""
    return laplace((n_users_total, b), gen)


def perturbed_moments(rewards: torch.Tensor, scale: torch.Tensor, noise_rows: torch.Tensor
                      ) -> Moments:
    """Seam: moments of the users' locally perturbed rewards (what a rank all-reduces)."""
    r = rewards.double() + scale[None, :] * noise_rows
    return Moments(r.sum(0), (r * r).sum(0), int(rewards.shape[0]))


@dataclass(frozen=True)
class LdpReward:
    noise: float
    sensitivity_aware: bool = True
    pilot_fraction: float = 0.1
    delta_prime: float = 0.1
    beta: float = 0.0
    pilot: str = DEFAULT_PILOT  # "history" (free, `prior` given) | "laplace" (a paid pilot round)
    local: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)
        if self.pilot not in ("laplace", "history"):
            raise InvalidParameterError(f"pilot must be 'laplace' or 'history'; got {self.pilot}")
        if not self.pilot_fraction > 0 or not self.delta_prime > 0:
            raise InvalidParameterError("pilot_fraction and delta_prime must be > 0; got "
                                        f"{self.pilot_fraction}, {self.delta_prime}")

    def release(self, data: LocalRewards, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None, normaliser: float | None = None) -> Release:
        """`data`: the participating users' rewards (A, B), their global user indices and the
        cross-rank reduce (:class:`LocalRewards`); `prior`: the free (B,) pilot of
        `pilot="history"` (None: uniform weights). Only perturbed values cross `data.reduce`
        (an all-reduce when users are sharded over ranks; identity in one process).
        """
        refuse_normaliser(normaliser, "the LDP scheme")
        rewards, rows, n_users_total = data.rewards, data.rows, data.n_users_total
        reduce = data.reduce or (lambda m: m)
        b = rewards.shape[1]
        eps_batch, pilot = b / self.noise, None
        total = eps_batch
        if self.sensitivity_aware and self.pilot == "history":
            pilot = None if prior is None else prior.double().clamp(0, 1)
            eps = (per_sample_budgets(pilot, eps_batch, self.delta_prime) if pilot is not None
                   else torch.full((b,), 1.0 / self.noise, dtype=torch.float64))
        elif self.sensitivity_aware:
            scale_p = self.noise / self.pilot_fraction
            spend(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(scale_p), b))
            noise = ldp_noise(n_users_total, b, gen)[rows]
            mom = reduce(perturbed_moments(
                rewards, torch.full((b,), scale_p, dtype=torch.float64), noise))
            pilot = (mom.sum / mom.count).clamp(0, 1)
            eps = per_sample_budgets(pilot, eps_batch, self.delta_prime)
            total += self.pilot_fraction * eps_batch
        else:
            eps = torch.full((b,), 1.0 / self.noise, dtype=torch.float64)
        spend(laplace_events(eps) if self.sensitivity_aware else dp_accounting.SelfComposedDpEvent(
            dp_accounting.LaplaceDpEvent(self.noise), b))
        scale = 1.0 / eps
        mom = reduce(perturbed_moments(rewards, scale, ldp_noise(n_users_total, b, gen)[rows]))
        n = mom.count
        mean = mom.sum / n
        var_noisy = None
        if self.beta > 0 and n > 1:
            var_noisy = (mom.sumsq / n - mean ** 2) - 2 * scale ** 2
        rewards_hat, xi = compensate(mean, var_noisy, self.beta)
        return Release(rewards_hat, mean, xi, eps, pilot, total)

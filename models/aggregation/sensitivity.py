"""PateGAIL++ sensitivity-aware aggregation (central model).

Guarantee: user-level (replace one user's whole data; see base.py and models/PROOF.md).
Budget, for a batch of B samples and N participating users (Delta_f = 1/N):
  1. pilot, `pilot="history"` (default): R_p = the previous rounds' released rewards of pairs with
     the same public key (`models.aggregation.pilot`), post-processing, no budget; no pilot yet
     (first round): uniform weights, i.e. exactly PateGAIL's release;
     `pilot="laplace"` (the paper's): R_p = clip(mean + Lap(Delta_f / eps_p), 0, 1),
     eps_p = pilot_fraction * eps_batch / B per sample (pilot_fraction * eps_batch in all);
  2. weights w = 1 - R_p + delta' (a function of the public pilot only: post-processing),
     eps(s,a) = eps_batch * w / sum(w) with eps_batch = B * Delta_f / lambda, so the per-sample
     budgets sum to the matched PateGAIL total;
  3. R = mean + Lap(Delta_f / eps(s,a)): the composition over the batch costs sum eps = eps_batch;
  4. compensation (beta > 0): Var + Lap(Delta_v / eps(s,a)), another eps_batch.
Total per batch (basic composition):
  ([laplace pilot] * pilot_fraction + 1 + [beta > 0]) * eps_batch.
Citations: PateGAIL++ (ICLR 2025, oral); Dwork & Roth 2014.
Runtime: O(B). Utility: samples that look like some user's behaviour (R_p near 1) get a smaller
budget and more noise; common samples get less noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import torch

from models.aggregation.base import Release, check_common, compensate, delta_f, delta_v, laplace
from models.critics import Moments
from udfs.errors import InvalidParameterError


def per_sample_budgets(pilot: torch.Tensor, eps_batch: float, delta_prime: float) -> torch.Tensor:
    """eps(s,a) = eps_batch * w / sum(w), w = 1 - clip(R_p, 0, 1) + delta'."""
    w = 1.0 - pilot.clamp(0, 1) + delta_prime
    return eps_batch * w / w.sum()


def laplace_events(eps: torch.Tensor) -> dp_accounting.DpEvent:
    """One Laplace event per sample (noise multiplier 1/eps_i)."""
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.LaplaceDpEvent(float(1.0 / e)) for e in eps.tolist()])


@dataclass(frozen=True)
class SensitivityAware:
    noise: float
    pilot_fraction: float = 0.1
    delta_prime: float = 0.1
    beta: float = 0.0
    pilot: str = "laplace"  # "laplace" (paid, the paper's) | "history" (free, `prior` given)

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)
        if self.pilot not in ("laplace", "history"):
            raise InvalidParameterError(f"pilot must be 'laplace' or 'history'; got {self.pilot}")
        if not 0 < self.pilot_fraction:
            raise InvalidParameterError(f"pilot_fraction must be > 0; got {self.pilot_fraction}")
        if not self.delta_prime > 0:
            raise InvalidParameterError(f"delta_prime must be > 0; got {self.delta_prime}")

    def eps_batch(self, n: int, b: int) -> float:
        return b * delta_f(n) / self.noise

    def release(self, mom: Moments, *, gen: torch.Generator,
                spend: Callable[[dp_accounting.DpEvent], object],
                prior: torch.Tensor | None = None) -> Release:
        """`prior`: the free (B,) pilot of `pilot="history"` (None: uniform weights)."""
        n, b = mom.count, mom.sum.shape[0]
        df, eps_batch = delta_f(n), self.eps_batch(n, b)
        mean = mom.sum / n
        total = eps_batch
        if self.pilot == "laplace":
            eps_p = self.pilot_fraction * eps_batch / b
            spend(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1.0 / eps_p), b))
            pilot = (mean + (df / eps_p) * laplace((b,), gen)).clamp(0, 1)
            total += self.pilot_fraction * eps_batch
        else:
            pilot = None if prior is None else prior.double().clamp(0, 1)
        eps = (per_sample_budgets(pilot, eps_batch, self.delta_prime) if pilot is not None
               else torch.full((b,), eps_batch / b, dtype=torch.float64))
        spend(laplace_events(eps))
        noisy = mean + (df / eps) * laplace((b,), gen)
        var_noisy = None
        if self.beta > 0 and n > 1:
            spend(laplace_events(eps))
            var = (mom.sumsq / n - mean ** 2).clamp_min(0)
            var_noisy = var + (delta_v(n) / eps) * laplace((b,), gen)
            total += eps_batch
        rewards, xi = compensate(noisy, var_noisy, self.beta)
        return Release(rewards, noisy, xi, eps, pilot, total)

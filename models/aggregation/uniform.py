"""PateGAIL's uniform Laplace aggregation.

Guarantee: user-level (replace one user's whole data; see base.py). Per sample,
R(s,a) = mean_u R_u + Lap(lambda) is (Delta_f / lambda)-DP with Delta_f = 1/N; a batch of B
samples is a B-fold composition: eps_batch = B * Delta_f / lambda (= B / (N lambda)).
Budget: with compensation (beta > 0) the variance is released with Lap(lambda * Delta_v /
Delta_f), i.e. the same per-sample epsilon, so the batch costs 2 * eps_batch.
Citations: Wang et al., PateGail (NeurIPS 2023); Dwork & Roth 2014 (Laplace mechanism).
Runtime: O(B). Utility: noise std sqrt(2) * lambda per sample, independent of N.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import torch

from models.aggregation.base import Release, check_common, compensate, delta_f, delta_v, laplace
from models.critics import Moments


@dataclass(frozen=True)
class UniformLaplace:
    noise: float
    beta: float = 0.0

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)

    def epsilon_per_sample(self, n: int) -> float:
        return delta_f(n) / self.noise

    def release(self, mom: Moments, *, gen: torch.Generator,
                spend: Callable[[dp_accounting.DpEvent], object]) -> Release:
        n, b = mom.count, mom.sum.shape[0]
        mult = self.noise / delta_f(n)  # noise scale / sensitivity
        mean = mom.sum / n
        spend(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(mult), b))
        noisy = mean + self.noise * laplace((b,), gen)
        var_noisy, eps_total = None, b / mult
        if self.beta > 0 and n > 1:
            spend(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(mult), b))
            var = (mom.sumsq / n - mean ** 2).clamp_min(0)
            var_noisy = var + mult * delta_v(n) * laplace((b,), gen)
            eps_total *= 2
        rewards, xi = compensate(noisy, var_noisy, self.beta)
        eps = torch.full((b,), 1.0 / mult, dtype=torch.float64)
        return Release(rewards, noisy, xi, eps, None, eps_total)

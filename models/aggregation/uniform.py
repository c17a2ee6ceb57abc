"""PateGAIL's uniform Laplace aggregation.

Guarantee: user-level (replace one user's whole data; see base.py). Per sample,
R(s,a) = mean_u R_u + Lap(lambda) is (Delta_f / lambda)-DP with Delta_f = 1/N; a batch of B
samples is a B-fold composition: eps_batch = B * Delta_f / lambda (= B / (N lambda)).
Budget: with compensation (beta > 0) the variance is released with Lap(lambda * Delta_v /
Delta_f), i.e. the same per-sample epsilon, so the batch costs 2 * eps_batch.
Citations: Wang et al., PateGail (NeurIPS 2023); Dwork & Roth 2014 (Laplace mechanism).
Runtime: O(B). Utility: noise std sqrt(2) * lambda per sample, independent of N.

`UniformGaussian` (`mechanism="gaussian"`): the same mean with Gaussian noise, see its docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import dp_accounting
import torch

from models.aggregation.base import (
    Release,
    Spend,
    check_common,
    compensate,
    delta_f,
    delta_v,
    gaussian,
    gaussian_epsilon,
    laplace,
    refuse_normaliser,
)
from models.critics import Moments
from udfs.errors import InvalidParameterError


@dataclass(frozen=True)
class UniformLaplace:
    noise: float
    beta: float = 0.0
    local: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)

    def epsilon_per_sample(self, n: int) -> float:
        return delta_f(n) / self.noise

    def release(self, mom: Moments, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None, normaliser: float | None = None) -> Release:
        """`prior` is not read (uniform: no pilot)."""
        refuse_normaliser(normaliser, "the uniform Laplace scheme")
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
        sd = torch.full((b,), math.sqrt(2) * self.noise, dtype=torch.float64)
        return Release(rewards, noisy, xi, eps, None, eps_total, sd)


@dataclass(frozen=True)
class UniformGaussian:
    """PateGAIL's uniform aggregation with Gaussian noise (`mechanism="gaussian"`).

    Guarantee: user-level. Replacing one user moves each of the B released means by at most
    Delta_f = 1/N (base.py), so the mean VECTOR moves by at most sqrt(B) * Delta_f in L2 norm.
    R = mean + N(0, sigma^2) per sample, sigma = `noise` (the Gaussian standard deviation, not a
    Laplace scale), is one Gaussian mechanism on that vector: its privacy loss is the one of a
    1-D Gaussian with noise multiplier sigma / (sqrt(B) * Delta_f) (the privacy loss of
    N(x, sigma^2 I) against N(x', sigma^2 I) depends on x - x' only through |x - x'|_2),
    recorded as ONE GaussianDpEvent per batch (not B events). Poisson rounds
    (`normaliser` = q * N, the public expected number of participants): the released mean is
    sum / (q N), whose per-sample sensitivity under adding or removing one user is 1 / (q N);
    the trainer wraps the event in PoissonSampledDpEvent (models/PROOF.md section 8).
    Budget: with compensation (beta > 0; fixed-size rounds only) the variance is released with
    sd sigma * Delta_v / Delta_f, the same multiplier (L2 sensitivity sqrt(B) * Delta_v): a
    second GaussianDpEvent. A Gaussian has no pure epsilon; `epsilon_spent` is the batch's
    (epsilon, delta) alone at `delta` (RDP); the accountant composes the ledger.
    Citations: Dwork & Roth 2014 (app. A, Gaussian mechanism); Mironov 2017 (RDP); Balle & Wang
    2018 (analytic Gaussian mechanism).
    Runtime: O(B). Utility: noise sd sigma per sample (Laplace: sqrt(2) lambda). Over many
    releases the composed Laplace batch also behaves like a Gaussian, but at equal sd it carries
    twice the squared per-sample loss (eps_i^2 = 2 mu_i^2), so the Gaussian reaches a given
    epsilon with less noise (bench/accounting_levers.py measures by how much).
    """

    noise: float
    beta: float = 0.0
    delta: float = 1e-5  # only for the per-batch `epsilon_spent` figure
    local: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)

    def multiplier(self, n: float, b: int) -> float:
        """Noise sd / L2 sensitivity of the batch's mean vector."""
        return self.noise / (math.sqrt(b) * delta_f(n))

    def release(self, mom: Moments, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None, normaliser: float | None = None) -> Release:
        """`normaliser`: the public divisor of a Poisson round (q * N); None: mom.count.
        `prior` is not read (uniform: no pilot)."""
        if normaliser is not None and self.beta > 0:
            raise InvalidParameterError("the variance release needs fixed-size rounds (beta = 0 "
                                        "with a public normaliser)")
        n, b = (mom.count if normaliser is None else normaliser), mom.sum.shape[0]
        mult = self.multiplier(n, b)
        mean = mom.sum / n
        events = [dp_accounting.GaussianDpEvent(mult)]
        spend(events[0])
        noisy = mean + self.noise * gaussian((b,), gen)
        var_noisy = None
        if self.beta > 0 and mom.count > 1:
            events.append(dp_accounting.GaussianDpEvent(mult))
            spend(events[1])
            var = (mom.sumsq / n - mean ** 2).clamp_min(0)
            var_noisy = var + self.noise * (delta_v(n) / delta_f(n)) * gaussian((b,), gen)
        rewards, xi = compensate(noisy, var_noisy, self.beta)
        mu = torch.full((b,), delta_f(n) / self.noise, dtype=torch.float64)
        return Release(rewards, noisy, xi, mu, None,
                       gaussian_epsilon(dp_accounting.ComposedDpEvent(events), self.delta),
                       torch.full((b,), self.noise, dtype=torch.float64))

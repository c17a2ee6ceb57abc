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

`SensitivityAwareGaussian` (`mechanism="gaussian"`): the same weights steering the per-sample sd
of one Gaussian mechanism matched to PateGAIL's; see its docstring.
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
from models.config import DEFAULT_PILOT
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
    pilot: str = DEFAULT_PILOT  # "history" (free, `prior` given) | "laplace" (paid, the paper's)
    local: ClassVar[bool] = False

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

    def release(self, mom: Moments, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None, normaliser: float | None = None) -> Release:
        """`prior`: the free (B,) pilot of `pilot="history"` (None: uniform weights)."""
        refuse_normaliser(normaliser, "the sensitivity-aware Laplace scheme")
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
        return Release(rewards, noisy, xi, eps, pilot, total, math.sqrt(2) * df / eps)


def gaussian_scales(pilot: torch.Tensor | None, sigma: float, b: int, delta_prime: float
                    ) -> torch.Tensor:
    """(B,) sd sigma_i = sigma * sqrt(sum(w) / (B * w_i)), w = 1 - clip(R_p, 0, 1) + delta'
    (sigma_i = sigma without a pilot): sum_i sigma_i^-2 = B / sigma^2 (see
    SensitivityAwareGaussian)."""
    if pilot is None:
        return torch.full((b,), float(sigma), dtype=torch.float64)
    w = 1.0 - pilot.double().clamp(0, 1) + delta_prime
    return sigma * torch.sqrt(w.sum() / (b * w))


def gaussian_multiplier_of(sd: torch.Tensor, df: float) -> float:
    """Noise multiplier of N(0, diag(sd^2)) on a vector whose every coordinate moves by at most
    df: 1 / sqrt(sum_i (df / sd_i)^2) (computed from the sds actually used)."""
    return float(1.0 / torch.sqrt(((df / sd) ** 2).sum()))


@dataclass(frozen=True)
class SensitivityAwareGaussian:
    """PateGAIL++'s sensitivity-aware release with Gaussian noise (`mechanism="gaussian"`).

    Guarantee: user-level, as SensitivityAware. Replacing a user moves each coordinate of the
    (B,) mean by at most Delta_f (1/N; Poisson rounds 1/(q N) with the public normaliser).
    Adding N(0, sigma_i^2) to coordinate i is one Gaussian mechanism with heterogeneous scales:
    dividing coordinate i by sigma_i (a bijection, so post-processing both ways: the same
    privacy loss) turns the release into N(mean / sigma, I), whose centre moves by at most
    sqrt(sum_i (Delta_f / sigma_i)^2) =: 1 / m in L2 between neighbours. So the release has the
    privacy loss of a 1-D Gaussian with noise multiplier m, recorded as ONE GaussianDpEvent(m)
    with m computed from the sigma_i used (`gaussian_multiplier_of`).
    Budget: the sigma_i are chosen from the pilot (a function of earlier releases only:
    `pilot="history"`, free; no pilot in round 1: sigma_i = sigma, exactly UniformGaussian) so
    that m equals the uniform scheme's multiplier sigma / (sqrt(B) Delta_f) at the same `noise`
    (matched budget): coordinate i receives the share w_i / sum(w) of the batch's squared budget
    1/m^2 (in zCDP terms rho_i = mu_i^2 / 2 adds up over coordinates the way eps_i does in the
    Laplace scheme), w = 1 - R_p + delta' as in SensitivityAware: sigma_i = sigma *
    sqrt(sum(w) / (B w_i)), and sum_i (Delta_f / sigma_i)^2 = B Delta_f^2 / sigma^2 for ANY
    weights. Unlike the Laplace version, uneven weights cost nothing extra: the matched
    multiplier is exact, so the first-round plan (models.budget) is also every round's cost.
    Compensation (beta > 0, fixed-size rounds): variance + N(0, (sigma_i Delta_v / Delta_f)^2),
    the same multiplier, a second GaussianDpEvent. The paid Laplace pilot is not offered here.
    Citations: PateGAIL++ (ICLR 2025); Dwork & Roth 2014 (app. A); Bun & Steinke 2016 (zCDP).
    Runtime: O(B). Utility: more noise where the pilot's reward is high (a pair that looks like
    some user's behaviour), less where it is low, at the uniform scheme's privacy cost.
    """

    noise: float
    delta_prime: float = 0.1
    beta: float = 0.0
    delta: float = 1e-5  # only for the per-batch `epsilon_spent` figure
    local: ClassVar[bool] = False

    def __post_init__(self) -> None:
        check_common(self.noise, self.beta)
        if not self.delta_prime > 0:
            raise InvalidParameterError(f"delta_prime must be > 0; got {self.delta_prime}")

    def release(self, mom: Moments, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None, normaliser: float | None = None) -> Release:
        """`prior`: the free (B,) history pilot (None: uniform sds); `normaliser`: the public
        divisor of a Poisson round (q * N; None: mom.count)."""
        if normaliser is not None and self.beta > 0:
            raise InvalidParameterError("the variance release needs fixed-size rounds (beta = 0 "
                                        "with a public normaliser)")
        n, b = (mom.count if normaliser is None else normaliser), mom.sum.shape[0]
        df = delta_f(n)
        pilot = None if prior is None else prior.double().clamp(0, 1)
        sd = gaussian_scales(pilot, self.noise, b, self.delta_prime)
        mult = gaussian_multiplier_of(sd, df)
        mean = mom.sum / n
        events = [dp_accounting.GaussianDpEvent(mult)]
        spend(events[0])
        noisy = mean + sd * gaussian((b,), gen)
        var_noisy = None
        if self.beta > 0 and mom.count > 1:
            events.append(dp_accounting.GaussianDpEvent(mult))
            spend(events[1])
            var = (mom.sumsq / n - mean ** 2).clamp_min(0)
            var_noisy = var + sd * (delta_v(n) / df) * gaussian((b,), gen)
        rewards, xi = compensate(noisy, var_noisy, self.beta)
        return Release(rewards, noisy, xi, df / sd, pilot,
                       gaussian_epsilon(dp_accounting.ComposedDpEvent(events), self.delta), sd)

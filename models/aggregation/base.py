"""Shared pieces of the aggregation schemes: noise, sensitivities, compensation, release record.

Neighbouring relation (all central schemes): two training sets that differ in ONE USER'S WHOLE
DATA (replace-one, user-level), with the set of N participating users of the round public. A
user's data enters a round only through that user's critic, so the reward vector R_u(.) of one
user may change arbitrarily inside [0, 1]^B while every other R_v stays fixed (the generated batch
and the other critics depend on other users' data and on earlier releases only, which adaptive
composition handles). Hence, per generated sample:
  mean  m = (1/N) sum_u R_u            Delta_f = 1/N
  var   v = (1/N) sum_u (R_u - m)^2    Delta_v = (N - 1) / N^2   (derivation in models/PROOF.md)
and over a batch of B samples the user's change touches all B coordinates, so the batch's
user-level privacy loss is the composition over its B per-sample releases (Laplace), or, seen as
one vector, a change of L2 norm at most sqrt(B) * Delta_f (Gaussian: one mechanism per batch).
Poisson user sampling (`sampling="poisson"`, Gaussian only) changes the relation to add/remove
one user with a public normaliser (`normaliser`; models/PROOF.md section 8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import dp_accounting
import torch
from dp_accounting.rdp import RdpAccountant

from models.critics import Moments
from udfs.errors import InvalidParameterError


def laplace(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Standard Laplace(0, 1) draws as the difference of two Exp(1) (float64)."""
    e = torch.empty((2, *shape), dtype=torch.float64).exponential_(generator=gen)
    return e[0] - e[1]


def gaussian(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Standard normal draws (float64)."""
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def delta_f(n: float) -> float:
    """Per-sample sensitivity of a mean of n rewards in [0, 1] under user replacement, or of a
    sum divided by a public normaliser n (Poisson rounds: n = q * N) under add/remove."""
    if not n > 0:
        raise InvalidParameterError(f"need at least one participating user; got {n}")
    return 1.0 / n


def delta_v(n: int) -> float:
    """L1 sensitivity of the population variance of n rewards in [0, 1] (0 for n = 1)."""
    return (n - 1) / (n * n)


def gaussian_epsilon(events: dp_accounting.DpEvent, delta: float) -> float:
    """(epsilon, delta) of Gaussian events alone (RDP), the per-batch figure of a Release."""
    acc = RdpAccountant()
    acc.compose(events)
    return float(acc.get_epsilon(delta))


def compensate(mean: torch.Tensor, var_noisy: torch.Tensor | None, beta: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamics compensation R^ = R - beta * sqrt(max(0, Var + noise)) (post-processing)."""
    if var_noisy is None or beta == 0:
        return mean, torch.zeros_like(mean)
    xi = var_noisy.clamp_min(0).sqrt()
    return mean - beta * xi, xi


@dataclass
class Release:
    """What a scheme publishes for one batch (all float64 (B,) except the scalars)."""

    rewards: torch.Tensor  # R^ fed to PPO
    mean: torch.Tensor  # noisy mean R
    xi: torch.Tensor  # compensation term (0 when off)
    # Laplace: epsilon of each sample's mean release; Gaussian: its Gaussian-DP share
    # mu_i = Delta_f / sigma_i (the batch's mu is the L2 norm of these)
    eps_per_sample: torch.Tensor
    pilot: torch.Tensor | None
    # Laplace: basic-composition epsilon of this batch (all its releases); Gaussian (no pure
    # epsilon): the batch's (epsilon, delta) alone, RDP at the scheme's delta
    epsilon_spent: float
    noise_sd: torch.Tensor | None = None  # sd of the noise of each sample's mean release


@dataclass(frozen=True)
class LocalRewards:
    """What a local scheme releases from: the participating users' own rewards, which never
    leave their rank unperturbed. `rewards`: (A, B) of this rank's users; `rows`: their global
    user indices (rows of the shared noise table); `n_users_total`: the table's height;
    `reduce`: combines perturbed moments across ranks (None: one process)."""

    rewards: torch.Tensor
    rows: torch.Tensor
    n_users_total: int
    reduce: Callable[[Moments], Moments] | None = None


Spend = Callable[[dp_accounting.DpEvent], object]


@runtime_checkable
class RewardScheme(Protocol):
    """One aggregation scheme of per-user rewards into released rewards, behind one call.

    `local` schemes take :class:`LocalRewards` (each user perturbs its own rewards; the server
    never holds an exact aggregate), central ones the exact `Moments` of the round's
    participants (a trusted aggregator). `release` charges every DP event it draws noise for to
    `spend` before returning. `prior`: the free history pilot of a sensitivity-aware scheme
    (ignored by the uniform ones); `normaliser`: the public divisor of a Poisson round (Gaussian
    schemes only; the others refuse it)."""

    local: bool

    def release(self, data, *, gen: torch.Generator, spend: Spend,
                prior: torch.Tensor | None = None,
                normaliser: float | None = None) -> Release: ...


def refuse_normaliser(normaliser: float | None, scheme: str) -> None:
    """A Laplace round is B composed releases: no public normaliser (Poisson rounds) for it."""
    if normaliser is not None:
        raise InvalidParameterError(f"{scheme} takes no public normaliser: Poisson rounds are "
                                    "offered for the Gaussian schemes only")


def check_common(noise: float, beta: float) -> None:
    if not noise > 0:
        raise InvalidParameterError(f"noise (Laplace scale lambda or Gaussian sd sigma) must be "
                                    f"> 0; got {noise}")
    if beta < 0:
        raise InvalidParameterError(f"beta (dynamics compensation) must be >= 0; got {beta}")

"""Plan, then spend: what the start distribution and one round of training cost, before any
data is touched, and the noise that reaches a target epsilon.

Round 1 of every scheme has a known cost: no released reward exists yet, so the history pilot is
absent and the sensitivity-aware weights are uniform; a Laplace pilot (`pilot="laplace"`) costs
its fixed fraction. Later rounds of a sensitivity-aware scheme split the same basic-composition
budget unevenly, which the RDP/PLD accountant charges a little more for; the trainer's
accountant checks every release before it is drawn, so the plan is the floor, not the promise.
Central schemes: per-sample Laplace multiplier lambda * N (sensitivity 1/N); local schemes:
lambda per user (sensitivity 1, reported as local epsilon). Gaussian releases
(`mechanism="gaussian"`): one GaussianDpEvent per batch with multiplier sigma * N / sqrt(B)
(L2 sensitivity sqrt(B)/N); the sensitivity-aware Gaussian scheme matches that multiplier exactly
in every round, so for it the plan is the cost, not a floor. Poisson rounds
(`sampling="poisson"`): N is the public expected count q * N_total and each round's event is
wrapped in PoissonSampledDpEvent(q, .) (amplification; add/remove-one neighbouring).
With `pretrain="markov"` the first release is the DP Markov model at markov_share of the
target (`models.pretrain.markov_plan`, the plan the run charges) instead of the start
distribution, and the rounds are planned composed with it.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np

from models.accounting import PrivacyAccountant
from models.config import SCHEME_TRAITS, TrainConfig
from models.env import SLOTS
from models.starts import HierarchicalStarts, LocalStarts, kd_levels


def pairs_per_round(cfg: TrainConfig) -> int:
    return cfg.episodes_per_round * (SLOTS - 1)


def n_participants(cfg: TrainConfig, n_users: int) -> int:
    """Users of a fixed-size round (the expected count, rounded, of a Poisson round)."""
    return n_users if cfg.participation >= 1 else max(1, int(round(cfg.participation * n_users)))


def normaliser(cfg: TrainConfig, n_users: int) -> float:
    """The public N of the sensitivity 1/N: the fixed round's user count, or q * N_total."""
    if cfg.sampling == "poisson":
        return cfg.participation * n_users
    return float(n_participants(cfg, n_users))


def sampled(cfg: TrainConfig, event: dp_accounting.DpEvent) -> dp_accounting.DpEvent:
    """A round's event as charged: Poisson-sampled (amplified) or in full (fixed-size)."""
    if cfg.sampling == "poisson" and cfg.participation < 1:
        return dp_accounting.PoissonSampledDpEvent(cfg.participation, event)
    return event


def start_events(cfg: TrainConfig, coords: np.ndarray) -> dp_accounting.DpEvent:
    """What a run releases before round 1: the DP start distribution, or under
    `pretrain="markov"` the Markov release (whose start distribution the run uses instead)."""
    if cfg.pretrain == "markov":
        from models.pretrain import markov_events

        return markov_events(cfg, coords)
    if cfg.privacy_model == "local":
        return LocalStarts(cfg.start_hist_epsilon, cfg.start_tau).event()
    return HierarchicalStarts(cfg.start_hist_epsilon, len(kd_levels(coords)),
                              cfg.start_tau).events()


def round_events(cfg: TrainConfig, n_users: int, noise: float | None = None
                 ) -> dp_accounting.DpEvent:
    """The releases of the first round (uniform weights; see the module docstring)."""
    lam = cfg.noise if noise is None else noise
    b = pairs_per_round(cfg)
    local = cfg.privacy_model == "local"
    if cfg.mechanism == "gaussian":  # one Gaussian per batch, L2 sensitivity sqrt(B) / N
        g = dp_accounting.GaussianDpEvent(lam * normaliser(cfg, n_users) / math.sqrt(b))
        return sampled(cfg, dp_accounting.ComposedDpEvent([g, g] if cfg.beta > 0 else [g]))
    mult = lam if local else lam * n_participants(cfg, n_users)
    events = [dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(mult), b)]
    if SCHEME_TRAITS[cfg.scheme].sensitivity_aware and cfg.pilot == "laplace":
        events.append(dp_accounting.SelfComposedDpEvent(
            dp_accounting.LaplaceDpEvent(mult / cfg.pilot_fraction), b))
    if cfg.beta > 0 and not local:  # the variance release (LDP compensation is free)
        events.append(events[0])
    return dp_accounting.ComposedDpEvent(events)


def planned_epsilon(cfg: TrainConfig, n_users: int, coords: np.ndarray, rounds: int,
                    noise: float | None = None) -> float:
    """Epsilon at cfg.delta after the start distribution and `rounds` first-round costs."""
    acc = PrivacyAccountant(cfg.delta, None, cfg.accountant)
    acc.spend(start_events(cfg, coords))
    if rounds:
        acc.spend(dp_accounting.SelfComposedDpEvent(round_events(cfg, n_users, noise), rounds))
    return acc.epsilon()


def noise_for_epsilon(cfg: TrainConfig, n_users: int, coords: np.ndarray, rounds: int,
                      target: float, rel_tol: float = 1e-3) -> float:
    """The smallest noise lambda (bisection on log lambda) whose planned epsilon after `rounds`
    rounds stays <= target; ValueError when the start distribution alone passes it."""
    if planned_epsilon(cfg, n_users, coords, 0) >= target:
        raise ValueError(f"the start distribution alone costs more than epsilon {target}")
    lo, hi = 1e-6, 1.0
    while planned_epsilon(cfg, n_users, coords, rounds, hi) > target:
        lo, hi = hi, hi * 10
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        if planned_epsilon(cfg, n_users, coords, rounds, mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


def check_one_round(cfg: TrainConfig, n_users: int, coords: np.ndarray) -> float:
    """Refuse a run whose target cannot pay the start distribution and one round (it would
    stop at round 0, report ok and publish an untrained policy). Returns the planned epsilon
    of that first round."""
    from udfs.errors import BudgetExceededError

    start = planned_epsilon(cfg, n_users, coords, 0)
    one = planned_epsilon(cfg, n_users, coords, 1)
    first = ("DP Markov release (markov_share)" if cfg.pretrain == "markov"
             else "DP start distribution")
    if cfg.target_epsilon is not None and one > cfg.target_epsilon:
        try:
            need = f"noise >= {noise_for_epsilon(cfg, n_users, coords, 1, cfg.target_epsilon):.4g}"
        except ValueError:
            need = ("a smaller markov_share" if cfg.pretrain == "markov"
                    else f"start_hist_epsilon < {cfg.target_epsilon:g}")
        raise BudgetExceededError(
            f"target_epsilon={cfg.target_epsilon:g} cannot pay one round of {cfg.scheme}: the "
            f"{first} costs {start:.4g} and with one round ({pairs_per_round(cfg)} "
            f"generated pairs, {n_participants(cfg, n_users)} users, noise {cfg.noise:g}) the "
            f"total is {one:.4g} ({cfg.privacy_model} epsilon at delta={cfg.delta:g}); raise "
            f"target_epsilon to at least {one:.4g}, or set {need}")
    return one

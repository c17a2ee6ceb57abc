"""Direction granularity g (the paper's Eq. 8): average direction-preserving success probability.

score(g) = (1/|Theta|) * sum_{theta in Theta} sum_{d=0}^{g-1} phi(d; theta, g) * lambda(d; eps, g)
  Theta = {pi/2, pi/4, pi/6, pi/12}
  phi(d; theta, g) = |[(2d-1)pi/g, (2d+1)pi/g] ∩ [-theta, theta]| / (2 pi / g)   (angles mod 2 pi)
  lambda = e^eps / (g-1+e^eps) for d = 0, 1/(g-1+e^eps) otherwise (k-RR over g sectors)
g = argmax over {2, 4, 6, 12} (ties: the smaller g).
"""

from __future__ import annotations

import math
from functools import lru_cache

from udfs.budget import check_epsilon

CANDIDATES = (2, 4, 6, 12)
THETAS = tuple(math.pi / g for g in CANDIDATES)


def _overlap(lo: float, hi: float, theta: float) -> float:
    """|[lo, hi] ∩ [-theta, theta]| with [lo, hi] taken modulo 2 pi (shifts -2pi, 0, 2pi)."""
    tot = 0.0
    for s in (-2 * math.pi, 0.0, 2 * math.pi):
        a, b = max(lo + s, -theta), min(hi + s, theta)
        tot += max(0.0, b - a)
    return tot


def phi(d: int, theta: float, g: int) -> float:
    """Share of sector d's arc (width 2pi/g, centred on 2 pi d / g) inside [-theta, theta]."""
    return _overlap((2 * d - 1) * math.pi / g, (2 * d + 1) * math.pi / g, theta) / (2 * math.pi / g)


def score(g: int, epsilon: float) -> float:
    """Average direction-preserving success probability of k-RR over g sectors at epsilon."""
    eps = check_epsilon(epsilon)
    em = math.exp(-eps)  # lambda in overflow-free form: divide numerator and denominator by e^eps
    lam_true = 1.0 / (1.0 + (g - 1) * em)
    lam_other = em / (1.0 + (g - 1) * em)
    total = 0.0
    for theta in THETAS:
        total += sum(phi(d, theta, g) * (lam_true if d == 0 else lam_other) for d in range(g))
    return total / len(THETAS)


def choose_granularity(epsilon: float) -> int:
    """Granularity in {2, 4, 6, 12} maximising :func:`score` at `epsilon` (TP/ATP paper, Eq. 8).

    Pass the budget of ONE perturbed direction (what each k-RR call spends); `udfs.tp` and
    `udfs.atp` call this with their per-direction epsilon (see PROOF.md section 5).
    """
    return _choose(check_epsilon(epsilon))


@lru_cache(maxsize=4096)
def _choose(eps: float) -> int:  # pure function of eps; cached (called per length group)
    return max(CANDIDATES, key=lambda g: (score(g, eps), -g))

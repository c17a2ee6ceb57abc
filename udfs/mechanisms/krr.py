"""k-ary randomised response (k-RR) over {0, ..., k-1}."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import check_epsilon
from udfs.errors import InvalidParameterError


@dataclass(frozen=True)
class KRR:
    """k-RR: report the true value w.p. e^eps/(k-1+e^eps), each other value w.p. 1/(k-1+e^eps).

    Guarantee: eps-LDP for any two inputs x, x' in {0..k-1} (the probability of every output
        differs by at most a factor e^eps; for k = 1 the output is constant, 0-LDP).
    Budget: the whole `epsilon` is spent on one value; no internal split.
    Citations: Warner 1965; Kairouz, Oh, Viswanath 2014 ("Extremal mechanisms").
    Runtime: O(1) per value, vectorised (two uniform draws per value).
    Utility: the true value is the mode; Pr[true] -> 1 as eps grows, 1/k as eps -> 0.

    Probabilities are computed as 1/(1+(k-1)e^-eps), so eps = 1e6 neither overflows nor NaNs.
    """

    k: int
    eps: float

    def __post_init__(self):
        if not isinstance(self.k, int | np.integer) or self.k < 1:
            raise InvalidParameterError(f"k-RR needs an integer k >= 1, got k={self.k!r}")
        object.__setattr__(self, "eps", check_epsilon(self.eps, "k-RR epsilon"))

    @property
    def p_true(self) -> float:
        return 1.0 / (1.0 + (self.k - 1) * math.exp(-self.eps))

    @property
    def p_other(self) -> float:
        return math.exp(-self.eps) / (1.0 + (self.k - 1) * math.exp(-self.eps))

    @property
    def epsilon(self) -> float:
        """ln(max_y max_{x,x'} Pr[y|x]/Pr[y|x']), from the probabilities actually used."""
        if self.k == 1:
            return 0.0
        return math.log(self.p_true) - (-self.eps - math.log1p((self.k - 1) * math.exp(-self.eps)))

    def probabilities(self, x: int) -> np.ndarray:
        """Exact output distribution (length k) for input x."""
        p = np.full(self.k, self.p_other)
        p[int(x)] = self.p_true
        return p

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        """Vectorised: one perturbed value per element of x (int64 array)."""
        x = np.asarray(x, dtype=np.int64)
        if self.k == 1:
            return np.zeros_like(x)
        return krr_perturb(x, self.k, self.p_true, rng)


def krr_from_uniforms(x, k, p_true, u_keep, u_other) -> np.ndarray:
    """k-RR draws from given uniforms in [0, 1): keep iff u_keep < p_true, else the other value
    (x + 1 + floor(u_other (k - 1))) mod k (k >= 2 per element; scalars broadcast). The
    counter-based streams of `udfs.streams` supply the uniforms (bias of the floor < k/2^53).
    """
    x = np.asarray(x, dtype=np.int64)
    km1 = np.asarray(k, dtype=np.int64) - 1
    step = np.minimum((u_other * km1).astype(np.int64), km1 - 1)
    return np.where(u_keep < p_true, x, (x + 1 + step) % (km1 + 1))


def krr_perturb(x, k, p_true, rng: np.random.Generator) -> np.ndarray:
    """k-RR draws for values x with per-element k >= 2 and keep probability p_true (= the
    ``KRR(k, eps).p_true`` of each element; scalars broadcast): keep w.p. p_true, else a
    uniform other value (x + 1 + U{0..k-2}) mod k. `KRR.perturb` is this with scalar k."""
    x = np.asarray(x, dtype=np.int64)
    keep = rng.random(x.shape) < p_true
    other = (x + 1 + rng.integers(0, np.asarray(k) - 1, size=x.shape)) % k
    return np.where(keep, x, other)

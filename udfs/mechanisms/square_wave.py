"""Square wave (SW) mechanism on [0, 1] with output in [-b, 1+b]."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import check_epsilon
from udfs.errors import InvalidParameterError


def _sw_b(eps: float) -> float:
    """b = (eps e^eps - e^eps + 1) / (2 e^eps (e^eps - 1 - eps)), computed without overflow.

    Rewritten as (eps - 1 + e^-eps) / (2 (e^eps - 1 - eps)); Taylor series below 1e-3 (both
    numerator and denominator cancel catastrophically there); -> 1/2 as eps -> 0, -> 0 as
    eps -> inf. Privacy does not depend on b (density ratio is e^eps for any b > 0).
    """
    if eps < 1e-3:
        num = eps**2 / 2 + eps**3 / 3 + eps**4 / 8 + eps**5 / 30
        den = 2 * (1 + eps + eps**2 / 2) * (eps**2 / 2 + eps**3 / 6 + eps**4 / 24)
        return num / den
    if eps > 700:
        return max((eps - 1.0) * 0.5 * math.exp(-eps), 0.0)
    return (eps - 1.0 + math.exp(-eps)) / (2.0 * (math.expm1(eps) - eps))


@dataclass(frozen=True)
class SquareWave:
    """SW: density p = e^eps/(2b e^eps + 1) within b of the input, q = 1/(2b e^eps + 1) elsewhere.

    Guarantee: eps-LDP for any two inputs x, x' in [0, 1]: for every output y the density
        ratio is at most p/q = e^eps.
    Budget: the whole `epsilon` on one value.
    Citations: Li, Xiong, Jiang et al., "Estimating numerical distributions under local
        differential privacy", SIGMOD 2020.
    Runtime: O(1) per value, vectorised (two uniform draws).
    Utility: mass c/(c+1) within b of x, with c = 2 b e^eps; b ~ 1/2 at eps -> 0, -> 0 at large
        eps. For eps >~ 745, b underflows to 0 and the output equals the input.
    """

    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", check_epsilon(self.eps, "square-wave epsilon"))

    @property
    def b(self) -> float:
        return _sw_b(self.eps)

    @property
    def c(self) -> float:
        """2 b e^eps = (eps - 1 + e^-eps) / (1 - (1 + eps) e^-eps): mass ratio window/outside."""
        e = self.eps
        if e < 1e-3:
            return 2 * self.b * math.exp(e)
        return (e - 1.0 + math.exp(-e)) / (-math.expm1(-e) - e * math.exp(-e))

    @property
    def q(self) -> float:
        """Density outside the window (also the total probability outside it)."""
        return 1.0 / (self.c + 1.0)

    @property
    def p(self) -> float:
        """Density inside the window (inf if b underflowed to 0 at astronomically large eps)."""
        b = self.b
        return self.c / (2 * b) * self.q if b > 0 else math.inf

    @property
    def epsilon(self) -> float:
        """ln(p/q) from the densities actually used (sampler masses are c/(c+1), 1/(c+1))."""
        b = self.b
        if b == 0:
            return self.eps
        return math.log(self.c / (2 * b))

    def density(self, y, x) -> np.ndarray:
        y, x = np.asarray(y, float), np.asarray(x, float)
        b = self.b
        inside = np.abs(y - x) <= b
        dens = np.where(inside, self.p, self.q)
        return np.where((y < -b) | (y > 1 + b), 0.0, dens)

    def cdf(self, y, x) -> np.ndarray:
        """Exact Pr[output <= y | input x]."""
        y, x = np.asarray(y, float), np.asarray(x, float)
        b, p, q = self.b, self.p, self.q
        yc = np.clip(y, -b, 1 + b)
        below = np.clip(np.minimum(yc, x - b) + b, 0, None) * q
        win = np.clip(np.minimum(yc, x + b) - (x - b), 0, None) * (p if b > 0 else 0.0)
        above = np.clip(yc - (x + b), 0, None) * q
        out = below + win + above
        if b == 0:
            out = out + np.where(yc >= x, self.c * self.q, 0.0)
        return out

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        """Vectorised: window w.p. c/(c+1) (uniform in [x-b, x+b]), else uniform on the rest."""
        x = np.asarray(x, dtype=np.float64)
        if ((x < 0) | (x > 1) | ~np.isfinite(x)).any():
            raise InvalidParameterError("square wave input must lie in [0, 1]; normalise first")
        return self.from_uniforms(x, rng.random(x.shape), rng.random(x.shape))

    def from_uniforms(self, x, u_win, u) -> np.ndarray:
        """The same draw from two given uniforms in [0, 1) per value (`udfs.streams`)."""
        x = np.asarray(x, dtype=np.float64)
        b = self.b
        in_win = u_win < self.c * self.q
        win = x - b + 2 * b * u
        rest = np.where(u < x, u - b, u + b)  # [-b, x-b) ∪ [x+b, 1+b], total length 1
        return np.where(in_win, win, rest)

"""TraCS's piecewise mechanisms: a direction on the circle and a value in [0, 1].

Both put density e^(eps/2) x (uniform) on a window around the input and e^(-eps/2) x (uniform)
elsewhere, the window sized so the whole integrates to 1; so every output density differs by
exactly the factor e^eps between any two inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import check_epsilon

TWO_PI = 2.0 * math.pi


def _half(eps: float) -> float:
    """e^(eps/2), capped so huge budgets neither overflow nor NaN."""
    return math.exp(min(eps / 2.0, 700.0))


class _Window:
    """The arithmetic both mechanisms share: on a domain of length `DOMAIN`, a window of
    length DOMAIN/(e^(eps/2)+1) around the input holds mass e^(eps/2)/(e^(eps/2)+1), the rest
    1/(e^(eps/2)+1) (written without cancellation at large eps)."""

    DOMAIN = 1.0
    eps: float

    @property
    def window_len(self) -> float:
        return self.DOMAIN / (_half(self.eps) + 1.0)

    @property
    def p_in(self) -> float:
        """Probability mass of the window around the input."""
        s = _half(self.eps)
        return s / (s + 1.0)

    @property
    def p_out(self) -> float:
        """Mass of the rest of the domain."""
        return 1.0 / (_half(self.eps) + 1.0)

    @property
    def epsilon(self) -> float:
        """ln of the ratio of the two densities actually used."""
        inside = self.p_in / self.window_len
        outside = self.p_out / (self.DOMAIN - self.window_len)
        return math.log(inside) - math.log(outside)


@dataclass(frozen=True)
class CircularPiecewise(_Window):
    """Direction phi in [0, 2 pi) -> phi' in [0, 2 pi).

    Density e^(eps/2)/(2 pi) on the arc of length 2 pi/(e^(eps/2)+1) centred on phi, and
    e^(-eps/2)/(2 pi) on the rest of the circle.

    Guarantee: eps-LDP for any two directions (density ratio at most e^(eps/2)/e^(-eps/2)).
    Budget: the whole `eps` on one direction.
    Citations: Zheng and Hu, "TraCS: Trajectory Collection in Continuous Space under Local
        Differential Privacy", PETS 2026 (arXiv 2412.00620), Definition 3.1.
    Runtime: O(1) per value, vectorised (two uniform draws).
    Utility: Pr[output within the arc] = e^(eps/2)/(e^(eps/2)+1); the arc shrinks as e^(-eps/2).
    """

    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", check_epsilon(self.eps, "circular piecewise epsilon"))

    DOMAIN = TWO_PI

    @property
    def arc(self) -> float:
        return self.window_len

    def pdf(self, y, phi) -> np.ndarray:
        off = np.abs((np.asarray(y, float) - phi + math.pi) % TWO_PI - math.pi)
        return np.where(off <= self.arc / 2, self.p_in / self.arc,
                        self.p_out / (TWO_PI - self.arc))

    def cdf(self, y, phi: float) -> np.ndarray:
        """Exact Pr[output <= y] for y in [0, 2 pi] (closed form)."""
        y = np.asarray(y, float)
        lo, hi = (phi - self.arc / 2) % TWO_PI, (phi + self.arc / 2) % TWO_PI

        def in_arc_len(t):  # measure of [0, t] inside the arc
            if lo <= hi:
                return np.clip(t, lo, hi) - lo
            return np.clip(t, 0, hi) + np.clip(t, lo, TWO_PI) - lo

        inside = in_arc_len(y)
        return (inside * self.p_in / self.arc
                + (y - inside) * self.p_out / (TWO_PI - self.arc))

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, float)
        keep = rng.random(x.shape) < self.p_in
        u = rng.random(x.shape)
        a = self.arc
        y = np.where(keep, x - a / 2 + u * a, x + a / 2 + u * (TWO_PI - a))
        return y % TWO_PI


@dataclass(frozen=True)
class LinearPiecewise(_Window):
    """Value t in [0, 1] -> t' in [0, 1].

    Density e^(eps/2) on a window of length 1/(e^(eps/2)+1) centred on t (shifted to stay in
    [0, 1]), e^(-eps/2) elsewhere in [0, 1].

    Guarantee: eps-LDP for any two inputs in [0, 1] (density ratio at most e^eps).
    Budget: the whole `eps` on one value.
    Citations: Zheng and Hu, TraCS, PETS 2026 (arXiv 2412.00620), Definition 3.2.
    Runtime: O(1) per value, vectorised.
    Utility: Pr[output in the window] = e^(eps/2)/(e^(eps/2)+1); unlike the square wave the
        output stays in [0, 1].
    """

    eps: float

    def __post_init__(self):
        object.__setattr__(self, "eps", check_epsilon(self.eps, "linear piecewise epsilon"))

    @property
    def width(self) -> float:
        return self.window_len

    def window(self, t) -> np.ndarray:
        """Left end of the high-density window for input(s) t."""
        return np.clip(np.asarray(t, float) - self.width / 2, 0.0, 1.0 - self.width)

    def pdf(self, y, t: float) -> np.ndarray:
        y = np.asarray(y, float)
        lo = self.window(t)
        inside = (y >= lo) & (y <= lo + self.width)
        return np.where(inside, self.p_in / self.width, self.p_out / (1.0 - self.width))

    def cdf(self, y, t: float) -> np.ndarray:
        y = np.clip(np.asarray(y, float), 0.0, 1.0)
        lo = float(self.window(t))
        inside = np.clip(y, lo, lo + self.width) - lo
        return (inside * self.p_in / self.width
                + (y - inside) * self.p_out / (1.0 - self.width))

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, float)
        w = self.width
        lo = self.window(x)
        keep = rng.random(x.shape) < self.p_in
        u = rng.random(x.shape)
        out_u = u * (1.0 - w)
        y = np.where(keep, lo + u * w, np.where(out_u < lo, out_u, out_u + w))
        return np.clip(y, 0.0, 1.0)

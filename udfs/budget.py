"""Privacy-budget arithmetic that never rounds in the user's disfavour.

Every mechanism splits its epsilon with :func:`split` and reports what it spent with
:func:`total_up`. ``split`` guarantees the exact (rational) sum of the parts is at most the
total; ``total_up`` rounds the exact sum of float parts up to the next float. Together:
``total_up(split(eps, w)) <= eps`` and, in practice, equals eps or one ulp below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np

from udfs.errors import InvalidParameterError

MAX_CONFIG_EPSILON = 100.0  # the largest epsilon a configuration may name (collect, study)


def valid_epsilon(epsilon: float, at_most: float = math.inf) -> bool:
    """The one epsilon rule: finite, > 0 and at most `at_most` (a configured bound)."""
    return math.isfinite(epsilon) and 0.0 < epsilon <= at_most


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """Return epsilon as float, or raise InvalidParameterError if it is not finite and > 0."""
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise InvalidParameterError(
            f"{name}={epsilon!r} is not a number; pass a finite float > 0"
        ) from None
    if not valid_epsilon(eps):
        raise InvalidParameterError(
            f"{name}={epsilon!r} must be finite and > 0; pass e.g. {name}=1.0"
        )
    return eps


def total_up(parts) -> float:
    """Exact sum of float parts, rounded toward +inf (privacy rounds to the larger epsilon)."""
    exact = sum((Fraction(float(p)) for p in parts), Fraction(0))
    f = float(exact)
    if Fraction(f) < exact:
        f = math.nextafter(f, math.inf)
    return f


def times_up(cost: float, n: int) -> float:
    """n equal charges of `cost` added up exactly, rounded toward +inf (what `total_up` gives
    for n copies, without n Fractions)."""
    exact = Fraction(float(cost)) * int(n)
    f = float(exact)
    if Fraction(f) < exact:
        f = math.nextafter(f, math.inf)
    return f


def split(total: float, counts_weights: list[tuple[int, float]]) -> list[float]:
    """Split ``total`` into groups: group i gives each of its ``count_i`` steps
    ``total * weight_i / count_i``. Weights must sum to 1 over groups with count > 0.

    Returns one per-step value per group (0.0 for empty groups). Values are nudged down by ulps
    until the exact sum over all steps is <= total. Cached (a pure function of its arguments).
    """
    return list(_split(float(total), tuple((int(c), float(w)) for c, w in counts_weights)))


@lru_cache(maxsize=4096)
def _split(total: float, counts_weights: tuple[tuple[int, float], ...]) -> tuple[float, ...]:
    vals = [total * w / c if c > 0 else 0.0 for c, w in counts_weights]
    for _ in range(64):
        exact = sum(
            (Fraction(v) * c for v, (c, _) in zip(vals, counts_weights, strict=True)), Fraction(0)
        )
        if exact <= Fraction(total):
            return tuple(vals)
        i = max(range(len(vals)), key=lambda j: vals[j] * counts_weights[j][0])
        vals[i] = math.nextafter(vals[i], 0.0)
    raise AssertionError("budget split did not converge")  # unreachable for sane inputs


@dataclass(frozen=True)
class Step:
    """One randomised release inside a mechanism: which copy, what, where, how much epsilon."""

    copy: str  # "A" (pivots at odd positions), "B" (even) or "-" for single-copy mechanisms
    kind: str  # "anchor", "radius", "direction", "point"
    position: int  # trajectory position (for a direction: the non-pivot's position), -1 if none
    epsilon: float


@dataclass(frozen=True)
class BudgetRecord:
    """Every step a mechanism ran on one trajectory; ``spent`` is their sum rounded up."""

    mechanism: str
    length: int
    steps: tuple[Step, ...]

    @property
    def spent(self) -> float:
        return total_up(s.epsilon for s in self.steps)


class RecordedMechanism:
    """Shared by trajectory mechanisms that record their spend per length (TP, ATP, EXP).

    Subclasses define `record(n) -> BudgetRecord` and `perturb_batch(traj, lens, *, rng)`.
    """

    MAX_RECORDED_LENGTH = 16
    keyed = False  # perturb_batch takes a numpy Generator (True: a udfs.streams.Stream)

    @property
    def epsilon(self) -> float:
        """Largest spend over lengths 1..16 (computed from the step records, rounded up)."""
        return max(self.record(n).spent for n in range(1, self.MAX_RECORDED_LENGTH + 1))

    def perturb_group(self, traj, *, rng):
        """(N, n) trajectories of one length -> (N, n) outputs."""
        return self.perturb_batch(traj, np.full(traj.shape[0], traj.shape[1]), rng=rng)



def round_down(x: Fraction) -> float:
    """The largest float <= x (a budget left is reported rounded in the user's favour)."""
    f = float(x)
    return math.nextafter(f, -math.inf) if Fraction(f) > x else f


_INT_BOUND = 1 << 62  # |values| below this: int64 arithmetic and the float round trip are exact


def round_down_exact(lefts, group, cost: Fraction, times) -> np.ndarray:
    """Per row i: ``round_down(lefts[group[i]] - cost * times[i])`` without a Fraction per row.

    Why: the budget planner needs the exact budget left before each of a million trajectories.
    Floats are dyadic rationals, so every value is an integer over one power of two 2^s; the
    numerators fit int64 for any sane budget, and int64 -> float64 rounds to nearest, which one
    `nextafter` turns into rounding down; scaling by 2^-s is then exact (s <= 1022 keeps the
    result normal). Anything outside those bounds takes the exact per-row Fraction path.
    """
    group = np.asarray(group, dtype=np.int64)
    times = np.asarray(times, dtype=np.int64)
    if group.size == 0:
        return np.empty(0, dtype=np.float64)
    scale = math.lcm(cost.denominator, *(f.denominator for f in lefts))
    nums = [f.numerator * (scale // f.denominator) for f in lefts]
    c_num = cost.numerator * (scale // cost.denominator)
    shift = scale.bit_length() - 1
    fits = (
        scale == 1 << shift
        and shift <= 1022
        and c_num * int(times.max()) < _INT_BOUND
        and all(-_INT_BOUND < x < _INT_BOUND for x in nums)
    )
    if not fits:
        memo: dict[tuple[int, int], float] = {}
        out = np.empty(group.size, dtype=np.float64)
        for i, (g, t) in enumerate(zip(group.tolist(), times.tolist(), strict=True)):
            v = memo.get((g, t))
            if v is None:
                v = memo[(g, t)] = round_down(lefts[g] - cost * t)
            out[i] = v
        return out
    exact = np.asarray(nums, dtype=np.int64)[group] - np.int64(c_num) * times
    f = exact.astype(np.float64)
    over = f.astype(np.int64) > exact  # |f| <= 2^62, so the cast back is exact
    f[over] = np.nextafter(f[over], -np.inf)
    return np.ldexp(f, -shift)

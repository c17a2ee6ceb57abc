"""TP: trajectory perturbation by pivot sampling (DESIGN.md section 4; TP/ATP paper, Alg. 1-3).

The copy step (:func:`perturb_copy`) is shared with ATP, which runs it inside a region.
Row shapes: a length group is an (N, n) int64 array of location ids (N trajectories of length n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.granularity import CANDIDATES, choose_granularity
from udfs.mechanisms.krr import KRR
from udfs.sampling import Domains, em_sample
from udfs.space import LocationSpace

COPIES = (("A", 1), ("B", 0))  # copy A: pivots at odd positions; copy B: pivots at even ones


def check_granularity(granularity) -> str | int:
    if granularity == "auto":
        return "auto"
    if isinstance(granularity, int | np.integer) and int(granularity) in CANDIDATES:
        return int(granularity)
    raise InvalidParameterError(
        f"granularity={granularity!r} is not 'auto' or one of {CANDIDATES}; pick one of those"
    )


def resolve_granularity(granularity, eps_dir: float) -> int:
    """'auto' -> Eq. 8 at the per-direction budget eps_dir (PROOF.md section 5); else as given."""
    if granularity == "auto":
        return choose_granularity(eps_dir) if eps_dir > 0 else 12
    return int(granularity)


def perturb_copy(space: LocationSpace, traj: np.ndarray, parity: int, eps_point: float,
                 eps_dir: float, g: int, rng: np.random.Generator,
                 region: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One copy of TP step 2 for a length group (N, n); returns the copy's (N, n) output.

    Pivots (positions with index % 2 == parity) are EM over the base set (P, or the ATP region
    (anchor, radius) per row) with eps_point; each non-pivot's direction from every neighbouring
    perturbed pivot is k-RR over g absolute compass sectors with eps_dir; the non-pivot is EM over
    base ∩ perturbed sectors (fallbacks in `udfs.sampling`) with eps_point.
    """
    n_rows, n = traj.shape
    c = eps_point / (2.0 * space.diameter) if space.diameter > 0 else 0.0
    out = np.empty_like(traj)
    piv = np.arange(parity, n, 2)
    non = np.setdiff1d(np.arange(n), piv)

    def base_for(k: int) -> Domains:
        if region is None:
            return Domains()
        return Domains(region_anchor=np.repeat(region[0], k), region_radius=np.repeat(region[1], k))

    if piv.size:  # row-major (trajectory, pivot) order
        dp = base_for(piv.size)
        out[:, piv] = em_sample(space, traj[:, piv].ravel(), c, rng, dp).reshape(n_rows, piv.size)
    if non.size == 0:
        return out
    m = non.size
    true = traj[:, non].ravel()
    has_prev = np.tile(non - 1 >= 0, n_rows)
    has_next = np.tile(non + 1 < n, n_rows)
    prev_pos = np.tile(np.maximum(non - 1, 0), n_rows)
    next_pos = np.tile(np.minimum(non + 1, n - 1), n_rows)
    rows = np.repeat(np.arange(n_rows), m)
    prev_piv = np.where(has_prev, out[rows, prev_pos], 0)
    next_piv = np.where(has_next, out[rows, next_pos], 0)
    k = 12 // g
    krr = KRR(g, eps_dir) if (has_prev.any() or has_next.any()) else None
    prev_sec = np.zeros(true.size, np.int64)
    next_sec = np.zeros(true.size, np.int64)
    if krr is not None:
        # direction from the PERTURBED pivot to the TRUE point, absolute sectors, then k-RR
        s_prev = space.sector12[prev_piv, true].astype(np.int64) // k
        s_next = space.sector12[next_piv, true].astype(np.int64) // k
        prev_sec = np.where(has_prev, krr.perturb(s_prev, rng=rng), 0)
        next_sec = np.where(has_next, krr.perturb(s_next, rng=rng), 0)
    d = base_for(m)
    d.prev_pivot, d.prev_sector, d.has_prev = prev_piv, prev_sec, has_prev
    d.next_pivot, d.next_sector, d.has_next = next_piv, next_sec, has_next
    d.k = k
    out[:, non] = em_sample(space, true, c, rng, d).reshape(n_rows, m)
    return out


COMBINERS = ("eq7", "midpoint")


def combine(a: np.ndarray, b: np.ndarray, space: LocationSpace, how: str = "eq7") -> np.ndarray:
    """Combine the copies point by point (post-processing of the two copies; PROOF.md 3).

    "eq7": argmin over P of D[p, a] + D[p, b]; its minimum D[a, b] is attained at a and b
        (triangle inequality), ties broken by the lower location id -> the lower of a and b.
    "midpoint": the location of P nearest to the great-circle midpoint of a and b (falls back to
        eq7 for antipodal pairs). Measured better on CHI/CPS (bench/reproduce_ldp.py).
    """
    if how == "eq7":
        return np.minimum(a, b)
    from udfs.space import _unit_vectors

    v = (_unit_vectors(space.coords[a, 0], space.coords[a, 1])
         + _unit_vectors(space.coords[b, 0], space.coords[b, 1]))
    norm = np.linalg.norm(v, axis=-1)
    lat = np.degrees(np.arctan2(v[..., 2], np.hypot(v[..., 0], v[..., 1])))
    lon = np.degrees(np.arctan2(v[..., 1], v[..., 0]))
    mid = space.nearest(lat.ravel(), lon.ravel()).reshape(a.shape)
    return np.where(norm > 1e-9, mid, np.minimum(a, b))


def check_combiner(how) -> str:
    if how not in COMBINERS:
        raise InvalidParameterError(f"combiner={how!r} is not one of {COMBINERS}")
    return how


@dataclass(frozen=True, eq=False)
class TP:
    """Pivot-sampling trajectory perturbation (TP).

    Guarantee: user-level eps-LDP for one trajectory: for any two trajectories of the same
        length n over P, every output's probability differs by at most e^eps (the length is
        public, as the output has length n).
    Budget: two copies, eps/2 each; per copy a share r_dir (default 3/4) evenly over its n-1
        directions (k-RR), the rest evenly over its n points (EM); n = 1: the point gets eps/2.
        Sequential composition over 2(2n-1) steps = eps (Theorem 4.1); combining is free.
    Citations: Zhang et al., "Trajectory data collection with local differential privacy"
        (TP/ATP paper), Theorem 4.1; McSherry-Talwar 2007 (EM); Kairouz et al. 2014 (k-RR).
    Runtime: O(n) table look-ups per trajectory when EM mass is spread; restricted domains are
        sector slices (O(|P|/g)) only for rows whose rejection stage fails; vectorised.
    Utility: non-pivots are drawn from a direction-restricted domain; granularity by Eq. 8.
    """

    space: LocationSpace
    epsilon_total: float
    r_dir: float = 0.75
    granularity: str | int = "auto"
    combiner: str = "eq7"

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))
        check_combiner(self.combiner)
        r = self.r_dir
        if not (isinstance(r, int | float) and 0.0 < float(r) < 1.0):
            raise InvalidParameterError(f"r_dir={r!r} must be a float in (0, 1), e.g. 0.75")
        object.__setattr__(self, "granularity", check_granularity(self.granularity))

    name = "tp"

    def copy_budget(self, n: int) -> tuple[float, float]:
        """(eps per point, eps per direction) inside one copy of a length-n trajectory."""
        (half,) = split(self.epsilon_total, [(2, 1.0)])
        if n == 1:
            (pt,) = split(half, [(1, 1.0)])
            return pt, 0.0
        dr, pt = split(half, [(n - 1, self.r_dir), (n, 1.0 - self.r_dir)])
        return pt, dr

    def record(self, n: int) -> BudgetRecord:
        pt, dr = self.copy_budget(n)
        steps = []
        for name, parity in COPIES:
            steps += [Step(name, "direction", i, dr) for i in range(n) if i % 2 != parity
                      for j in (i - 1, i + 1) if 0 <= j < n]
            steps += [Step(name, "point", i, pt) for i in range(n)]
        return BudgetRecord(self.name, n, tuple(steps))

    @property
    def epsilon(self) -> float:
        """Largest spend over lengths 1..16 (computed from the step records, rounded up)."""
        return max(self.record(n).spent for n in range(1, 17))

    def perturb_group(self, traj: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        n = traj.shape[1]
        pt, dr = self.copy_budget(n)
        g = resolve_granularity(self.granularity, dr)
        a, b = (perturb_copy(self.space, traj, parity, pt, dr, g, rng) for _, parity in COPIES)
        return combine(a, b, self.space, self.combiner)

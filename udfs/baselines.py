"""Baselines: EXP (independent EM per point) and UNIFORM (no signal)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, RecordedMechanism, Step, check_epsilon, split
from udfs.sampling import em_sample
from udfs.space import LocationSpace
from udfs.streams import Stream, as_stream
from udfs.tp import SITE_EXP, SITE_UNIFORM, per_length


@dataclass(frozen=True, eq=False)
class EXP(RecordedMechanism):
    """Each point independently perturbed by EM over P with eps/n.

    Guarantee: user-level eps-LDP for one trajectory of public length n (sequential composition
        of n eps/n-LDP releases).
    Budget: eps/n per point.
    Citations: McSherry-Talwar 2007; Yu et al. 2017 / Takagi et al. 2019 (per-point EM).
    Runtime: O(1) expected per point (rejection from a uniform proposal), O(|P|) worst case.
    Utility: the reference the trajectory mechanisms must beat.
    """

    space: LocationSpace
    epsilon_total: float
    name = "exp"
    keyed = True  # perturb_batch takes a udfs.streams.Stream (one key per trajectory)

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))

    def record(self, n: int) -> BudgetRecord:
        (pt,) = split(self.epsilon_total, [(n, 1.0)])
        return BudgetRecord(self.name, n, tuple(Step("-", "point", i, pt) for i in range(n)))

    def perturb_batch(self, traj: np.ndarray, lens, *,
                      rng: Stream | np.random.Generator) -> np.ndarray:
        """(N, L) padded trajectories with lengths ``lens`` -> (N, L) outputs (padding kept).
        ``rng``: one stream key per trajectory (`udfs.streams`), or a Generator to draw them."""
        lens = np.asarray(lens, dtype=np.int64)
        st = as_stream(rng, traj.shape[0])
        (pts,) = per_length(lens, lambda n: split(self.epsilon_total, [(n, 1.0)]))
        c = pts / (2.0 * self.space.diameter) if self.space.diameter > 0 else 0.0 * pts
        vr, vc = np.nonzero(np.arange(traj.shape[1])[None, :] < lens[:, None])
        out = np.array(traj, dtype=np.int64, copy=True)
        out[vr, vc] = em_sample(self.space, traj[vr, vc], c[vr], st.at(SITE_EXP, vc, vr))
        return out


@dataclass(frozen=True, eq=False)
class Uniform:
    """Each point replaced by a uniform draw from P: what "no signal" looks like.

    Guarantee: 0-LDP (output independent of the input); `epsilon_total` is accepted for a uniform
        call signature and not spent.
    Budget: nothing is spent (the record lists each point with 0).
    Citations: none (calibration baseline).
    Runtime: O(1) per point.
    Utility: the worst any mechanism should do; NE ~ mean pairwise distance / diameter.
    """

    space: LocationSpace
    epsilon_total: float
    name = "uniform"
    keyed = True  # perturb_batch takes a udfs.streams.Stream (one key per trajectory)

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))

    def record(self, n: int) -> BudgetRecord:
        return BudgetRecord(self.name, n, tuple(Step("-", "point", i, 0.0) for i in range(n)))

    @property
    def epsilon(self) -> float:
        return 0.0

    def perturb_group(self, traj: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(0, self.space.n, size=traj.shape)

    def perturb_batch(self, traj: np.ndarray, lens, *,
                      rng: Stream | np.random.Generator) -> np.ndarray:
        st = as_stream(rng, traj.shape[0])
        vr, vc = np.nonzero(np.arange(traj.shape[1])[None, :] < np.asarray(lens)[:, None])
        out = np.array(traj, dtype=np.int64, copy=True)
        out[vr, vc] = st.at(SITE_UNIFORM, vc, vr).integers(0, self.space.n)
        return out

"""ATP: anchor-based trajectory perturbation (DESIGN.md section 4; TP/ATP paper, Alg. 4-5).

Per copy: perturb an anchor (EM over P), perturb the normalised radius (square wave), calibrate
the radius (post-processing), then run the TP copy step inside the region {q : D[a^, q] <= R^}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.mechanisms.square_wave import SquareWave
from udfs.sampling import em_sample
from udfs.space import LocationSpace
from udfs.tp import (
    COPIES,
    check_combiner,
    check_granularity,
    combine,
    perturb_copy,
    resolve_granularity,
)

SHARES = {"anchor": 1 / 16, "radius": 3 / 16, "directions": 9 / 16, "points": 3 / 16}
TEST_VALUES = 0.1 * np.arange(11)


def anchor_points(space: LocationSpace, traj: np.ndarray) -> np.ndarray:
    """p_alpha: mean latitude / longitude of each row's points (repeats counted), snapped to P."""
    lat = space.coords[traj, 0].mean(axis=1)
    lon = space.coords[traj, 1].mean(axis=1)
    return space.nearest(lat, lon)


def eta_table(space: LocationSpace, eps_r: float) -> tuple[np.ndarray, np.ndarray]:
    """Calibration centres eta[a, klo, khi] for every anchor a and kept test-value range
    [v_klo, v_khi], plus the mean distance per anchor (eta when no test value is kept).

    P_c = {q : v_klo <= (2b+1) D[a,q]/Delta_R - b <= v_khi}; eta = weighted mean distance with
    weight p_sw on P_c and q_sw elsewhere (ratio q_sw/p_sw = e^-eps_r). Depends only on P and
    eps_r, so it is built once per eps_r and cached on the space.
    """

    def build():
        sw = SquareWave(eps_r)
        b, w = sw.b, math.exp(-eps_r)
        n = space.n
        eta = np.zeros((n, 11, 11))
        mean = np.zeros(n)
        for s in range(0, n, 256):
            blk = np.arange(s, min(n, s + 256))
            ds = np.take_along_axis(space.dist[blk], space.order[blk].astype(np.int64), 1)
            ds = ds.astype(np.float64)
            cs = np.concatenate([np.zeros((blk.size, 1)), np.cumsum(ds, axis=1)], axis=1)
            dr = space.row_max[blk][:, None]
            z = np.where(dr > 0, (2 * b + 1) * ds / np.where(dr > 0, dr, 1.0) - b, -b)
            lt = (z[:, :, None] < TEST_VALUES[None, None, :]).sum(1)  # (blk, 11): #z < v_k
            le = (z[:, :, None] <= TEST_VALUES[None, None, :]).sum(1)  # #z <= v_k
            tot = cs[:, -1]
            mean[blk] = tot / n
            hi_cnt, lo_cnt = le[:, None, :], lt[:, :, None]  # axes (blk, klo, khi)
            nc = np.clip(hi_cnt - lo_cnt, 0, None)
            r = np.arange(blk.size)[:, None, None]
            sc = np.where(hi_cnt > lo_cnt, cs[r, hi_cnt] - cs[r, lo_cnt], 0.0)
            num = sc + w * (tot[:, None, None] - sc)
            den = nc + w * (n - nc)
            eta[blk] = np.where(den > 0, num / np.where(den > 0, den, 1.0), mean[blk, None, None])
        return eta, mean

    return space.cached(("eta", float(eps_r)), build)


def calibrate(space, anchor, r_hat, eps_r: float, radius: np.ndarray) -> np.ndarray:
    """Radius calibration (post-processing): R^ <- R^ + e^-eps_r (eta - R^) sigmoid(beta/2)."""
    b = SquareWave(eps_r).b
    eta_t, mean = eta_table(space, eps_r)
    keep = (TEST_VALUES[None, :] - b <= r_hat[:, None]) & (r_hat[:, None] <= TEST_VALUES + b)
    anyk = keep.any(axis=1)
    klo = np.argmax(keep, axis=1)
    khi = 10 - np.argmax(keep[:, ::-1], axis=1)
    eta = np.where(anyk, eta_t[anchor, klo, khi], mean[anchor])
    dmax = space.row_max[anchor]
    lo_side = radius < eta
    beta = np.where(
        lo_side,
        np.where(eta > 0, (eta - radius) / np.where(eta > 0, eta, 1.0), 0.0),
        np.where(dmax > eta, (radius - eta) / np.where(dmax > eta, dmax - eta, 1.0), 0.0),
    )
    sig = 1.0 / (1.0 + np.exp(-beta / 2))
    return np.maximum(radius + math.exp(-eps_r) * (eta - radius) * sig, 0.0)


def perturb_region(space, traj, anchor, eps_a, eps_r, rng, calibrated=True):
    """Anchor EM over P (eps_a), radius SW (eps_r), calibration; returns (anchor^, R^)."""
    c = eps_a / (2.0 * space.diameter) if space.diameter > 0 else 0.0
    a_hat = em_sample(space, anchor, c, rng)
    dr = space.row_max[a_hat]
    rmax = space.dist[a_hat[:, None], traj].max(axis=1).astype(np.float64)
    r = np.where(dr > 0, np.minimum(rmax / np.where(dr > 0, dr, 1.0), 1.0), 0.0)
    sw = SquareWave(eps_r)
    b = sw.b
    r_hat = sw.perturb(r, rng=rng)
    radius = (r_hat + b) * dr / (2 * b + 1)
    if calibrated:
        radius = calibrate(space, a_hat, r_hat, eps_r, radius)
    return a_hat, radius


@dataclass(frozen=True, eq=False)
class ATP:
    """Anchor-based trajectory perturbation (ATP).

    Guarantee: user-level eps-LDP for one trajectory: any two trajectories of the same length n
        over P give every output a probability within a factor e^eps (length is public).
    Budget: two copies, eps/2 each; per copy anchor 1/16 (EM over P), radius 3/16 (square wave),
        directions 9/16 evenly over n-1 k-RR draws, points 3/16 evenly over n EM draws in the
        region (Theorem 5.1). n = 1: no directions; the point gets 12/16. Calibration, region
        selection, fallbacks and combining use only perturbed values (post-processing).
    Citations: TP/ATP paper, Theorem 5.1 and Alg. 4-5; Li et al. 2020 (square wave).
    Runtime: one KD-tree query and O(n) look-ups per trajectory plus the TP step; restricted EM
        draws are O(1) expected (rejection) and O(region) in the worst case; vectorised.
    Utility: points are drawn from a region sized to the trajectory, so errors shrink with the
        region (NE below EXP at every epsilon on CHI/CPS).
    """

    space: LocationSpace
    epsilon_total: float
    granularity: str | int = "auto"
    calibrated: bool = True
    combiner: str = "eq7"

    name = "atp"

    def __post_init__(self):
        check_combiner(self.combiner)
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))
        object.__setattr__(self, "granularity", check_granularity(self.granularity))
        if not isinstance(self.calibrated, bool):
            raise InvalidParameterError("calibrated must be True or False")

    def copy_budget(self, n: int) -> dict[str, float]:
        (half,) = split(self.epsilon_total, [(2, 1.0)])
        s = SHARES
        if n == 1:
            a, r, p = split(half, [(1, s["anchor"]), (1, s["radius"]),
                                   (1, s["directions"] + s["points"])])
            return {"anchor": a, "radius": r, "direction": 0.0, "point": p}
        a, r, d, p = split(half, [(1, s["anchor"]), (1, s["radius"]),
                                  (n - 1, s["directions"]), (n, s["points"])])
        return {"anchor": a, "radius": r, "direction": d, "point": p}

    def record(self, n: int) -> BudgetRecord:
        bud = self.copy_budget(n)
        steps = []
        for name, parity in COPIES:
            steps += [Step(name, "anchor", -1, bud["anchor"]),
                      Step(name, "radius", -1, bud["radius"])]
            steps += [Step(name, "direction", i, bud["direction"]) for i in range(n)
                      if i % 2 != parity for j in (i - 1, i + 1) if 0 <= j < n]
            steps += [Step(name, "point", i, bud["point"]) for i in range(n)]
        return BudgetRecord(self.name, n, tuple(steps))

    @property
    def epsilon(self) -> float:
        """Largest spend over lengths 1..16 (computed from the step records, rounded up)."""
        return max(self.record(n).spent for n in range(1, 17))

    def perturb_group(self, traj: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        n = traj.shape[1]
        bud = self.copy_budget(n)
        g = resolve_granularity(self.granularity, bud["direction"])
        anchor = anchor_points(self.space, traj)
        outs = []
        for _, parity in COPIES:
            region = perturb_region(self.space, traj, anchor, bud["anchor"], bud["radius"], rng,
                                    self.calibrated)
            outs.append(perturb_copy(self.space, traj, parity, bud["point"], bud["direction"], g,
                                     rng, region))
        return combine(outs[0], outs[1], self.space, self.combiner)

"""ATP: anchor-based trajectory perturbation (docs/architecture.md section 4; TP/ATP paper, Alg.
4-5).

Per copy: perturb an anchor (EM over P), perturb the normalised radius (square wave), calibrate
the radius (post-processing), then run the TP copy step inside the region {q : D[a^, q] <= R^}.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, RecordedMechanism, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.mechanisms.square_wave import SquareWave
from udfs.sampling import em_sample
from udfs.space import LocationSpace
from udfs.streams import Stream, as_stream
from udfs.tp import (
    ANCHOR,
    COPIES,
    RADIUS,
    check_combiner,
    check_granularity,
    check_single_point,
    combine,
    copy_site,
    per_length,
    perturb_copy_batch,
    resolve_granularity,
    single_point_record,
    split_single,
)

SHARES = {"anchor": 1 / 16, "radius": 3 / 16, "directions": 9 / 16, "points": 3 / 16}
TEST_VALUES = 0.1 * np.arange(11)


def anchor_points(space: LocationSpace, traj: np.ndarray, lens=None) -> np.ndarray:
    """p_alpha: mean latitude / longitude of each row's points (repeats counted), snapped to P.
    With ``lens``, row i uses its first lens[i] positions only (padded batches)."""
    if lens is None:
        lat = space.coords[traj, 0].mean(axis=1)
        lon = space.coords[traj, 1].mean(axis=1)
    else:
        # sequential sums (cumsum): the padding's zeros do not change a row's total, so the
        # anchor does not depend on the batch's padded width (numpy's pairwise sum would)
        # column by column: the additions of np.cumsum along a row, one vector add per column
        valid = np.arange(traj.shape[1])[None, :] < np.asarray(lens)[:, None]
        lat, lon = (_row_sums(space.coords[:, i], traj, valid) / lens for i in (0, 1))
    return space.nearest(lat, lon)


def _row_sums(values: np.ndarray, traj: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per row, the sequential sum of values[traj] over its valid positions (as the last
    column of np.cumsum(np.where(valid, values[traj], 0.0), axis=1))."""
    total = np.where(valid[:, 0], np.take(values, traj[:, 0]), 0.0)
    for j in range(1, traj.shape[1]):
        total += np.where(valid[:, j], np.take(values, traj[:, j]), 0.0)
    return total


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
            # z is non-decreasing along each row (ds is sorted, dr > 0 is per row), so the
            # counts #z < v_k and #z <= v_k are exact binary searches (O(n log n), not O(11 n))
            lt = np.stack([np.searchsorted(row, TEST_VALUES, "left") for row in z])
            le = np.stack([np.searchsorted(row, TEST_VALUES, "right") for row in z])
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


def perturb_region(space, traj, anchor, eps_a, eps_r, rng, calibrated=True, lens=None,
                   parity: int = 1):
    """Anchor EM over P (eps_a), radius SW (eps_r), calibration; returns (anchor^, R^).

    eps_a / eps_r: scalars or one per row; ``lens``: valid prefix per row of a padded batch;
    ``rng``: one stream key per trajectory (`udfs.streams`) or a Generator; ``parity``: the
    copy (its draws are addressed by the copy's sites).
    """
    st = as_stream(rng, traj.shape[0])
    c = np.asarray(eps_a, dtype=np.float64) / (2.0 * space.diameter) if space.diameter > 0 \
        else 0.0
    a_hat = em_sample(space, anchor, c, st.at(copy_site(parity, ANCHOR)))
    sw_st = st.at(copy_site(parity, RADIUS))
    dr = space.row_max[a_hat]
    dd = space.pair_dist(a_hat[:, None], traj)
    if lens is not None:
        dd = np.where(np.arange(traj.shape[1])[None, :] < np.asarray(lens)[:, None], dd, 0.0)
    rmax = dd.max(axis=1).astype(np.float64)
    r = np.where(dr > 0, np.minimum(rmax / np.where(dr > 0, dr, 1.0), 1.0), 0.0)
    er = np.broadcast_to(np.asarray(eps_r, dtype=np.float64), r.shape)
    radius = np.empty_like(r)
    for e in ([er[0]] if (er == er[0]).all() else np.unique(er)):  # one value in practice
        m = er == e
        sw = SquareWave(float(e))
        b = sw.b
        r_hat = sw.from_uniforms(r[m], sw_st.uniform(0, m), sw_st.uniform(1, m))
        rad = (r_hat + b) * dr[m] / (2 * b + 1)
        if calibrated:
            rad = calibrate(space, a_hat[m], r_hat, float(e), rad)
        radius[m] = rad
    return a_hat, radius


@dataclass(frozen=True, eq=False)
class ATP(RecordedMechanism):
    """Anchor-based trajectory perturbation (ATP).

    Guarantee: user-level eps-LDP for one trajectory: any two trajectories of the same length n
        over P give every output a probability within a factor e^eps (length is public).
    Budget: two copies, eps/2 each; per copy anchor 1/16 (EM over P), radius 3/16 (square wave),
        directions 9/16 evenly over n-1 k-RR draws, points 3/16 evenly over n EM draws in the
        region (Theorem 5.1). Calibration, region selection, fallbacks and combining use only
        perturbed values (post-processing). n = 1 (``single_point``): "one_copy" (default; a
        deviation from the paper, PROOF.md 2a): anchor 0, radius 0, point = the whole eps, i.e.
        one EM draw over P (the anchor of one point is that point, so anchor and radius would
        re-spend budget on it);
        "two_copies": the paper's two copies, each anchor 1/16, radius 3/16, point 12/16 of
        eps/2.
    Citations: TP/ATP paper, Theorem 5.1 and Alg. 4-5; Li et al. 2020 (square wave).
    Runtime: one KD-tree query and O(n) look-ups per trajectory plus the TP step (see TP);
        the calibration table is built once per (space, eps_r) and cached on the space.
    Utility: points are drawn from a region around the perturbed anchor. At eps <= 10 the
        anchor (eps/32 per copy) and radius (3 eps/32) are very noisy, so regions cover ~65% of
        P and the trajectory about as often as a random region would; the gain over EXP comes
        from the sector constraints and the region's pull toward central locations
        (bench/reproduce_ldp.py compares it with EXP).
    """

    space: LocationSpace
    epsilon_total: float
    granularity: str | int = "auto"
    calibrated: bool = True
    combiner: str = "medoid"
    single_point: str = "one_copy"

    name = "atp"
    keyed = True  # perturb_batch takes a udfs.streams.Stream (one key per trajectory)

    def __post_init__(self):
        check_combiner(self.combiner)
        check_single_point(self.single_point)
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
        if n == 1 and self.single_point == "one_copy":
            return single_point_record(self.name, self.epsilon_total)
        bud = self.copy_budget(n)
        steps = []
        for name, parity in COPIES:
            steps += [Step(name, "anchor", -1, bud["anchor"]),
                      Step(name, "radius", -1, bud["radius"])]
            steps += [Step(name, "direction", i, bud["direction"]) for i in range(n)
                      if i % 2 != parity for j in (i - 1, i + 1) if 0 <= j < n]
            steps += [Step(name, "point", i, bud["point"]) for i in range(n)]
        return BudgetRecord(self.name, n, tuple(steps))

    def perturb_batch(self, traj: np.ndarray, lens, *,
                      rng: Stream | np.random.Generator) -> np.ndarray:
        """(N, L) padded trajectories with lengths ``lens`` -> (N, L) outputs (padding kept).
        ``rng``: one stream key per trajectory (`udfs.streams`), or a Generator to draw them."""

        def params(n):
            b = self.copy_budget(n)
            g = resolve_granularity(self.granularity, b["direction"])
            return b["anchor"], b["radius"], b["direction"], b["point"], g

        out, rest, t, lens, st = split_single(self, traj, lens, as_stream(rng, traj.shape[0]))
        if rest.size == 0:
            return out
        ea, er, dr, pt, g = per_length(lens, params)
        anchor = anchor_points(self.space, t, lens)
        outs = []
        for _, parity in COPIES:
            region = perturb_region(self.space, t, anchor, ea, er, st, self.calibrated, lens,
                                    parity)
            outs.append(perturb_copy_batch(self.space, t, lens, parity, pt, dr, g, st, region))
        out[rest] = combine(outs[0], outs[1], self.space, self.combiner, lens)
        return out

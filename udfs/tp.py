"""TP: trajectory perturbation by pivot sampling (docs/architecture.md section 4; TP/ATP paper,
Alg. 1-3).

The copy step (:func:`perturb_copy`) is shared with ATP, which runs it inside a region.
Row shapes: a length group is an (N, n) int64 array of location ids (N trajectories of length n).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, RecordedMechanism, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.granularity import CANDIDATES, choose_granularity
from udfs.mechanisms.krr import KRR, krr_from_uniforms
from udfs.sampling import Domains, em_sample, region_sizes
from udfs.space import LocationSpace
from udfs.streams import Stream, as_stream

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
                 eps_dir: float, g: int, rng: Stream | np.random.Generator,
                 region: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One copy of TP step 2 for a length group (N, n): :func:`perturb_copy_batch` with every
    row of length n and the same budgets."""
    n_rows, n = traj.shape
    full = np.full(n_rows, 1.0)
    return perturb_copy_batch(space, traj, np.full(n_rows, n), parity, eps_point * full,
                              eps_dir * full, np.full(n_rows, g), rng, region)


# Steps of a trajectory's counter-based stream (`udfs.streams`): one site per step kind.
SITE_SINGLE = 1  # the 'one_copy' EM draw of a length-1 trajectory
SITE_EXP, SITE_UNIFORM = 2, 3  # the baselines' per-point draws
ANCHOR, RADIUS, PIVOT, DIR_PREV, DIR_NEXT, POINT = range(6)  # offsets within a copy's sites


def copy_site(parity: int, step: int) -> int:
    """Site of `step` in the copy whose pivots have index parity `parity` (A: 1, B: 0)."""
    return 16 * (2 if parity == 1 else 3) + step


def perturb_copy_batch(space: LocationSpace, traj: np.ndarray, lens: np.ndarray, parity: int,
                       eps_point: np.ndarray, eps_dir: np.ndarray, g: np.ndarray,
                       rng: Stream | np.random.Generator,
                       region: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One copy of TP step 2 for N trajectories of any lengths; returns the copy's (N, L) output.

    ``rng``: a `udfs.streams.Stream` with one key per trajectory (or a Generator to draw
    them from); each draw is addressed by (step, position), so a trajectory's copy does not
    depend on the other rows of the call.

    ``traj`` is (N, L) with row i valid in its first ``lens[i]`` positions (the rest is padding
    and comes back as padding); eps_point, eps_dir and g are per row (functions of the row's
    length). Pivots (positions with index % 2 == parity) are EM over the base set (P, or the ATP
    region (anchor, radius) per row) with eps_point; each non-pivot's direction from every
    neighbouring perturbed pivot is k-RR over g absolute compass sectors with eps_dir; the
    non-pivot is EM over base ∩ perturbed sectors (fallbacks in `udfs.sampling`) with eps_point.
    """
    lens = np.asarray(lens, dtype=np.int64)
    st = as_stream(rng, traj.shape[0])
    pos = np.arange(traj.shape[1])
    valid = pos[None, :] < lens[:, None]
    c_row = eps_point / (2.0 * space.diameter) if space.diameter > 0 else 0.0 * eps_point
    out = traj.copy()
    sizes = None if region is None else region_sizes(space, region[0], region[1])

    def base_for(rows: np.ndarray) -> Domains:
        if region is None:
            return Domains()
        return Domains(region_anchor=region[0][rows], region_radius=region[1][rows],
                       region_size=sizes[rows], region_id=rows)

    pr, pc = np.nonzero(valid & (pos % 2 == parity)[None, :])  # row-major (trajectory, pos)
    if pr.size:
        out[pr, pc] = em_sample(space, traj[pr, pc], c_row[pr],
                                st.at(copy_site(parity, PIVOT), pc, pr), base_for(pr))
    nr, nc = np.nonzero(valid & (pos % 2 != parity)[None, :])
    if nr.size == 0:
        return out
    true = traj[nr, nc]
    has_prev = nc >= 1
    has_next = nc + 1 < lens[nr]
    prev_piv = np.where(has_prev, out[nr, np.maximum(nc - 1, 0)], 0)
    next_piv = np.where(has_next, out[nr, np.minimum(nc + 1, traj.shape[1] - 1)], 0)
    gk = g[nr].astype(np.int64)
    k = 12 // gk
    prev_sec = np.zeros(true.size, np.int64)
    next_sec = np.zeros(true.size, np.int64)
    if has_prev.any() or has_next.any():
        # direction from the PERTURBED pivot to the TRUE point, absolute sectors, then k-RR
        # (p_true = KRR(g, eps_dir).p_true, evaluated once per length: g and eps_dir are
        # functions of the row's length, so the floats are exactly KRR's)
        uniq, inv = length_index(lens)
        first = np.zeros(uniq.size, np.int64)
        first[inv[::-1]] = np.arange(lens.size)[::-1]
        p_true = np.array([KRR(int(g[i]), float(eps_dir[i])).p_true if eps_dir[i] > 0 else 1.0
                           for i in first])[inv[nr]]
        sec12 = space.sector12.reshape(-1)
        s_prev = np.take(sec12, prev_piv * space.n + true).astype(np.int64) // k
        s_next = np.take(sec12, next_piv * space.n + true).astype(np.int64) // k
        sp_, sn_ = st.at(copy_site(parity, DIR_PREV), nc, nr), st.at(copy_site(parity, DIR_NEXT),
                                                                      nc, nr)
        prev_sec = np.where(has_prev, krr_from_uniforms(s_prev, gk, p_true, sp_.uniform(0),
                                                        sp_.uniform(1)), 0)
        next_sec = np.where(has_next, krr_from_uniforms(s_next, gk, p_true, sn_.uniform(0),
                                                        sn_.uniform(1)), 0)
    d = base_for(nr)
    d.prev_pivot, d.prev_sector, d.has_prev = prev_piv, prev_sec, has_prev
    d.next_pivot, d.next_sector, d.has_next = next_piv, next_sec, has_next
    d.k = k
    out[nr, nc] = em_sample(space, true, c_row[nr], st.at(copy_site(parity, POINT), nc, nr), d)
    return out


COMBINERS = ("medoid", "copy_medoid", "paper", "midpoint")
SINGLE_POINT = ("one_copy", "two_copies")


def check_single_point(rule) -> str:
    if rule not in SINGLE_POINT:
        raise InvalidParameterError(
            f"single_point={rule!r} is not one of {SINGLE_POINT}; 'one_copy' (default) spends the "
            "whole epsilon on one EM draw over P, 'two_copies' is the TP/ATP paper's two eps/2 "
            "copies")
    return rule


def single_point_record(name: str, epsilon: float) -> BudgetRecord:
    """Budget of a length-1 trajectory under the 'one_copy' rule: one EM release of epsilon."""
    (pt,) = split(epsilon, [(1, 1.0)])
    return BudgetRecord(name, 1, (Step("-", "point", 0, pt),))


def length_index(lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct lengths ascending, index of each row's length in them): np.unique for small
    non-negative ints without a sort."""
    lens = np.asarray(lens, dtype=np.int64)
    uniq = np.flatnonzero(np.bincount(lens))
    lut = np.zeros(uniq[-1] + 1 if uniq.size else 1, np.int64)
    lut[uniq] = np.arange(uniq.size)
    return uniq, lut[lens]


def per_length(lens: np.ndarray, fn) -> list[np.ndarray]:
    """Per-row arrays of ``fn(n)`` (a tuple of numbers), evaluated once per distinct length."""
    uniq, inv = length_index(lens)
    vals = np.array([fn(int(n)) for n in uniq], dtype=np.float64).reshape(uniq.size, -1)
    return list(vals[inv].T)


def split_single(mech, traj: np.ndarray, lens, st: Stream):
    """Perturb the length-1 rows under the 'one_copy' rule and return (out, indices of the
    other rows, their trajectories, their lengths, their stream)."""
    lens = np.asarray(lens, dtype=np.int64)
    out = np.array(traj, dtype=np.int64, copy=True)
    one = lens == 1 if mech.single_point == "one_copy" else np.zeros(lens.shape, bool)
    if one.any():
        out[one, :1] = single_point_perturb(mech.space, traj[one, :1], mech.epsilon_total,
                                            st.at(SITE_SINGLE, 0, np.flatnonzero(one)))
    rest = np.flatnonzero(~one)
    return out, rest, traj[rest], lens[rest], st.take(rest)


def single_point_perturb(space: LocationSpace, traj: np.ndarray, epsilon: float,
                         rng: Stream | np.random.Generator) -> np.ndarray:
    """Length-1 rows (N, 1) under the 'one_copy' rule: EM over P with the whole epsilon.

    Deviation from the TP/ATP paper (which runs two eps/2 copies and combines them): with one
    point there are no directions and (for ATP) the anchor is the point itself, so two copies only
    halve the budget of the one release that matters; Eq. 7 then picks one of the two draws.
    One EM draw at eps is eps-LDP on its own (PROOF.md section 2a); bench/reproduce_ldp.py
    compares the two rules.
    """
    (pt,) = split(epsilon, [(1, 1.0)])
    c = pt / (2.0 * space.diameter) if space.diameter > 0 else 0.0
    return em_sample(space, traj[:, 0], c, rng).reshape(traj.shape)


def combine(a: np.ndarray, b: np.ndarray, space: LocationSpace, how: str = "medoid",
            lens: np.ndarray | None = None) -> np.ndarray:
    """Combine the two copies point by point: a function of the copies' outputs and the public
    P only, so post-processing of eps-LDP outputs (PROOF.md 3). `a`, `b`: (N, L) copy outputs
    (A, B), rows valid in their first `lens` positions (padding comes back as `a`'s).

    "medoid" (default): for point i the candidate among a_i, b_i and their snapped midpoint
        with the least total distance to all 2n outputs of the trajectory's two copies (ties:
        a_i, then b_i). Trajectories are spatially coherent, so the copy output that agrees
        with the rest of the trajectory is the better guess.
    "copy_medoid": the same choice among a_i and b_i only (never a location no copy output).
    "paper": Eq. 7 as written, argmin over P of D[p, a] + D[p, b]; its minimum D[a, b] is
        attained at a and b (triangle inequality), ties broken by the lower location id, so it
        returns the lower of a and b: a choice by id, blind to distance.
    "midpoint": the location of P nearest to the great-circle midpoint of a_i and b_i (falls
        back to "paper" for antipodal pairs).
    bench/reproduce_ldp.py compares the four (NE and PRQ on CHI and CPS); "medoid" is the
    default.
    """
    if how == "paper":
        return np.minimum(a, b)
    if how == "midpoint":
        return _midpoint(a, b, space)
    lens = np.full(a.shape[0], a.shape[1]) if lens is None else np.asarray(lens, np.int64)
    valid = np.arange(a.shape[1])[None, :] < lens[:, None]
    out = a.copy()
    mids = None
    if how == "medoid":
        # snapped midpoints of every real point in one KD-tree query (a == b: a itself)
        rows, cols = np.nonzero(valid)
        av, bv = a[rows, cols], b[rows, cols]
        mid = av.copy()
        apart = np.flatnonzero(av != bv)
        mid[apart] = _midpoint(av[apart], bv[apart], space)
        mids = np.zeros(a.shape, np.int64)
        mids[rows, cols] = mid
    if a.shape[0] < _COMBINE_SMALL:  # few rows: fewer numpy calls, the same floats
        return _medoid_pairs(a, b, valid, mids, space, out)
    # one pass per length n over its rows' first n columns: no work on padding (a padded
    # row's totals only add exact zeros, so trimming it changes no float and no choice)
    uniq, inv = length_index(lens)
    # small ints: numpy's stable sort of int16 is a radix sort (the same order as int64's)
    by_length = np.argsort(inv.astype(np.int16) if uniq.size < 1 << 15 else inv, kind="stable")
    counts = np.bincount(inv, minlength=uniq.size)
    for n, end, count in zip(uniq, np.cumsum(counts), counts, strict=True):
        rows = by_length[end - count:end]
        for s in range(0, rows.size, _COMBINE_CHUNK):  # bounded temporaries
            r = rows[s:s + _COMBINE_CHUNK]
            out[r, :n] = _medoid_rows(a[r, :n], b[r, :n],
                                      None if mids is None else mids[r, :n], space)
    return out


_COMBINE_CHUNK = 8192  # trajectories per combine pass: (2n)^2 / 2 float64 per row in flight
_COMBINE_SMALL = 128  # below this many trajectories, :func:`_medoid_pairs`


def _medoid_pairs(a, b, valid, mids, space: LocationSpace, out) -> np.ndarray:
    """The medoid choice of :func:`_medoid_rows` (same totals, same floats) over the list of
    real pairs: one bincount per side, a constant number of numpy calls (small calls)."""
    rows, cols = np.nonzero(valid)
    outputs = np.concatenate([a, b], axis=1)  # (N, 2L): both copies' outputs of each row
    both = np.concatenate([valid, valid], axis=1)
    width = outputs.shape[1]
    p_idx, q_idx = np.triu_indices(width, 1)
    r, e = np.nonzero(both[:, p_idx] & both[:, q_idx])
    p, q = p_idx[e], q_idx[e]
    d = space.pair_dist(outputs[r, p], outputs[r, q])
    sums = (np.bincount(r * width + p, weights=d, minlength=outputs.size)
            + np.bincount(r * width + q, weights=d, minlength=outputs.size))
    candidates = [a[rows, cols], b[rows, cols]]
    cost = [sums[rows * width + cols], sums[rows * width + a.shape[1] + cols]]
    if mids is not None:
        mid = mids[rows, cols]
        candidates.append(mid)
        pt, j = np.nonzero(both[rows])  # (point, output) pairs of its trajectory, in order
        cost.append(np.bincount(pt, weights=space.pair_dist(mid[pt], outputs[rows[pt], j]),
                                minlength=rows.size))
    out[rows, cols] = np.stack(candidates)[np.argmin(np.stack(cost), axis=0),
                                           np.arange(rows.size)]
    return out


def _medoid_rows(a, b, mids, space: LocationSpace) -> np.ndarray:
    """The medoid choice for (m, n) copies of m trajectories of length n (``mids``: snapped
    midpoints, or None for "copy_medoid"), in a transposed (output, row) layout where every
    step is a contiguous row operation, a fixed number of numpy calls per pass.

    A candidate's total is the distance to every output of its row in the order the first
    version (two bincounts over the pairs of the padded (a, b) layout) summed them: pairs
    (p < q) of that layout, D[o_p, o_q] read once; output x's total is (sum over q > x,
    q ascending) + (sum over p < x, p ascending), a midpoint's the sum over the outputs in
    order, each a sequential float64 sum from 0. The padding that version summed added exact
    zeros (t + 0.0 == t), so the totals are the same floats and the choice (first of equals:
    a, then b, then the midpoint) is the same.
    """
    flat = space.dist.reshape(-1)  # flat takes: several times faster than dist[x, y]
    n_loc, width = space.n, 2 * a.shape[1]
    outs = np.ascontiguousarray(np.concatenate([a, b], axis=1).T)  # (2n, m)
    p, q = np.triu_indices(width, 1)
    d = np.take(flat, outs[p] * n_loc + outs[q])  # (pairs, m) float32, summed in float64
    upper = np.zeros(outs.shape)  # upper[x]: sum over q > x
    lower = np.zeros(outs.shape)  # lower[x]: sum over p < x
    first = np.concatenate([[0], np.cumsum(np.arange(width - 1, 0, -1))])  # pair (x, x + 1)
    for j in range(1, width):  # pairs (x, j), x < j: one more term of each upper[x]
        upper[:j] += d[first[:j] + j - np.arange(j) - 1]
    for x in range(width - 1):  # pairs (x, q), q > x: one more term of each lower[q]
        lower[x + 1:] += d[first[x]:first[x] + width - 1 - x]
    cost = upper + lower
    half = a.shape[1]
    best, least = outs[:half], cost[:half]
    win = cost[half:] < least
    best, least = np.where(win, outs[half:], best), np.where(win, cost[half:], least)
    if mids is not None:
        m = mids.T  # (L, m)
        dm = np.take(flat, m[None, :, :] * n_loc + outs[:, None, :])  # (2n, n, m)
        total = np.zeros(m.shape)
        for j in range(width):  # sequential over the outputs a_0.., b_0..
            total += dm[j]
        win = total < least
        best = np.where(win, m, best)
    return best.T


def _midpoint(a: np.ndarray, b: np.ndarray, space: LocationSpace) -> np.ndarray:
    """The location of P nearest to the great-circle midpoint of a and b (lower id of the two
    for antipodal pairs): a KD-tree query of the normalised sum of their unit vectors."""
    unit = space.unit_vectors()
    if a.ndim != 1:
        return _midpoint(a.ravel(), b.ravel(), space).reshape(a.shape)
    # per coordinate on 1-D columns: the floats of unit[a] + unit[b] and of np.linalg.norm
    # (sqrt((x^2 + y^2) + z^2), numpy's sum of three terms in order), without (m, 3) gathers
    cols = space.cached("unit_columns", lambda: tuple(np.ascontiguousarray(unit[:, i])
                                                      for i in range(3)))
    v = [np.take(col, a) + np.take(col, b) for col in cols]
    norm = np.sqrt((v[0] * v[0] + v[1] * v[1]) + v[2] * v[2])
    ok = norm > 1e-9
    mid = np.minimum(a, b)
    if ok.any():
        n_ok = norm[ok]
        mid[ok] = space.nearest_unit(np.stack([c[ok] / n_ok for c in v], axis=-1))
    return mid


def check_combiner(how) -> str:
    if how not in COMBINERS:
        raise InvalidParameterError(f"combiner={how!r} is not one of {COMBINERS}")
    return how


@dataclass(frozen=True, eq=False)
class TP(RecordedMechanism):
    """Pivot-sampling trajectory perturbation (TP).

    Guarantee: user-level eps-LDP for one trajectory: for any two trajectories of the same
        length n over P, every output's probability differs by at most e^eps (the length is
        public, as the output has length n).
    Budget: two copies, eps/2 each; per copy a share r_dir (default 3/4) evenly over its n-1
        directions (k-RR), the rest evenly over its n points (EM). Sequential composition over
        2(2n-1) steps = eps (Theorem 4.1); combining is free. n = 1 (``single_point``):
        "one_copy" (default; a deviation from the paper, PROOF.md 2a) = one EM draw over P with
        the whole eps; "two_copies" = the paper's two copies whose point gets eps/2 each.
    Citations: Zhang et al., "Trajectory data collection with local differential privacy"
        (TP/ATP paper), Theorem 4.1; McSherry-Talwar 2007 (EM); Kairouz et al. 2014 (k-RR).
    Runtime: one vectorised pass over all trajectories of a call (any lengths, padded).
        Non-pivots propose uniformly from bitsets region ∩ sector(prev) ∩ sector(next)
        (with one constraint and no exact region: a look-up in a per-g sector order)
        (O(|P|/64) words per row; empty levels of the fallback chain are detected in the same
        pass); pivots are O(1) expected table look-ups; rows whose rejection stage fails use
        an explicit inverse CDF over the smallest candidate list. bench/bench_ldp.py.
    Utility: non-pivots are drawn from a direction-restricted domain; granularity by Eq. 8.
    """

    space: LocationSpace
    epsilon_total: float
    r_dir: float = 0.75
    granularity: str | int = "auto"
    combiner: str = "medoid"
    single_point: str = "one_copy"

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))
        check_combiner(self.combiner)
        check_single_point(self.single_point)
        r = self.r_dir
        if not (isinstance(r, int | float) and 0.0 < float(r) < 1.0):
            raise InvalidParameterError(f"r_dir={r!r} must be a float in (0, 1), e.g. 0.75")
        object.__setattr__(self, "granularity", check_granularity(self.granularity))

    name = "tp"
    keyed = True  # perturb_batch takes a udfs.streams.Stream (one key per trajectory)

    def copy_budget(self, n: int) -> tuple[float, float]:
        """(eps per point, eps per direction) inside one copy of a length-n trajectory."""
        (half,) = split(self.epsilon_total, [(2, 1.0)])
        if n == 1:
            (pt,) = split(half, [(1, 1.0)])
            return pt, 0.0
        dr, pt = split(half, [(n - 1, self.r_dir), (n, 1.0 - self.r_dir)])
        return pt, dr

    def record(self, n: int) -> BudgetRecord:
        if n == 1 and self.single_point == "one_copy":
            return single_point_record(self.name, self.epsilon_total)
        pt, dr = self.copy_budget(n)
        steps = []
        for name, parity in COPIES:
            steps += [Step(name, "direction", i, dr) for i in range(n) if i % 2 != parity
                      for j in (i - 1, i + 1) if 0 <= j < n]
            steps += [Step(name, "point", i, pt) for i in range(n)]
        return BudgetRecord(self.name, n, tuple(steps))

    def perturb_batch(self, traj: np.ndarray, lens, *,
                      rng: Stream | np.random.Generator) -> np.ndarray:
        """(N, L) padded trajectories with lengths ``lens`` -> (N, L) outputs (padding kept).
        ``rng``: one stream key per trajectory (`udfs.streams`), or a Generator to draw them."""

        def params(n):
            pt, dr = self.copy_budget(n)
            return pt, dr, resolve_granularity(self.granularity, dr)

        out, rest, t, lens, st = split_single(self, traj, lens, as_stream(rng, traj.shape[0]))
        if rest.size:
            pt, dr, g = per_length(lens, params)
            a, b = (perturb_copy_batch(self.space, t, lens, parity, pt, dr, g, st)
                    for _, parity in COPIES)
            out[rest] = combine(a, b, self.space, self.combiner, lens)
        return out

"""Vectorised exact sampler for the exponential mechanism on restricted domains.

Target for row i: Pr[r] proportional to exp(-c_i * D[true_i, r]) over the row's domain S_i, where
S_i is chosen by the fallback chain of DESIGN.md section 4 (TP step 2):

    level 0: base_i ∩ sector(prev pivot) ∩ sector(next pivot)   (present constraints only)
    level 1: base_i ∩ sector(prev pivot)      if level 0 is empty and a previous pivot exists
    level 2: base_i                           otherwise

``base_i`` is P, or the ATP region {q : D[a_i, q] <= R_i} (a prefix of ``space.order[a_i]``).
Every set above is a slice of a precomputed row (``order`` or ``sector_order``) filtered by O(1)
membership tests, so no row ever touches all of P unless its domain really is that large.

Two stages, both exact:
1. Rejection (cheap, O(1) per try): propose r uniformly from the smallest superset list of
   level 0 and accept iff r is in level 0 and ``E >= c * D[true, r]`` with E ~ Exp(1). An
   accepted r has exactly the level-0 EM law (acceptance is proportional to the EM weight), and
   a row accepts only when level 0 is non-empty, i.e. exactly when level 0 is its domain.
2. Explicit inverse CDF for rows still pending after ``tries`` rounds: weights over the padded
   candidate list in log space (max subtracted, so eps up to 1e6 neither overflows nor yields
   NaN), level decided by which masks are non-empty.
A mixture of two draws from the same law is that law, so the output is exactly EM on S_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.space import LocationSpace

_CHUNK_ELEMS = 1 << 20  # padded elements per explicit chunk (bounds temporaries to ~30 MB)


@dataclass
class Domains:
    """Per-row domain description (all arrays of length B; see module docstring).

    region_anchor / region_radius: None for base = P. prev_* / next_*: sector constraints from
    the previous / next perturbed pivot: pivot loc id, perturbed sector d and presence flag.
    k = 12 // g, so ``sector_g(pv, r) == sector12[pv, r] // k``.
    """

    region_anchor: np.ndarray | None = None
    region_radius: np.ndarray | None = None
    prev_pivot: np.ndarray | None = None
    prev_sector: np.ndarray | None = None
    has_prev: np.ndarray | None = None
    next_pivot: np.ndarray | None = None
    next_sector: np.ndarray | None = None
    has_next: np.ndarray | None = None
    k: int = 1


def _take(d: Domains, rows: np.ndarray) -> Domains:
    def t(a):
        return None if a is None else a[rows]

    return Domains(
        t(d.region_anchor), t(d.region_radius), t(d.prev_pivot), t(d.prev_sector),
        t(d.has_prev), t(d.next_pivot), t(d.next_sector), t(d.has_next), d.k,
    )


def _lists(space: LocationSpace, true: np.ndarray, d: Domains, use_next: bool):
    """Smallest superset list per row: (mat, key, start, size); mat 0 = order, 1 = sector_order."""
    b = true.shape[0]
    mat = np.zeros(b, np.int8)
    key = true.copy()
    start = np.zeros(b, np.int64)
    size = np.full(b, space.n, np.int64)
    if d.region_anchor is not None:
        key = d.region_anchor.copy()
        size = region_sizes(space, d.region_anchor, d.region_radius)
    cons = [(d.prev_pivot, d.prev_sector, d.has_prev)]
    if use_next:
        cons.append((d.next_pivot, d.next_sector, d.has_next))
    for pv, sec, has in cons:
        if pv is None:
            continue
        s0 = space.sector_start[pv, sec * d.k].astype(np.int64)
        sz = space.sector_start[pv, (sec + 1) * d.k].astype(np.int64) - s0
        better = has & (sz < size)
        mat = np.where(better, 1, mat).astype(np.int8)
        key = np.where(better, pv, key)
        start = np.where(better, s0, start)
        size = np.where(better, sz, size)
    return mat, key, start, size


def region_sizes(space: LocationSpace, anchor, radius) -> np.ndarray:
    """|{q : D[anchor, q] <= radius}|, at least 1 (the anchor itself)."""
    from udfs.space import row_count_le

    return np.maximum(row_count_le(space, anchor, radius), 1)


def _gather(space, mat, key, pos):
    return np.where(mat == 0, space.order[key, pos], space.sector_order[key, pos]).astype(np.int64)


def _member(space, d: Domains, r, level: int):
    ok = np.ones(r.shape, bool)
    if d.region_anchor is not None:
        a = d.region_anchor.reshape(d.region_anchor.shape + (1,) * (r.ndim - 1))
        rad = d.region_radius.reshape(a.shape)
        ok &= (space.dist[a, r] <= rad) | (r == a)
    if level <= 1 and d.prev_pivot is not None:
        sh = d.prev_pivot.shape + (1,) * (r.ndim - 1)
        ok &= ~d.has_prev.reshape(sh) | (
            space.sector12[d.prev_pivot.reshape(sh), r] // d.k == d.prev_sector.reshape(sh))
    if level == 0 and d.next_pivot is not None:
        sh = d.next_pivot.shape + (1,) * (r.ndim - 1)
        ok &= ~d.has_next.reshape(sh) | (
            space.sector12[d.next_pivot.reshape(sh), r] // d.k == d.next_sector.reshape(sh))
    return ok


def em_sample(space: LocationSpace, true, c, rng: np.random.Generator,
              domains: Domains | None = None, tries: int = 24) -> np.ndarray:
    """Draw one EM output per row: Pr[r] ∝ exp(-c * D[true, r]) on the row's domain.

    ``c`` = epsilon_step / (2 * Delta_u) (scalar). Returns int64 location ids.
    """
    true = np.asarray(true, dtype=np.int64)
    d = domains if domains is not None else Domains()
    out = np.full(true.shape, -1, np.int64)
    if true.size == 0:
        return out
    mat, key, start, size = _lists(space, true, d, use_next=True)
    pending = np.arange(true.size)
    for _ in range(tries):
        if pending.size == 0:
            return out
        j = np.minimum((rng.random(pending.size) * size[pending]).astype(np.int64),
                       size[pending] - 1)
        r = _gather(space, mat[pending], key[pending], start[pending] + j)
        e = rng.standard_exponential(pending.size)
        dp = _take(d, pending)
        ok = _member(space, dp, r, 0) & (c * space.dist[true[pending], r].astype(np.float64) <= e)
        out[pending[ok]] = r[ok]
        pending = pending[~ok]
    if pending.size:
        _explicit(space, true, c, rng, d, pending, out)
    return out


def _explicit(space, true, c, rng, d: Domains, rows, out) -> None:
    """Inverse-CDF draws for ``rows`` over padded candidate lists with the fallback chain."""
    dp = _take(d, rows)
    mat, key, start, size = _lists(space, true[rows], dp, use_next=False)
    # chunks of rows whose widths differ by < 2x (power-of-two buckets), so padding wastes < half
    bucket = np.ceil(np.log2(np.maximum(size, 1))).astype(np.int64)
    need_base = []
    chunks = []
    for bk in np.unique(bucket):
        rows_b = np.flatnonzero(bucket == bk)
        step = max(1, _CHUNK_ELEMS // (1 << int(bk)))
        chunks += [rows_b[i:i + step] for i in range(0, rows_b.size, step)]
    for sel in chunks:
        width = int(size[sel].max())
        cols = np.arange(width)
        valid = cols[None, :] < size[sel, None]
        pos = start[sel, None] + np.minimum(cols[None, :], size[sel, None] - 1)
        cand = _gather(space, mat[sel, None], key[sel, None], pos)
        ds = _take(dp, sel)
        m0 = valid & _member(space, ds, cand, 0)
        has0 = m0.any(1)
        hp = ds.has_prev if ds.has_prev is not None else np.zeros(sel.size, bool)
        use1 = np.zeros(sel.size, bool)
        mask = m0
        lvl1 = np.flatnonzero(~has0 & hp)
        if lvl1.size:  # level 1 only where level 0 is empty and a previous pivot exists
            m1 = valid[lvl1] & _member(space, _take(ds, lvl1), cand[lvl1], 1)
            use1[lvl1] = m1.any(1)
            mask = m0.copy()
            mask[lvl1] = m1
        done = has0 | use1
        need_base.append(sel[~done])
        if done.any():
            r = _inverse_cdf(space, true[rows[sel[done]]], c, cand[done], mask[done], rng)
            out[rows[sel[done]]] = r
    rest = np.concatenate(need_base) if need_base else np.empty(0, np.int64)
    if rest.size:
        # Level 2: the base set alone (P, or the region). Candidates: the base list itself.
        base = Domains(region_anchor=d.region_anchor, region_radius=d.region_radius)
        _explicit(space, true, c, rng, base, rows[rest], out)


def _inverse_cdf(space, true, c, cand, mask, rng) -> np.ndarray:
    logw = -c * space.dist[true[:, None], cand].astype(np.float64)
    logw = np.where(mask, logw, -np.inf)
    logw -= logw.max(axis=1, keepdims=True)
    cum = np.cumsum(np.exp(logw), axis=1)
    u = rng.random(true.size) * cum[:, -1]
    j = np.argmax(cum > u[:, None], axis=1)
    return cand[np.arange(true.size), j]

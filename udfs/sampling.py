"""Vectorised exact sampler for the exponential mechanism on restricted domains.

Target for row i: Pr[r] proportional to exp(-c_i * D[true_i, r]) over the row's domain S_i, where
S_i is chosen by the fallback chain of docs/architecture.md section 4 (TP step 2):

    level 0: base_i ∩ sector(prev pivot) ∩ sector(next pivot)   (present constraints only)
    level 1: base_i ∩ sector(prev pivot)      if level 0 is empty and a previous pivot exists
    level 2: base_i                           otherwise

``base_i`` is P, or the ATP region {q : D[a_i, q] <= R_i} (a prefix of ``space.order[a_i]``).
Every set above is a slice of a precomputed row (``order`` or ``sector_order``) filtered by O(1)
membership tests, or an AND of precomputed bitsets.

Two stages, both exact:
1. Rejection (cheap, O(1) per try): propose r uniformly from a superset of the row's target
   domain and accept iff r is in the domain and ``E >= c * D[true, r]`` with E ~ Exp(1). An
   accepted r has exactly the EM law on that domain (acceptance is proportional to the EM
   weight), and a row accepts only when that domain is non-empty. Proposal sets:
   - rows with a sector constraint (:func:`_bitset_stage`): a bitset of ``ceil(|P|/64)`` words
     (:func:`sector_bits` per (pivot, sector); :func:`region_bits` per region), the k-th set
     bit picked from word popcounts and a byte select table. The stage ANDs region and sector
     bitsets level by level and targets the first level whose bitset is non-empty: an empty
     bitset proves its level empty, so the fallback chain is decided exactly in O(|P|/64).
     Rows with one sector constraint and base P (or a region too big for an exact bitset)
     skip the bitsets (:func:`_one_sector_stage`): their level-0 set is one sector, whose
     size and k-th smallest id are look-ups in :func:`sector_order`; the same proposal.
   - other rows (:func:`_list_stage`): the smallest superset list (``order`` prefix or
     ``sector_order`` slice).
   Each row tries at most ``TRIES`` times (a rule of the row alone: no row's draws or
   stopping depend on other rows, so a row's output is the same in any batch).
2. Explicit inverse CDF for rows still pending: weights over the padded candidate list (or a
   dense row of P when the list is a quarter of P or more) in log space (max subtracted, so
   eps up to 1e6 neither overflows nor yields NaN), level decided by which masks are
   non-empty. The cap is fixed in advance (a stopping time), so it does not change any
   row's law.
A mixture of two draws from the same law is that law, so the output is exactly EM on S_i.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.space import LocationSpace
from udfs.streams import Stream, as_stream

TRIES = 24  # rejection tries per row before its explicit draw (a per-row rule: see em_sample)
EXPLICIT = 60_000  # draw index (udfs.streams) of a row's explicit inverse-CDF uniform

_CHUNK_ELEMS = 1 << 20  # padded elements per explicit chunk (bounds temporaries to ~30 MB)
_BIT_CHUNK = 1 << 16  # rows per bitset-rejection chunk (bounds (rows, words) temporaries)
# rows with one sector constraint below which they stay in the bitset loop: a second tries
# loop costs more numpy calls than it saves on a small call (same output either way)
_ONE_SECTOR_MIN = 2048
_BITSET_MAX_BYTES = 256 << 20  # skip bitsets (fall back to lists) for spaces this large
_HALVES = tuple((h, np.uint64((1 << h) - 1)) for h in (32, 16, 8))  # (bits, low-bits mask)
_POP8 = np.array([bin(i).count("1") for i in range(256)], np.int64)
_SEL8 = np.array([[[j for j in range(8) if (b >> j) & 1][k] if k < _POP8[b] else 0
                   for k in range(8)] for b in range(256)], np.int64)


@dataclass
class Domains:
    """Per-row domain description (all arrays of length B; see module docstring).

    region_anchor / region_radius: None for base = P (region_size: |region| per row if the
    caller already knows it, see :func:`region_sizes`). prev_* / next_*: sector constraints from
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
    k: int | np.ndarray = 1  # 12 // g: scalar, or one per row (rows may differ in g)
    region_size: np.ndarray | None = None  # optional cache of |region| (else computed)
    region_id: np.ndarray | None = None  # optional: rows with equal id share one region


def _take(d: Domains, rows: np.ndarray) -> Domains:
    def t(a):
        return None if a is None else a[rows]

    return Domains(
        t(d.region_anchor), t(d.region_radius), t(d.prev_pivot), t(d.prev_sector),
        t(d.has_prev), t(d.next_pivot), t(d.next_sector), t(d.has_next),
        d.k[rows] if isinstance(d.k, np.ndarray) else d.k, t(d.region_size), t(d.region_id),
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
        size = (d.region_size.astype(np.int64, copy=True) if d.region_size is not None
                else region_sizes(space, d.region_anchor, d.region_radius))
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
    if mat.ndim == 1:  # rejection stage: gather each row from its own matrix only
        flat = key * space.n + pos  # flat takes: the rows' entries without 2-D fancy indexing
        out = np.take(space.order.reshape(-1), flat).astype(np.int64)
        s = np.flatnonzero(mat)
        if s.size:
            out[s] = np.take(space.sector_order.reshape(-1), flat[s])
        return out
    return np.where(mat == 0, space.order[key, pos], space.sector_order[key, pos]).astype(np.int64)


def sector_bits(space: LocationSpace, g: int) -> np.ndarray | None:
    """(|P| g + 1, W) uint64: row p g + d has bit q (word q // 64, bit q % 64) set iff
    ``sector_g(p -> q) == d``; the last row is all of P (the "no constraint" row).
    W = ceil(|P| / 64). Built once per g and cached on the space (|P| = 3,042: 14 MB at
    g = 12). None when it would exceed ``_BITSET_MAX_BYTES``.
    """
    n = space.n
    w = (n + 63) // 64
    if n * g * w * 8 > _BITSET_MAX_BYTES:
        return None

    def build():
        k = 12 // g
        out = np.zeros((n, g, w), np.uint64)
        buf = np.zeros((min(n, 512), w * 8), np.uint8)
        for s in range(0, n, 512):
            e = min(n, s + 512)
            sec = space.sector12[s:e] // k
            for d in range(g):
                packed = np.packbits(sec == d, axis=1, bitorder="little")
                buf[: e - s, : packed.shape[1]] = packed
                out[s:e, d] = buf[: e - s].view("<u8")  # little-endian words: bit q of word q//64
        return np.concatenate([out.reshape(n * g, w), _full_words(n)[None, :]])

    return space.cached(("sector_bits", g), build)


def sector_order(space: LocationSpace, g: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(order, start): row p of ``order`` lists P by g-sector seen from p, ids ascending within
    a sector; sector d of row p is ``order[p, start[p, d]:start[p, d + 1]]``. So the k-th
    smallest id of a sector (what a bitset select of that sector returns) is one look-up.
    g = 12 is ``space.sector_order`` itself; other g are built once (a stable sort of
    sector12 // (12 / g), radix for int8) and cached on the space (|P| = 3,042: 18.5 MB).
    None when it would exceed ``_BITSET_MAX_BYTES``."""
    n, k = space.n, 12 // g
    if n * n * space.sector_order.itemsize > _BITSET_MAX_BYTES:
        return None
    start = space.sector_start[:, ::k]  # g-sector d = 12-sectors d k .. (d + 1) k - 1
    if g == 12:
        return space.sector_order, start

    def build():
        order = np.empty_like(space.sector_order)
        for s in range(0, n, 512):
            order[s:s + 512] = np.argsort(space.sector12[s:s + 512] // k, axis=1, kind="stable")
        return order, np.ascontiguousarray(start)

    return space.cached(("sector_order", g), build)


def _one_sector_stage(space, true, c, st: Stream, d: Domains, g: int, rows, out, tries):
    """The rejection of :func:`_bitset_stage` for ``rows`` with one sector constraint (prev or
    next, not both) and base B = all of P (no exact region bitset): S0 is that sector, whose
    size and k-th smallest id come from :func:`sector_order` without building a bitset; an
    empty sector means level 2, all of P (the k-th id is k). The same proposals, draws and
    acceptance as the bitset path, so the same output. Returns the rows still pending."""
    order, start = sector_order(space, g)
    hp = d.has_prev[rows]
    pv = np.where(hp, d.prev_pivot[rows], d.next_pivot[rows])
    sec = np.where(hp, d.prev_sector[rows], d.next_sector[rows])
    lo = start[pv, sec].astype(np.int64)
    size = start[pv, sec + 1].astype(np.int64) - lo
    empty = size == 0
    tot = np.where(empty, space.n, size)
    flat_order = order.reshape(-1)
    idx = np.arange(rows.size)
    for t in range(tries):
        if idx.size == 0:
            break
        rw = rows[idx]
        k = st.integers(2 * t, tot[idx], rw)
        r = np.where(empty[idx], k,
                     np.take(flat_order, pv[idx] * space.n + lo[idx] + k, mode="clip"))
        r = r.astype(np.int64)
        e = st.exponential(2 * t + 1, rw)
        ok = _accept(space, true, c, rw, r, e)
        check = np.flatnonzero(ok)
        if check.size and d.region_anchor is not None:
            ok[check] = _region_ok(space, d, rw[check], r[check])
        out[rw[ok]] = r[ok]
        idx = idx[~ok]
    return rows[idx]


def _select_rows(x, alt, use_alt, rowcum, pc, rows, k) -> np.ndarray:
    """Bit index of the k-th set bit (0-based) of bitset row ``rows[i]`` (``rows`` None: every
    row, in order): the row of ``alt`` where ``use_alt`` is set, else of ``x`` ((rows, W)
    '<u8' words). ``rowcum`` is the (W, rows) column-wise inclusive cumsum of that row's word
    popcounts ``pc`` (rows, W). Word by counting the row's cumsums <= k (W compares, one
    contiguous row each), then the bit by halving the word (32, 16, 8 bits: popcount of the
    low half, keep the half holding the bit) and the byte select table: the same bit as a
    scan of the row."""
    if rows is None:
        rows = np.arange(k.size)
        word = np.count_nonzero(rowcum <= k.astype(rowcum.dtype)[None, :], axis=0)
    else:
        word = np.count_nonzero(rowcum[:, rows] <= k.astype(rowcum.dtype)[None, :], axis=0)
    flat = rows * x.shape[1] + word
    r = k - (rowcum[word, rows] - np.take(pc.reshape(-1), flat))  # rank within the word
    wv = np.where(use_alt[rows], np.take(alt.reshape(-1), flat), np.take(x.reshape(-1), flat))
    bit = np.zeros(k.size, np.int64)
    for half, low in _HALVES:
        lo = wv & low
        c = np.bitwise_count(lo).astype(np.int64)
        up = r >= c
        r = np.where(up, r - c, r)
        wv = np.where(up, wv >> np.uint64(half), lo)
        bit += half * up
    return word * 64 + bit + _SEL8[wv.astype(np.intp), r]


def in_region(space: LocationSpace, anchor, radius, r) -> np.ndarray:
    """The one region rule: q is in the region of anchor a and radius R iff D[a, q] <= R or
    q == a (the anchor belongs to its region whatever R is). Broadcasts like `pair_dist`."""
    return (space.pair_dist(anchor, r) <= radius) | (r == anchor)


def region_rows(space: LocationSpace, anchor: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """(m, n) boolean rows of :func:`in_region` over all of P, one per (anchor, radius): whole
    distance rows compared at once (float32 rows against the largest float32 <= R, the same
    test), then the anchor set."""
    rad = _f32_floor(radius) if space.dist.dtype == np.float32 else np.asarray(radius)
    inside = space.dist[anchor] <= rad[:, None]
    inside[np.arange(anchor.size), anchor] = True
    return inside


def _region_ok(space, d: Domains, rows, r) -> np.ndarray:
    if d.region_anchor is None:
        return np.ones(r.shape, bool)
    return in_region(space, d.region_anchor[rows], d.region_radius[rows], r)


def _full_words(n: int) -> np.ndarray:
    """(W,) uint64 bitset of all of P (bits >= n cleared)."""
    w = np.zeros((n + 63) // 64 * 8, np.uint8)
    w[: (n + 7) // 8] = np.packbits(np.ones(n, bool), bitorder="little")
    return w.view("<u8")


def _f32_floor(x: np.ndarray) -> np.ndarray:
    """Largest float32 <= x (float64): for float32 d, ``d <= x`` iff ``d <= _f32_floor(x)``,
    so region tests can compare the float32 distance rows without widening them."""
    f = np.asarray(x, dtype=np.float64).astype(np.float32)
    over = f.astype(np.float64) > x
    return np.where(over, np.nextafter(f, np.float32(-np.inf)), f)


def region_bits(space: LocationSpace, d: Domains, rows: np.ndarray):
    """Region bitsets: (words (U + 1, W), per-row index into them). Rows whose region holds
    under 90% of P get the exact bitset of {q : D[a, q] <= R} ∪ {a}, built once per distinct
    ``region_id``; other rows (base = P, big regions, no ids) index the last row, all of P
    (a superset of their base: their region is then checked on acceptance).
    """
    n = space.n
    full = _full_words(n)
    idx = np.zeros(rows.size, np.int64)
    if d.region_anchor is None or d.region_id is None or d.region_size is None:
        return full[None, :], idx
    small = np.flatnonzero(10 * d.region_size[rows] < 9 * n)
    ids, first, inv = np.unique(d.region_id[rows[small]], return_index=True, return_inverse=True)
    src = rows[small[first]]
    words = np.empty((ids.size + 1, full.size), np.uint64)
    words[-1] = full
    buf = np.zeros((min(1024, max(1, ids.size)), full.size * 8), np.uint8)
    for s in range(0, ids.size, 1024):
        r = src[s:s + 1024]
        inside = region_rows(space, d.region_anchor[r], d.region_radius[r])
        packed = np.packbits(inside, axis=1, bitorder="little")
        buf[: r.size, : packed.shape[1]] = packed
        words[s:s + r.size] = buf[: r.size].view("<u8")
    idx[:] = ids.size
    idx[small] = inv.ravel()
    return words, idx


def _level_counts(x, prev, hp, rwords, ridx, n):
    """Per row, the first non-empty level of S0 = ``x``, S1 = ``prev`` (rows with a previous
    pivot), S2 = B: (use1: S1 is the row's set, its word popcounts (rows, W) and their
    column-wise running sums (W, rows)). Rows at level 2 get B written into ``x``. S1 rows are
    read from ``prev`` in place (no copy of their words); the running sums are one vector add
    per word over all rows (a row holds at most |P| bits: exact in int16 below 2^15)."""
    pc = np.bitwise_count(x)
    pcp = np.bitwise_count(prev)
    empty0 = ~pc.any(axis=1)
    use1 = empty0 & hp & pcp.any(axis=1)
    np.copyto(pc, pcp, where=use1[:, None])
    lv2 = np.flatnonzero(empty0 & ~use1)
    if lv2.size:
        x[lv2] = np.take(rwords, ridx[lv2], 0)
        pc[lv2] = np.bitwise_count(x[lv2])
    rowcum = np.empty(pc.shape[::-1], np.int16 if n < 1 << 15 else np.int32)
    np.copyto(rowcum[0], pc[:, 0])
    for j in range(1, pc.shape[1]):
        np.add(rowcum[j - 1], pc[:, j], out=rowcum[j])
    return use1, pc, rowcum


def _bitset_stage(space, true, c, st: Stream, d: Domains, bits, rows, out, tries):
    """Rejection for ``rows`` (each with at least one sector constraint) with proposals uniform
    over a bitset superset of the row's target level, chosen by exact emptiness tests:

        B  = region bitset (exact for regions under 90% of P, else all of P; :func:`region_bits`)
        S0 = B ∩ sector(prev)? ∩ sector(next)?   -> level 0 if S0 has a bit
        S1 = B ∩ sector(prev)  (prev present)    -> level 1 if S0 is empty and S1 has a bit
        S2 = B                                   -> level 2 otherwise
    Each S is a superset of its level (equal when B is exact) and an empty S proves the level
    empty, so the target is the first non-empty level exactly whenever B is exact; where B is
    a superset the acceptance test (region and E >= c D[true, r]) keeps the accepted law EM on
    the target level, and a row whose level is in fact empty never accepts and goes on to the
    explicit stage. Returns the rows still pending.
    """
    pending_all = []
    g = (bits.shape[0] - 1) // space.n
    none = bits.shape[0] - 1  # the all-of-P row
    one = d.has_prev[rows] ^ d.has_next[rows]
    if d.region_anchor is not None and d.region_id is not None and d.region_size is not None:
        one &= ~(10 * d.region_size[rows] < 9 * space.n)  # region_bits' exact rows keep bits
    if np.count_nonzero(one) >= _ONE_SECTOR_MIN and sector_order(space, g) is not None:
        pending_all.append(_one_sector_stage(space, true, c, st, d, g, rows[one], out, tries))
        rows = rows[~one]
    for s in range(0, rows.size, _BIT_CHUNK):
        sel = rows[s:s + _BIT_CHUNK]
        rwords, ridx = region_bits(space, d, sel)  # per chunk: bounded memory
        exact = ridx < rwords.shape[0] - 1  # exact region bitset: no region test needed
        hp, hn = d.has_prev[sel], d.has_next[sel]
        # np.take along axis 0: the same rows as bits[idx], without fancy indexing's overhead
        prev = np.take(bits, np.where(hp, d.prev_pivot[sel] * g + d.prev_sector[sel], none), 0)
        ex = np.flatnonzero(exact)  # the other rows' base is all of P: nothing to AND
        if ex.size:
            prev[ex] &= np.take(rwords, ridx[ex], 0)  # prev is now S1 = B ∩ sector(prev)
        x = np.take(bits, np.where(hn, d.next_pivot[sel] * g + d.next_sector[sel], none), 0)
        x &= prev  # S0
        use1, pc, rowcum = _level_counts(x, prev, hp, rwords, ridx, space.n)
        tot = rowcum[-1].astype(np.int64)
        idx = np.arange(sel.size)  # positions into the chunk
        for t in range(tries):
            if idx.size == 0:
                break
            rw = sel[idx]
            k = st.integers(2 * t, tot[idx], rw)
            r = _select_rows(x, prev, use1, rowcum, pc, idx if idx.size < sel.size else None, k)
            e = st.exponential(2 * t + 1, rw)
            ok = _accept(space, true, c, rw, r, e)
            check = np.flatnonzero(ok & ~exact[idx])
            if check.size and d.region_anchor is not None:
                ok[check] = _region_ok(space, d, rw[check], r[check])
            out[rw[ok]] = r[ok]
            idx = idx[~ok]
        pending_all.append(sel[idx])
    return np.concatenate(pending_all)


def _accept(space, true, c, rows, r, e) -> np.ndarray:
    """The EM acceptance E >= c D[true, r] per row. D[true, r] <= row_max[true], so rows with
    E >= c row_max[true] accept without reading D (the same event: exact, fewer gathers)."""
    sure = c[rows] * space.row_max[true[rows]] <= e
    ok = sure.copy()
    rest = np.flatnonzero(~sure)
    if rest.size:
        rr = rows[rest]
        ok[rest] = c[rr] * space.pair_dist(true[rr], r[rest]).astype(np.float64) <= e[rest]
    return ok


def _member(space, d: Domains, r, level: int):
    ok = np.ones(r.shape, bool)
    if d.region_anchor is not None:
        a = d.region_anchor.reshape(d.region_anchor.shape + (1,) * (r.ndim - 1))
        rad = d.region_radius.reshape(a.shape)
        ok &= in_region(space, a, rad, r)
    if level <= 1 and d.prev_pivot is not None:
        sh = d.prev_pivot.shape + (1,) * (r.ndim - 1)
        k = d.k.reshape(sh) if isinstance(d.k, np.ndarray) else d.k
        ok &= ~d.has_prev.reshape(sh) | (
            space.sector12[d.prev_pivot.reshape(sh), r] // k == d.prev_sector.reshape(sh))
    if level == 0 and d.next_pivot is not None:
        sh = d.next_pivot.shape + (1,) * (r.ndim - 1)
        k = d.k.reshape(sh) if isinstance(d.k, np.ndarray) else d.k
        ok &= ~d.has_next.reshape(sh) | (
            space.sector12[d.next_pivot.reshape(sh), r] // k == d.next_sector.reshape(sh))
    return ok


def em_sample(space: LocationSpace, true, c, rng: Stream | np.random.Generator,
              domains: Domains | None = None, tries: int = TRIES) -> np.ndarray:
    """Draw one EM output per row: Pr[r] ∝ exp(-c * D[true, r]) on the row's domain.

    ``c`` = epsilon_step / (2 * Delta_u): a scalar or one per row (rows of different budgets
    may share one call). ``rng``: a `udfs.streams.Stream` with one row per value (each row's
    draws depend on its own key only: the output of a row does not depend on the other rows)
    or a numpy Generator (keys drawn from it). Returns int64 location ids.
    """
    true = np.asarray(true, dtype=np.int64)
    st = as_stream(rng, true.size)
    c = np.broadcast_to(np.asarray(c, dtype=np.float64), true.shape)
    d = domains if domains is not None else Domains()
    out = np.full(true.shape, -1, np.int64)
    if true.size == 0:
        return out
    pending = np.arange(true.size)
    explicit: list[np.ndarray] = []
    if d.prev_pivot is not None and d.next_pivot is not None:
        cons = np.flatnonzero(d.has_prev | d.has_next)
        kr = np.broadcast_to(np.asarray(d.k, dtype=np.int64), true.shape)
        ks = np.flatnonzero(np.bincount(kr[cons], minlength=13))  # distinct k = 12 // g
        groups = [(cons[kr[cons] == k], sector_bits(space, 12 // int(k))) for k in ks]
        if cons.size and all(bits is not None for _, bits in groups):
            for rows_k, bits in groups:
                explicit.append(_bitset_stage(space, true, c, st, d, bits, rows_k, out, tries))
            rest = np.ones(true.size, bool)
            rest[cons] = False
            pending = np.flatnonzero(rest)
    if pending.size:
        explicit.append(_list_stage(space, true, c, st, _take(d, pending), pending, out, tries))
    pending = np.sort(np.concatenate(explicit)) if explicit else pending
    if pending.size:
        _explicit(space, true, c, st, d, pending, out)
    return out


def _list_stage(space, true, c, st: Stream, dp: Domains, rows, out, tries) -> np.ndarray:
    """Rejection for ``rows`` (``dp`` = their domains) with a uniform proposal over the smallest
    superset list; returns the rows still pending (global indices)."""
    mat, key, start, size = _lists(space, true[rows], dp, use_next=True)
    loc = np.arange(rows.size)  # pending positions into rows / dp
    for t in range(tries):
        if loc.size == 0:
            break
        rl = rows[loc]
        j = st.integers(2 * t, size[loc], rl)
        r = _gather(space, mat[loc], key[loc], start[loc] + j)
        e = st.exponential(2 * t + 1, rl)
        ok = _accept(space, true, c, rl, r, e)
        if (dp.region_anchor is not None or dp.prev_pivot is not None
                or dp.next_pivot is not None):
            ok &= _member(space, _take(dp, loc), r, 0)
        out[rl[ok]] = r[ok]
        loc = loc[~ok]
    return rows[loc]


def _explicit(space, true, c, st: Stream, d: Domains, rows, out) -> None:
    """Inverse-CDF draws for ``rows`` over padded candidate lists with the fallback chain."""
    dp = _take(d, rows)
    mat, key, start, size = _lists(space, true[rows], dp, use_next=False)
    wide = 4 * size > space.n  # a quarter of P or more: dense rows of P beat padded gathers
    if wide.any():
        _explicit_dense(space, true, c, st, _take(dp, np.flatnonzero(wide)), rows[wide], out)
        keep = np.flatnonzero(~wide)
        rows, dp, mat, key, start, size = (rows[keep], _take(dp, keep), mat[keep], key[keep],
                                           start[keep], size[keep])
        if rows.size == 0:
            return
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
            rr = rows[sel[done]]
            u = st.uniform(EXPLICIT, rr)
            r = _inverse_cdf(space, true[rr], c[rr], cand[done], mask[done], u)
            out[rows[sel[done]]] = r
    rest = np.concatenate(need_base) if need_base else np.empty(0, np.int64)
    if rest.size:
        # Level 2: the base set alone (P, or the region). Candidates: the base list itself.
        base = Domains(region_anchor=d.region_anchor, region_radius=d.region_radius,
                       region_size=d.region_size)
        _explicit(space, true, c, st, base, rows[rest], out)


def _explicit_dense(space, true, c, st: Stream, dp: Domains, rows, out) -> None:
    """Inverse-CDF draws for ``rows`` (domains ``dp``) over all of P: each level of the
    fallback chain is a dense boolean row built from contiguous rows of ``dist`` and
    ``sector12`` (same sets as :func:`_member`)."""
    n = space.n
    step = max(1, _CHUNK_ELEMS // n)
    for s in range(0, rows.size, step):
        loc = np.arange(s, min(rows.size, s + step))
        ds = _take(dp, loc)
        m = loc.size
        if ds.region_anchor is not None:
            base = region_rows(space, ds.region_anchor, ds.region_radius)
        else:
            base = np.ones((m, n), bool)
        k = np.broadcast_to(np.asarray(ds.k, dtype=np.int64), (m,))[:, None]
        m1 = base
        if ds.prev_pivot is not None:
            m1 = base & ((space.sector12[ds.prev_pivot] // k == ds.prev_sector[:, None])
                         | ~ds.has_prev[:, None])
        m0 = m1
        if ds.next_pivot is not None:
            m0 = m1 & ((space.sector12[ds.next_pivot] // k == ds.next_sector[:, None])
                       | ~ds.has_next[:, None])
        hp = ds.has_prev if ds.has_prev is not None else np.zeros(m, bool)
        use0 = m0.any(1)
        use1 = ~use0 & hp & m1.any(1)  # level 1 only with a previous pivot
        mask = np.where(use0[:, None], m0, np.where(use1[:, None], m1, base))
        rr = rows[loc]
        logw = -c[rr][:, None] * space.dist[true[rr]].astype(np.float64)
        logw = np.where(mask, logw, -np.inf)
        logw -= logw.max(axis=1, keepdims=True)
        cum = np.cumsum(np.exp(logw), axis=1)
        u = st.uniform(EXPLICIT, rr) * cum[:, -1]
        out[rr] = np.argmax(cum > u[:, None], axis=1)


def _inverse_cdf(space, true, c, cand, mask, u) -> np.ndarray:
    logw = -c[:, None] * space.dist[true[:, None], cand].astype(np.float64)
    logw = np.where(mask, logw, -np.inf)
    logw -= logw.max(axis=1, keepdims=True)
    cum = np.cumsum(np.exp(logw), axis=1)
    u = u * cum[:, -1]
    j = np.argmax(cum > u[:, None], axis=1)
    return cand[np.arange(true.size), j]

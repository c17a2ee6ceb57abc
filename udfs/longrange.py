"""Day-level statistics a first-order Markov chain cannot fit (docs/concepts/statistics.md).

Days are integer arrays (n, 48) of location ids, as in `udfs.mobility`. A day's home is its
slot-0 location: the convention of `models.markov` (`label_actions`) and `models.env`.
Three statistics, each compared between real and synthetic days:
- Daily mobility motifs (Schneider et al., J. R. Soc. Interface 2013): the directed network of
  the day's distinct places (an edge a -> b when the day moves from a to b; stays collapsed,
  repeated moves counted once), up to isomorphism. Days with more than `MOTIF_MAX_NODES` places
  share the class `OTHER_MOTIF`. Compared as the JSD of the two class distributions (`motifs`),
  with the share of days in the real days' `TOP_MOTIFS` most common classes.
- Home return: a day's bucket 0 = never leaves home, t = 1..47 = the slot of its last arrival
  home, 48 = leaves and never comes back (`HOME_BUCKETS`); compared as a JSD (`home_return`),
  plus the absolute difference of the shares of days whose slot 47 is home (`end_home_gap`).
- Train on synthetic, test on real (`tstr_acc1`, `tstr_acc5`): a next-place predictor trained on
  one set of days and scored on the moves (transitions to another place; stays left out) of the
  real days. The target of a move is the token HOME when it goes to the day's home, else the
  place's id, so a predictor learnt on synthetic days can say "go home" on a real day. Context:
  (slot, at home, current place), backing off to (at home, current place), then (at home); the
  prediction is the context's most frequent targets (ties: the smaller token first), completed
  from the coarser contexts.
Everything reduces to a `LongRangeSummary` of integer counts, so summaries of batches add up
(the Spark evaluation sums `summary_counts` rows) and the metrics are functions of two summaries.
Runtime: O(n * 48^2 / chunk) vectorised per set of days, plus a brute force over at most
`MOTIF_MAX_NODES`! relabellings per distinct labelled network (not per day).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from udfs.errors import InvalidParameterError
from udfs.mobility_bins import SLOTS, jsd
from udfs.mobility_stats import validate_days

__all__ = [
    "HOME_BUCKETS",
    "LONGRANGE_METRICS",
    "MOTIF_MAX_NODES",
    "OTHER_MOTIF",
    "LongRangeSummary",
    "compare_longrange",
    "day_motifs",
    "home_buckets",
    "longrange_metrics",
    "merge_summaries",
    "motif_coverage",
    "motif_label",
    "move_keys",
    "summarize_longrange",
    "summary_counts",
    "summary_from_counts",
    "tstr_accuracy",
]

#: Largest number of distinct places whose network is classified up to isomorphism.
MOTIF_MAX_NODES = 6
#: The class of days with more distinct places than MOTIF_MAX_NODES.
OTHER_MOTIF = -1
#: How many of the real days' most common motifs `motif_top_share` counts.
TOP_MOTIFS = 10
#: Home-return buckets: 0 never leaves home, 1..47 slot of the last arrival home, 48 never back.
HOME_BUCKETS = SLOTS + 1
NEVER_BACK = SLOTS
#: Predictions of the next-place predictor scored at these ranks (accuracy@k).
TSTR_RANKS = (1, 5)
#: Metric names of `compare_longrange`, in the order tables show them.
LONGRANGE_METRICS = ("motifs", "motif_top_share", "home_return", "end_home_gap",
                     "tstr_acc1", "tstr_acc5")
_CODE_BITS = 40  # motif key = places << _CODE_BITS | adjacency code (36 bits at most)
_CHUNK = 4096  # days (or test contexts) handled at once, bounding the (chunk, 48, 48) arrays


# --- motifs ----------------------------------------------------------------------------------


def first_visit_labels(days: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((n, 48) each slot's place numbered by order of first visit that day, (n,) places)."""
    labels = np.empty(days.shape, dtype=np.int64)
    for lo in range(0, len(days), _CHUNK):
        d = days[lo:lo + _CHUNK]
        first = (d[:, :, None] == d[:, None, :]).argmax(axis=2)  # first slot of the same place
        new = first == np.arange(SLOTS)
        order = np.cumsum(new, axis=1) - 1
        labels[lo:lo + _CHUNK] = np.take_along_axis(order, first, axis=1)
    return labels, labels.max(axis=1) + 1


def _canonical(keys: np.ndarray) -> np.ndarray:
    """Canonical key of each labelled network key: the smallest adjacency code over every
    relabelling of its places (brute force; isomorphic networks get one key)."""
    out = np.empty_like(keys)
    places = keys >> _CODE_BITS
    for k in np.unique(places):
        mine = np.flatnonzero(places == k)
        k = int(k)
        perms = np.array(list(itertools.permutations(range(k))), dtype=np.int64)
        weight = np.int64(1) << np.arange(k * k, dtype=np.int64)
        step = max(1, _CHUNK * 64 // (len(perms) * k * k))  # bounds the relabelled array
        for lo in range(0, mine.size, step):
            idx = mine[lo:lo + step]
            code = keys[idx] & ((np.int64(1) << _CODE_BITS) - 1)
            adj = ((code[:, None] >> np.arange(k * k)) & 1).reshape(-1, k, k)
            relabelled = adj[:, perms[:, :, None], perms[:, None, :]].reshape(
                idx.size, len(perms), k * k)
            out[idx] = (np.int64(k) << _CODE_BITS) | (relabelled * weight).sum(-1).min(-1)
    return out


def day_motifs(days: np.ndarray, max_nodes: int = MOTIF_MAX_NODES) -> np.ndarray:
    """(n,) motif key of each day (`OTHER_MOTIF` past max_nodes places); equal keys = isomorphic
    daily networks. `motif_label` spells a key out."""
    if not 1 <= max_nodes <= 6:
        raise InvalidParameterError(f"max_nodes must lie in [1, 6] (brute force), got {max_nodes}")
    labels, places = first_visit_labels(np.asarray(days))
    small = places <= max_nodes
    lab, k = labels[small], places[small][:, None]
    src, dst = lab[:, :-1], lab[:, 1:]
    bits = np.where(src != dst, np.int64(1) << (src * k + dst), 0)
    raw = (places[small] << _CODE_BITS) | np.bitwise_or.reduce(bits, axis=1)
    out = np.full(len(places), OTHER_MOTIF, dtype=np.int64)
    uniq, inv = np.unique(raw, return_inverse=True)
    out[small] = _canonical(uniq)[inv.ravel()]
    return out


def motif_label(key: int) -> str:
    """A motif key in words: its number of places and its edges (places numbered 0..k-1 in the
    canonical order), e.g. '2 places: 0>1 1>0'."""
    key = int(key)
    if key == OTHER_MOTIF:
        return f"other (more than {MOTIF_MAX_NODES} places)"
    k, code = key >> _CODE_BITS, key & ((1 << _CODE_BITS) - 1)
    edges = [f"{i // k}>{i % k}" for i in range(k * k) if code >> i & 1]
    return f"{k} place{'s' if k > 1 else ''}" + (": " + " ".join(edges) if edges else "")


# --- home return -----------------------------------------------------------------------------


def home_buckets(days: np.ndarray) -> np.ndarray:
    """(n,) home-return bucket of each day: 0 never leaves its slot-0 place, t in 1..47 the
    slot of its last arrival there from elsewhere, NEVER_BACK when it leaves and never comes
    back."""
    d = np.asarray(days)
    at_home = d == d[:, :1]
    arrive = at_home[:, 1:] & ~at_home[:, :-1]  # (n, 47): arrival at slot t + 1
    last = SLOTS - 1 - arrive[:, ::-1].argmax(axis=1)
    left = ~at_home.all(axis=1)
    return np.where(arrive.any(axis=1), last, np.where(left, NEVER_BACK, 0))


# --- next-place prediction -------------------------------------------------------------------


def move_keys(days: np.ndarray, n_locations: int) -> np.ndarray:
    """Packed key of every move (slot t -> t+1 to another place) of the days:
    ((t * 2 + at_home) * L + current) * (L + 1) + target, target = L (HOME) when the move goes
    to the day's home, else the place's id."""
    d = np.asarray(days, dtype=np.int64)
    cur, nxt, home = d[:, :-1], d[:, 1:], d[:, :1]
    moved = nxt != cur
    slot = np.broadcast_to(np.arange(SLOTS - 1), cur.shape)
    target = np.where(nxt == home, n_locations, nxt)
    ctx = (slot * 2 + (cur == home)) * n_locations + cur
    return (ctx * (n_locations + 1) + target)[moved]


def _contexts(keys: np.ndarray, n_locations: int) -> tuple[list[np.ndarray], np.ndarray]:
    """The three context levels (finest first) and the target token of packed move keys."""
    target = keys % (n_locations + 1)
    ctx = keys // (n_locations + 1)
    cur = ctx % n_locations
    at_home = (ctx // n_locations) % 2
    return [ctx, at_home * n_locations + cur, at_home], target


def _top_table(ctx: np.ndarray, target: np.ndarray, w: np.ndarray, k: int, base: int):
    """(sorted distinct contexts, (contexts, k) their k most frequent targets, -1 padded);
    targets lie in [0, base)."""
    pair, inv = np.unique(ctx * base + target, return_inverse=True)
    count = np.bincount(inv.ravel(), weights=w)
    pc, pt = pair // base, pair % base
    order = np.lexsort((pt, -count, pc))
    c, t = pc[order], pt[order]
    uniq, first = np.unique(c, return_index=True)
    rank = np.arange(c.size) - np.repeat(first, np.diff(np.r_[first, c.size]))
    table = np.full((uniq.size, k), -1, dtype=np.int64)
    keep = rank < k
    table[np.searchsorted(uniq, c[keep]), rank[keep]] = t[keep]
    return uniq, table


def tstr_accuracy(
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    n_locations: int,
    ranks: tuple[int, ...] = TSTR_RANKS,
) -> dict[int, float]:
    """{k: accuracy@k} of the backoff predictor trained on `train` moves and scored on `test`
    moves, each (packed move keys, counts). NaN when there is nothing to score or to learn."""
    kmax = max(ranks)
    tr_keys, tr_w = train
    te_keys, te_w = (np.asarray(a) for a in test)
    if te_w.sum() == 0 or np.asarray(tr_w).sum() == 0:
        return {k: float("nan") for k in ranks}
    tr_ctx, tr_target = _contexts(np.asarray(tr_keys), n_locations)
    w = np.asarray(tr_w, np.float64)
    tables = [_top_table(c, tr_target, w, kmax, n_locations + 1) for c in tr_ctx]
    te_ctx, te_target = _contexts(te_keys, n_locations)
    hits = {k: 0.0 for k in ranks}
    for lo in range(0, te_keys.size, _CHUNK):
        sl = slice(lo, lo + _CHUNK)
        cand = np.concatenate([_lookup(uniq, table, c[sl]) for (uniq, table), c
                               in zip(tables, te_ctx, strict=True)], axis=1)
        earlier = np.tril(np.ones((cand.shape[1],) * 2, dtype=bool), -1)
        dup = ((cand[:, :, None] == cand[:, None, :]) & earlier).any(axis=2)
        valid = (cand >= 0) & ~dup
        position = np.cumsum(valid, axis=1)  # 1-based rank of each valid candidate
        found = valid & (cand == te_target[sl, None])
        for k in ranks:
            hit = (found & (position <= k)).any(axis=1)
            hits[k] += float(np.sum(te_w[sl] * hit))
    total = float(np.sum(te_w))
    return {k: hits[k] / total for k in ranks}


def _lookup(uniq: np.ndarray, table: np.ndarray, ctx: np.ndarray) -> np.ndarray:
    """Each context's row of `table`, or -1s where training never saw the context."""
    pos = np.minimum(np.searchsorted(uniq, ctx), uniq.size - 1)
    seen = uniq[pos] == ctx
    return np.where(seen[:, None], table[pos], -1)


# --- summaries and comparison ----------------------------------------------------------------


@dataclass(frozen=True)
class LongRangeSummary:
    """Integer counts of one set of days: motif classes (sorted keys, counts), home-return
    buckets (HOME_BUCKETS,), days ending at home, and moves (sorted packed keys, counts)."""

    n_days: int
    motif_keys: np.ndarray
    motif_counts: np.ndarray
    home_return: np.ndarray
    end_home: int
    move_keys: np.ndarray
    move_counts: np.ndarray


def _counted(values: np.ndarray, weights: np.ndarray | None = None):
    uniq, inv = np.unique(values, return_inverse=True)
    w = np.ones(values.size, np.int64) if weights is None else np.asarray(weights, np.int64)
    return uniq.astype(np.int64), np.bincount(inv.ravel(), weights=w,
                                              minlength=uniq.size).astype(np.int64)


def summarize_longrange(days: np.ndarray, n_locations: int) -> LongRangeSummary:
    """The counts of validated days (n, 48) with ids in [0, n_locations)."""
    d = np.asarray(days, dtype=np.int64)
    motifs = _counted(day_motifs(d))
    moves = _counted(move_keys(d, n_locations))
    return LongRangeSummary(
        n_days=int(len(d)),
        motif_keys=motifs[0], motif_counts=motifs[1],
        home_return=np.bincount(home_buckets(d), minlength=HOME_BUCKETS).astype(np.int64),
        end_home=int(np.sum(d[:, -1] == d[:, 0])),
        move_keys=moves[0], move_counts=moves[1],
    )


#: Kinds of the (kind, key, w) rows of a summary (what Spark adds up).
K_MOTIF, K_HOME_RETURN, K_END_HOME, K_MOVE = range(4)


def summary_counts(s: LongRangeSummary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A summary as (kind, key, w) rows: summing rows of equal (kind, key) over batches and
    `summary_from_counts` gives the summary of all the days."""
    buckets = np.flatnonzero(s.home_return)
    parts = [(K_MOTIF, s.motif_keys, s.motif_counts),
             (K_HOME_RETURN, buckets, s.home_return[buckets]),
             (K_END_HOME, np.array([0]), np.array([s.end_home])),
             (K_MOVE, s.move_keys, s.move_counts)]
    kind = np.concatenate([np.full(len(k), c) for c, k, _ in parts]).astype(np.int32)
    key = np.concatenate([k for _, k, _ in parts]).astype(np.int64)
    w = np.concatenate([v for _, _, v in parts]).astype(np.int64)
    return kind, key, w


def summary_from_counts(kind: np.ndarray, key: np.ndarray, w: np.ndarray) -> LongRangeSummary:
    """The summary of (kind, key, w) rows (rows of one (kind, key) may repeat: they add up)."""
    kind, key, w = (np.asarray(a) for a in (kind, key, w))

    def of(c):
        mine = kind == c
        return _counted(key[mine], w[mine]) if mine.any() else (np.zeros(0, np.int64),) * 2

    motifs, moves, buckets = of(K_MOTIF), of(K_MOVE), of(K_HOME_RETURN)
    home_return = np.zeros(HOME_BUCKETS, np.int64)
    home_return[buckets[0]] = buckets[1]
    return LongRangeSummary(int(motifs[1].sum()), motifs[0], motifs[1], home_return,
                            int(w[kind == K_END_HOME].sum()), moves[0], moves[1])


def merge_summaries(parts: list[LongRangeSummary]) -> LongRangeSummary:
    """One summary of the days of several summaries."""
    rows = [summary_counts(p) for p in parts]
    return summary_from_counts(*(np.concatenate([r[i] for r in rows]) for i in range(3)))


def _aligned(keys_a, counts_a, keys_b, counts_b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(union of keys, counts of a, counts of b) over the union (0 where a side lacks a key)."""
    union = np.union1d(keys_a, keys_b)
    a, b = np.zeros(union.size), np.zeros(union.size)
    a[np.searchsorted(union, keys_a)] = counts_a
    b[np.searchsorted(union, keys_b)] = counts_b
    return union, a, b


def top_motifs(s: LongRangeSummary, n: int = TOP_MOTIFS) -> np.ndarray:
    """The n most common motif keys of a summary (`OTHER_MOTIF` left out; ties: smaller key)."""
    keep = s.motif_keys != OTHER_MOTIF
    keys, counts = s.motif_keys[keep], s.motif_counts[keep]
    return keys[np.lexsort((keys, -counts))][:n]


def compare_longrange(real: LongRangeSummary, other: LongRangeSummary,
                      n_locations: int) -> dict[str, float]:
    """The LONGRANGE_METRICS of `other` days (synthetic, or real training days) against real
    days; tstr_acc* is the predictor trained on `other` and scored on `real`."""
    if real.n_days == 0 or other.n_days == 0:
        raise InvalidParameterError("long-range statistics need at least one day on each side")
    _, p, q = _aligned(real.motif_keys, real.motif_counts, other.motif_keys, other.motif_counts)
    top = top_motifs(real)
    acc = tstr_accuracy((other.move_keys, other.move_counts),
                        (real.move_keys, real.move_counts), n_locations)
    return {
        "motifs": jsd(p, q),
        "motif_top_share": float(other.motif_counts[np.isin(other.motif_keys, top)].sum()
                                 / other.n_days),
        "home_return": jsd(real.home_return, other.home_return),
        "end_home_gap": abs(real.end_home / real.n_days - other.end_home / other.n_days),
        **{f"tstr_acc{k}": v for k, v in acc.items()},
    }


def motif_coverage(days: np.ndarray, n_locations: int, n: int = TOP_MOTIFS) -> float:
    """Share of the days whose motif is one of their own n most common motifs."""
    s = summarize_longrange(validate_days(days, n_locations, "days"), n_locations)
    return float(s.motif_counts[np.isin(s.motif_keys, top_motifs(s, n))].sum() / s.n_days)


def longrange_metrics(real_days: np.ndarray, synth_days: np.ndarray, coords: np.ndarray,
                      train_days: np.ndarray | None = None) -> dict[str, float]:
    """LONGRANGE_METRICS of synthetic days against real (held-out) days; with `train_days`
    (the real days the synthesis was trained on) also the real-trained predictor's
    `tstr_real_acc1` / `tstr_real_acc5` on the same real days: the reference TSTR aims at.
    coords: the (L, 2) location table of `udfs.mobility` (only its length is used)."""
    n_loc = int(np.asarray(coords).shape[0])
    real = summarize_longrange(validate_days(real_days, n_loc, "real_days"), n_loc)
    synth = summarize_longrange(validate_days(synth_days, n_loc, "synth_days"), n_loc)
    out = compare_longrange(real, synth, n_loc)
    if train_days is not None:
        train = summarize_longrange(validate_days(train_days, n_loc, "train_days"), n_loc)
        acc = tstr_accuracy((train.move_keys, train.move_counts),
                            (real.move_keys, real.move_counts), n_loc)
        out.update({f"tstr_real_acc{k}": v for k, v in acc.items()})
    return out

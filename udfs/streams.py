"""Counter-based random numbers per trajectory: noise that does not depend on the batch.

Why: a Spark task perturbs every user of its partition in one batched call, and a retried or
re-planned task may see other partition boundaries. With one sequential generator per call,
a trajectory's noise would depend on which other trajectories shared its call. Here every
random number is a pure function of (the trajectory's secret 64-bit key, a counter naming
the draw), so a trajectory's output is the same in any batch, any order, any partitioning.

Counter: ``site << 40 | pos << 16 | j``: `site` names the step of the mechanism (copy and
kind: anchor, radius, pivot, direction, point, ...), `pos` the point's position in the
trajectory (< 2^24), `j` the draw within that step (rejection try, the two uniforms of a
k-RR, ...; < 2^16). Distinct draws of one trajectory have distinct counters.

Generator: ``mix64(key ^ mix64(counter * GAMMA))`` where mix64 is the SplitMix64 finaliser
(Steele, Lea, Flood 2014), a bijection of 64-bit words with full avalanche. For a fixed key
the map counter -> word is a bijection (no repeats within a trajectory); for a fixed counter
the map key -> word is a bijection (distinct trajectories never share a word at the same
draw). The keys are secret (HMAC of the run key, `udfs.derive`), so outputs are unpredictable
to anyone without it. Uniforms take the top 53 bits (``[0, 1)``, as numpy's ``random``).
tests/udfs/test_streams.py checks uniformity and independence with chi-square tests.

Keys of a plain numpy Generator (unit tests, audits, `perturb(..., seed=int)`): one 64-bit
word per trajectory drawn from it (`keys_from`), so those callers keep their interface.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_S11 = np.uint64(11)
_TWO53 = 1.0 / 9007199254740992.0  # 2^-53
_TABLE_MIN = 4096  # rows from which a call's counter words come from a per-position table

SITE_SHIFT, POS_SHIFT = 40, 16
MAX_POS = 1 << 24
MAX_DRAW = 1 << 16


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 (a bijection); returns a new array."""
    z = z ^ (z >> _S30)
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def keys_from(rng: np.random.Generator, n: int) -> np.ndarray:
    """n independent 64-bit keys drawn from a numpy Generator."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def counter(site: int, pos, j: int) -> np.ndarray:
    """The counter word(s) of draw `j` of step `site` at position(s) `pos`."""
    if not 0 <= j < MAX_DRAW:
        raise ValueError(f"draw index {j} outside [0, {MAX_DRAW})")
    p = np.asarray(pos, dtype=np.uint64)
    return (np.uint64(site) << np.uint64(SITE_SHIFT)) | (p << np.uint64(POS_SHIFT)) | np.uint64(j)


def _counter_words(site: int, pos, j: int) -> np.ndarray:
    """``mix64(counter(site, pos, j) * GAMMA)``: a function of the position alone, so it is
    computed once per distinct position (trajectories are short: a table of max(pos) + 1
    words) and gathered, instead of once per row; small calls skip the table (its few extra
    numpy calls cost more than they save there)."""
    p = np.atleast_1d(np.asarray(pos))  # arrays: uint64 products wrap without a warning
    if p.size < max(_TABLE_MIN, 1) or int(p.max()) >= p.size // 8:
        return mix64(counter(site, p, j) * _GAMMA)
    top = int(p.max())
    table = mix64(counter(site, np.arange(top + 1), j) * _GAMMA)
    return np.take(table, p)


@dataclass(frozen=True)
class Stream:
    """Per-row random numbers: row r draws from (key[r], site, pos[r], j) only.

    `key`: (B,) uint64, the row's trajectory key; `pos`: (B,) positions in the trajectory
    (None: 0). A sampler handed a Stream draws ``uniform(j, rows)`` etc. with `j` naming the
    draw; rows never interact, so any subset or order of rows gets the same numbers.
    """

    key: np.ndarray
    site: int = 0
    pos: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.key.shape[0])

    def at(self, site: int, pos=None, rows=None) -> Stream:
        """This stream's rows (all, or `rows`) re-addressed to step `site` at `pos`."""
        key = self.key if rows is None else self.key[rows]
        p = None if pos is None else np.broadcast_to(np.asarray(pos, dtype=np.int64), key.shape)
        return Stream(key, site, p)

    def take(self, rows) -> Stream:
        return Stream(self.key[rows], self.site, None if self.pos is None else self.pos[rows])

    def bits(self, j: int, rows=None) -> np.ndarray:
        key = self.key if rows is None else self.key[rows]
        pos = 0 if self.pos is None else (self.pos if rows is None else self.pos[rows])
        return mix64(key ^ _counter_words(self.site, pos, j))

    def uniform(self, j: int, rows=None) -> np.ndarray:
        """float64 in [0, 1) per row (53 random bits)."""
        return (self.bits(j, rows) >> _S11).astype(np.float64) * _TWO53

    def exponential(self, j: int, rows=None) -> np.ndarray:
        """Exp(1) per row by inversion: -log(1 - U), U in [0, 1) (finite: 1 - U >= 2^-53)."""
        return -np.log1p(-self.uniform(j, rows))

    def integers(self, j: int, high, rows=None) -> np.ndarray:
        """Uniform integer in [0, high) per row (high >= 1; scalar or per row): floor(U high),
        U with 53 bits, so the bias is below high / 2^53."""
        u = self.uniform(j, rows)
        h = np.asarray(high)
        return np.minimum((u * h).astype(np.int64), h - 1)


def as_stream(rng, n: int) -> Stream:
    """A Stream for n rows: given as is, or keyed from a numpy Generator."""
    if isinstance(rng, Stream):
        if len(rng) != n:
            raise ValueError(f"stream has {len(rng)} rows for {n} values")
        return rng
    return Stream(keys_from(rng, n))

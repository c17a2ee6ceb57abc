"""Counter-based per-trajectory streams (udfs.streams): uniform, independent draws, and outputs
that depend on nothing but a trajectory's own key (partition independence of the release)."""

from __future__ import annotations

import numpy as np
import pytest
from stats_util import gof_pvalue

from udfs.collect import perturb
from udfs.streams import Stream, keys_from

ALPHA = 1e-4  # false-failure rate of each GOF assertion at its fixed seed
N = 200_000


def _keys(n: int, seed: int = 0) -> np.ndarray:
    return keys_from(np.random.default_rng(seed), n)


def _uniform_p(u: np.ndarray, bins: int = 64) -> float:
    counts = np.bincount(np.minimum((u * bins).astype(np.int64), bins - 1), minlength=bins)
    return gof_pvalue(counts, np.full(bins, 1.0 / bins))


def _pairs_p(u: np.ndarray, v: np.ndarray, bins: int = 16) -> float:
    cell = (u * bins).astype(np.int64) * bins + (v * bins).astype(np.int64)
    return gof_pvalue(np.bincount(cell, minlength=bins * bins), np.full(bins * bins,
                                                                         1.0 / bins**2))


def test_uniforms_are_uniform_across_keys_and_along_one_key():
    st = Stream(_keys(N), site=5, pos=np.zeros(N, np.int64))
    u = st.uniform(3)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert _uniform_p(u) > ALPHA
    # one key, many draws (every position and draw index of a step): uniform too
    one = Stream(np.full(N, _keys(1, 9)[0]), site=7, pos=np.arange(N) // 64)
    along = np.concatenate([one.take(np.flatnonzero(np.arange(N) % 64 == j)).uniform(j)
                            for j in range(64)])
    assert _uniform_p(along) > ALPHA
    assert _uniform_p(1.0 - np.exp(-st.exponential(4))) > ALPHA  # Exp(1) by its CDF


def test_successive_draws_and_steps_are_independent():
    st = Stream(_keys(N, 1), site=2, pos=np.full(N, 3))
    assert _pairs_p(st.uniform(0), st.uniform(1)) > ALPHA
    assert _pairs_p(st.uniform(0), st.at(3, 3).uniform(0)) > ALPHA  # another step, same j
    assert _pairs_p(st.uniform(0), st.at(2, 4).uniform(0)) > ALPHA  # another position


class _IgnoresDrawIndex(Stream):
    """Deliberately broken: every draw of a step reuses the same counter (j ignored)."""

    def bits(self, j, rows=None):
        return super().bits(0, rows)


def test_the_pair_check_rejects_a_stream_that_reuses_its_counter():
    st = _IgnoresDrawIndex(_keys(N, 1), site=2, pos=np.full(N, 3))
    assert _pairs_p(st.uniform(0), st.uniform(1)) < ALPHA


def test_a_rows_draws_do_not_depend_on_the_other_rows():
    keys = _keys(1000, 2)
    pos = np.arange(1000) % 9
    full = Stream(keys, 4, pos).uniform(7)
    rows = np.random.default_rng(3).permutation(1000)[:137]
    assert np.array_equal(Stream(keys[rows], 4, pos[rows]).uniform(7), full[rows])
    assert np.array_equal(Stream(keys, 4, pos).uniform(7, rows), full[rows])


@pytest.mark.parametrize("mech", ["tp", "atp", "exp", "uniform"])
@pytest.mark.parametrize("eps", [0.5, 4.0, 1e3])
def test_keyed_perturb_is_the_same_in_any_batch(grid_space, mech, eps):
    """Each trajectory perturbed alone, in shuffled chunks or in one batch (padded to different
    widths, mixed lengths): bit-identical outputs. eps 1e3 drives most EM draws to the
    explicit inverse-CDF stage, eps 0.5 keeps them in rejection."""
    rng = np.random.default_rng(4)
    trajs = [rng.integers(0, grid_space.n, size=n) for n in rng.integers(1, 9, size=60)]
    keys = _keys(len(trajs), 5)
    whole = perturb(trajs, grid_space, eps, mech, keys)
    order = rng.permutation(len(trajs))
    got: list = [None] * len(trajs)
    for chunk in np.array_split(order, 7):
        outs = perturb([trajs[i] for i in chunk], grid_space, eps, mech, keys[chunk])
        for i, o in zip(chunk, outs, strict=True):
            got[i] = o
    alone = [perturb([t], grid_space, eps, mech, keys[i:i + 1])[0] for i, t in enumerate(trajs)]
    for w, g, a in zip(whole, got, alone, strict=True):
        assert np.array_equal(w, g) and np.array_equal(w, a)


def test_keyed_perturb_checks_the_key_count(grid_space):
    from udfs.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="one uint64 key per trajectory"):
        perturb([np.array([0, 1])], grid_space, 1.0, "tp", _keys(2))

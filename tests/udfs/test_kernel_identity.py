"""The kernel's speed work must not change one output: pinned digests and an old-code oracle.

Why: the releases are reproducible (a trajectory's noise is a function of its stream key), so a
faster kernel must give bit-identical outputs for every key, mechanism, combiner and epsilon.
`DIGESTS` were computed with the code before the issue-17 speed work (commit 920a15e) on a
fixed input: 400 locations (ten of them duplicates of others, so nearest-location queries
tie; a few far away, like the Shanghai file's), 300 trajectories of 1-8 points. The oracle
test keeps that commit's `combine` (the medoid combiners) verbatim as the reference.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from udfs.collect import perturb, perturb_padded
from udfs.space import LocationSpace
from udfs.streams import keys_from
from udfs.tp import _midpoint, combine

EPSILONS = (1.0, 4.0, 10.0)
CASES = [("atp", c) for c in ("medoid", "copy_medoid", "paper", "midpoint")] + [
    ("tp", c) for c in ("medoid", "copy_medoid", "paper", "midpoint")] + [
    ("exp", "medoid"), ("uniform", "medoid")]

DIGESTS = {
    ('atp', 'medoid', 1.0): 'd806b8399e6e18c1',
    ('atp', 'medoid', 4.0): '7492a91c5808d07b',
    ('atp', 'medoid', 10.0): '4d4e592d50fa991f',
    ('atp', 'copy_medoid', 1.0): '9932fdcefaf0c504',
    ('atp', 'copy_medoid', 4.0): '772217c5ed75167b',
    ('atp', 'copy_medoid', 10.0): '5f12fe233aef239b',
    ('atp', 'paper', 1.0): 'dc59619462be0da3',
    ('atp', 'paper', 4.0): 'f953cbb805d1791c',
    ('atp', 'paper', 10.0): '4e011aa3b971d7d8',
    ('atp', 'midpoint', 1.0): 'f008d048f426a7e2',
    ('atp', 'midpoint', 4.0): '0a988e0f0fed80cc',
    ('atp', 'midpoint', 10.0): '1f5ad70206aff2fc',
    ('tp', 'medoid', 1.0): '838ecf47f9d7fda4',
    ('tp', 'medoid', 4.0): '0f13113cd7c651c1',
    ('tp', 'medoid', 10.0): '130142ee07957545',
    ('tp', 'copy_medoid', 1.0): '4f6110f71c3ee57a',
    ('tp', 'copy_medoid', 4.0): '1de774d3beb3a0ef',
    ('tp', 'copy_medoid', 10.0): '6836ce13f6a24bc6',
    ('tp', 'paper', 1.0): '5d22f09d2759f461',
    ('tp', 'paper', 4.0): '309373c3192e037f',
    ('tp', 'paper', 10.0): 'b99c2c4a2a7619d7',
    ('tp', 'midpoint', 1.0): '1ee443719f698b8b',
    ('tp', 'midpoint', 4.0): '3bf437ace57176c1',
    ('tp', 'midpoint', 10.0): '778fa4aca149dabf',
    ('exp', 'medoid', 1.0): 'e7cfe6384c781209',
    ('exp', 'medoid', 4.0): '386332d86696c0a2',
    ('exp', 'medoid', 10.0): 'd29114d2887bb80c',
    ('uniform', 'medoid', 1.0): '003061cae64a4bad',
    ('uniform', 'medoid', 4.0): '003061cae64a4bad',
    ('uniform', 'medoid', 10.0): '003061cae64a4bad',
}


@pytest.fixture(scope="module")
def tie_space() -> LocationSpace:
    rng = np.random.default_rng(11)
    lat = 31.0 + rng.random(400) * 0.8
    lon = 121.0 + rng.random(400) * 0.9
    lat[390:], lon[390:] = lat[:10], lon[:10]  # duplicates: exact ties in nearest queries
    lat[380:385], lon[380:385] = 39.9 + rng.random(5), 116.3 + rng.random(5)  # far away
    return LocationSpace.from_latlon(lat, lon)


def _walks(space: LocationSpace, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 9))
        if i % 3 == 0:  # anywhere in P
            out.append(rng.integers(0, space.n, length))
            continue
        cur = [int(rng.integers(0, space.n))]
        for _ in range(length - 1):
            cur.append(int(space.order[cur[-1], rng.integers(1, 15)]))
        out.append(np.array(cur, dtype=np.int64))
    return out


def _digest(space, mech, combiner, eps) -> str:
    trajs = _walks(space, 300, 5)
    keys = keys_from(np.random.default_rng(3), len(trajs))
    out = perturb(trajs, space, eps, mech, keys, combiner=combiner)
    return hashlib.sha256(np.concatenate(out).astype("<i8").tobytes()).hexdigest()[:16]


# size thresholds that pick between equivalent code paths: "small" forces the small-call
# paths, "large" the batch paths (one-sector stage, chunked transposed combine, sorted
# nearest-location queries, per-position counter tables)
PATHS = {"small": {"_ONE_SECTOR_MIN": 10**9, "_COMBINE_SMALL": 10**9, "_SORT_MIN": 10**9,
                   "_TABLE_MIN": 10**9},
         "large": {"_ONE_SECTOR_MIN": 0, "_COMBINE_SMALL": 0, "_COMBINE_CHUNK": 37,
                   "_SORT_MIN": 0, "_TABLE_MIN": 0}}


def _force(monkeypatch, path: str) -> None:
    import udfs.sampling
    import udfs.space
    import udfs.streams
    import udfs.tp

    for name, value in PATHS[path].items():
        mod = next(m for m in (udfs.sampling, udfs.tp, udfs.space, udfs.streams)
                   if hasattr(m, name))
        monkeypatch.setattr(mod, name, value)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("mech,combiner", CASES)
def test_outputs_match_the_pre_speedup_digests(tie_space, mech, combiner, path, monkeypatch):
    _force(monkeypatch, path)
    got = {eps: _digest(tie_space, mech, combiner, eps) for eps in EPSILONS}
    assert got == {eps: DIGESTS[(mech, combiner, eps)] for eps in EPSILONS}


def test_padded_entry_point_matches_the_list_one(tie_space):
    trajs = _walks(tie_space, 120, 9)
    keys = keys_from(np.random.default_rng(4), len(trajs))
    lens = np.array([len(t) for t in trajs])
    pad = np.zeros((len(trajs), 8), np.int64)
    for i, t in enumerate(trajs):
        pad[i, : len(t)] = t
    for mech in ("atp", "tp"):
        flat = perturb_padded(pad, lens, tie_space, 4.0, mech, keys)
        listed = perturb(trajs, tie_space, 4.0, mech, keys)
        assert all(np.array_equal(flat[i, :n], o) for i, (n, o) in
                   enumerate(zip(lens, listed, strict=True)))


def _combine_920a15e(a, b, space, how, lens):
    """`udfs.tp.combine` of commit 920a15e ("medoid" / "copy_medoid"), kept as the oracle."""
    valid = np.arange(a.shape[1])[None, :] < np.asarray(lens)[:, None]
    rows, cols = np.nonzero(valid)
    outputs = np.concatenate([a, b], axis=1)
    both = np.concatenate([valid, valid], axis=1)
    width = outputs.shape[1]
    p_idx, q_idx = np.triu_indices(width, 1)
    r, e = np.nonzero(both[:, p_idx] & both[:, q_idx])
    p, q = p_idx[e], q_idx[e]
    d = space.dist[outputs[r, p], outputs[r, q]]
    sums = (np.bincount(r * width + p, weights=d, minlength=outputs.size)
            + np.bincount(r * width + q, weights=d, minlength=outputs.size))
    av, bv = a[rows, cols], b[rows, cols]
    candidates = [av, bv]
    cost = [sums[rows * width + cols], sums[rows * width + a.shape[1] + cols]]
    if how == "medoid":
        mid = av.copy()
        apart = np.flatnonzero(av != bv)
        mid[apart] = _midpoint(av[apart], bv[apart], space)
        candidates.append(mid)
        pt, j = np.nonzero(both[rows])
        theirs = outputs[rows[pt], j]
        cost.append(np.bincount(pt, weights=space.dist[mid[pt], theirs], minlength=rows.size))
    cost = np.stack(cost)
    out = a.copy()
    out[rows, cols] = np.stack(candidates)[np.argmin(cost, axis=0), np.arange(rows.size)]
    return out


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("how", ["medoid", "copy_medoid"])
def test_combine_matches_the_old_code(tie_space, how, path, monkeypatch):
    _force(monkeypatch, path)
    rng = np.random.default_rng(21)
    n_rows, width = 500, 8
    lens = rng.integers(1, width + 1, n_rows)
    a = rng.integers(0, tie_space.n, (n_rows, width))
    b = np.where(rng.random((n_rows, width)) < 0.2, a, rng.integers(0, tie_space.n,
                                                                   (n_rows, width)))
    b[:50] = np.where(a[:50] < 10, a[:50] + 390, b[:50])  # duplicates: equal costs, ties
    a[50:60, 3:] = 7  # padding of any value is left alone
    for w in (width, 5):
        ln = np.minimum(lens, w)
        assert np.array_equal(combine(a[:, :w], b[:, :w], tie_space, how, ln),
                              _combine_920a15e(a[:, :w], b[:, :w], tie_space, how, ln))


@pytest.mark.parametrize("g", [2, 4, 6, 12])
def test_sector_order_lists_each_sector_by_ascending_id(grid_space, g):
    from udfs.sampling import sector_order

    order, start = sector_order(grid_space, g)
    sec = grid_space.sector12 // (12 // g)
    for p in range(grid_space.n):
        for d in range(g):
            got = order[p, start[p, d]:start[p, d + 1]]
            assert got.tolist() == np.flatnonzero(sec[p] == d).tolist()


def test_bulk_validation_keeps_the_first_bad_trajectory_error(grid_space):
    from udfs.errors import InvalidTrajectoryError

    good = [np.array([1, 2]), [3, 4]]
    cases = [([np.array([1, 99]), np.array([], int)], "trajectory 0 has location id 99"),
             ([*good, np.array([], int)], "trajectory 2 is empty"),
             ([*good, np.array([[1, 2]])], "trajectory 2 has shape"),
             ([*good, np.array([2 ** 64 - 1], np.uint64)], "trajectory 2 has location id -1"),
             ([*good, np.array([True])], "trajectory 2 holds non-integer")]
    for trajs, msg in cases:
        with pytest.raises(InvalidTrajectoryError, match=msg):
            perturb(trajs, grid_space, 1.0, "atp", 0)
    assert [len(t) for t in perturb(iter(good), grid_space, 1.0, "atp", 0)] == [2, 2]


# A small release through the collect kernel (`udfs.collect_kernel.ReleaseKernel`, Arrow in and
# out, the Spark stage's path) on a space and batch big enough for the batch code paths
# (one-sector stage, chunked combine, exact region bitsets): the checksum of every published
# column. Computed on the code before the issue-54 speed work; the same seed must give the
# same bytes after it.
RELEASE_DIGESTS = {
    ("atp", 4.0): "d3be4fa361c0cb23",
    ("atp", 1.0): "1f7eba9daf4c8e41",
    ("tp", 4.0): "2f9ac7326fa1cb33",
    ("exp", 4.0): "a2a173d67d915ec5",
}


@pytest.fixture(scope="module")
def release_input():
    import datetime as dt

    import pyarrow as pa

    rng = np.random.default_rng(54)
    lat = 31.0 + rng.random(1500) * 0.9
    lon = 121.0 + rng.random(1500) * 1.0
    lat[1490:], lon[1490:] = lat[:10], lon[:10]  # duplicates: ties in nearest queries
    lat[1480:1485], lon[1480:1485] = 39.9 + rng.random(5), 116.3 + rng.random(5)  # far away
    space = LocationSpace.from_latlon(lat, lon)
    rows = {"user_id": [], "date": [], "traj_id": [], "loc_ids": []}
    for u in range(400):
        for day in range(8):
            length = int(rng.integers(1, 9))
            cur = [int(rng.integers(0, space.n))]
            for _ in range(length - 1):
                cur.append(int(space.order[cur[-1], rng.integers(1, 20)]))
            rows["user_id"].append(f"u{u:04d}")
            rows["date"].append(dt.date(2014, 6, 2) + dt.timedelta(days=day))
            rows["traj_id"].append(day % 3)
            rows["loc_ids"].append(cur)
    table = pa.table({"user_id": rows["user_id"], "date": pa.array(rows["date"], pa.date32()),
                      "traj_id": pa.array(rows["traj_id"], pa.int64()),
                      "loc_ids": pa.array(rows["loc_ids"], pa.list_(pa.int32()))})
    return space, table


def _release_digest(space, table, mech: str, eps: float) -> str:
    import functools

    from jobs.keys import pseudonym, user_seed
    from udfs import collect_kernel as K

    key = b"issue-54 pinned release key....."
    kernel = K.ReleaseKernel(dataset="pin", settings=(K.Setting(mech, eps, "pin"),),
                             seed_for=functools.partial(user_seed, key),
                             pseudonym_of=functools.partial(pseudonym, key),
                             traj_key_of=functools.partial(pseudonym, key))
    out = kernel(table, space)
    h = hashlib.sha256()
    for name in out.column_names:
        h.update(name.encode())
        h.update(repr(out.column(name).to_pylist()).encode())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("mech,eps", sorted(RELEASE_DIGESTS))
def test_a_pinned_release_gives_the_same_bytes(release_input, mech, eps):
    space, table = release_input
    assert _release_digest(space, table, mech, eps) == RELEASE_DIGESTS[(mech, eps)]

"""udfs.longrange: hand-computed motifs, home return and train-on-synthetic scores, and each
statistic against uniform random days and a real-vs-real floor (toy days; Geolife when present)."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from tests.udfs.test_mobility import day, js2
from udfs.errors import InvalidParameterError, InvalidTrajectoryError
from udfs.longrange import (
    HOME_BUCKETS,
    OTHER_MOTIF,
    compare_longrange,
    day_motifs,
    home_buckets,
    longrange_metrics,
    merge_summaries,
    motif_coverage,
    motif_label,
    summarize_longrange,
    summary_counts,
    summary_from_counts,
)

LN2 = math.log(2)
COORDS8 = np.column_stack([np.zeros(8), np.arange(8) * 0.01])


# Hand-made days over locations 0..7 (home = slot 0's place)
A = day((0, 16), (1, 18), (0, 14))  # home, work, home: arrives home at slot 34
B = day((0, 48))  # stays home
C = day((0, 10), (1, 38))  # leaves, never back
D = day((0, 10), (1, 10), (0, 10), (2, 18))  # home, 1, home (slot 20), 2
E = day((0, 10), (1, 5), (0, 5), (2, 10), (0, 18))  # two trips from home, back at slot 30
SEVEN = day(*[(i, 6) for i in range(7)], (0, 6))  # 7 places: the "other" class


# --- motifs ------------------------------------------------------------------------------------


def _edges(d: np.ndarray) -> tuple[int, set[tuple[int, int]]]:
    """Oracle: the day's places and its set of moves, plain Python."""
    return len(set(d.tolist())), {(int(a), int(b)) for a, b in zip(d[:-1], d[1:], strict=True)
                                  if a != b}


def _isomorphic(x: np.ndarray, y: np.ndarray) -> bool:
    """Oracle: some bijection of x's places onto y's maps x's edge set onto y's."""
    (nx, ex), (ny, ey) = _edges(x), _edges(y)
    px, py = sorted(set(x.tolist())), sorted(set(y.tolist()))
    if nx != ny or len(ex) != len(ey):
        return False
    return any({(m[a], m[b]) for a, b in ex} == ey
               for m in (dict(zip(px, perm, strict=True)) for perm in itertools.permutations(py)))


def test_motif_labels_by_hand():
    keys = day_motifs(np.stack([A, B, E, SEVEN, day((3, 10), (5, 30), (6, 8))]))
    assert motif_label(keys[0]) == "2 places: 0>1 1>0"
    assert motif_label(keys[1]) == "1 place"
    assert motif_label(keys[2]) == "3 places: 0>1 0>2 1>0 2>0"  # a star around home
    assert keys[3] == OTHER_MOTIF and motif_label(keys[3]).startswith("other")
    # a path a>b>c: of the six labellings, edges {1>0, 0>2} (bits 3 and 2) give the least code
    assert motif_label(keys[4]) == "3 places: 0>2 1>0"


def test_motifs_are_isomorphism_classes():
    """Keys agree exactly where a brute-force oracle finds an isomorphism (random small days)."""
    rng = np.random.default_rng(3)
    days = []
    for _ in range(120):
        k = int(rng.integers(1, 6))
        places = rng.choice(8, size=k, replace=False)
        seq = places[rng.integers(0, k, size=int(rng.integers(2, 9)))]
        seq = np.r_[places, seq]  # every place visited
        days.append(np.repeat(seq, np.diff(np.linspace(0, 48, seq.size + 1).astype(int))))
    days = np.stack(days)
    keys = day_motifs(days)
    for i, j in itertools.combinations(range(0, 120, 3), 2):
        assert (keys[i] == keys[j]) == _isomorphic(days[i], days[j]), (days[i], days[j])


def test_motif_jsd_and_top_share_by_hand():
    real, synth = np.stack([A, A, D]), np.stack([A, E, SEVEN])
    m = longrange_metrics(real, synth, COORDS8)
    # classes: two places (A), D's three, E's star, other: real (2, 1, 0, 0), synth (1, 0, 1, 1)
    assert m["motifs"] == pytest.approx(js2([2, 1, 0, 0], [1, 0, 1, 1]), abs=1e-12)
    assert m["motif_top_share"] == pytest.approx(1 / 3)  # only A is among real's top classes
    assert motif_coverage(real, 8) == 1.0 and motif_coverage(synth, 8, n=1) == pytest.approx(1 / 3)
    assert longrange_metrics(real, real, COORDS8)["motifs"] == 0.0


def test_max_nodes_is_bounded():
    with pytest.raises(InvalidParameterError, match="max_nodes"):
        day_motifs(A[None, :], max_nodes=7)


# --- home return -------------------------------------------------------------------------------


def test_home_buckets_by_hand():
    assert home_buckets(np.stack([A, B, C, D, E])).tolist() == [34, 0, 48, 20, 30]


def test_home_return_and_end_home_gap_by_hand():
    real, synth = np.stack([A, B, C]), np.stack([A, D, C, C])
    m = longrange_metrics(real, synth, COORDS8)
    # buckets 0, 20, 34, 48: real (1, 0, 1, 1), synth (0, 1, 1, 2)
    assert m["home_return"] == pytest.approx(js2([1, 0, 1, 1], [0, 1, 1, 2]), abs=1e-12)
    assert m["end_home_gap"] == pytest.approx(2 / 3 - 1 / 4)  # A, B end home; of synth, A


# --- train on synthetic, test on real --------------------------------------------------------


def test_tstr_accuracy_by_hand():
    """Train: home 0 -> 1 -> home, home 0 -> 3 -> home, home 2 -> 3 -> 4 (moves only).
    Test moves, with the context the predictor uses and its ranked guesses:
    S1 (9, home, 0) -> 3: seen, guesses [1, 3] (tie: smaller first): miss @1, hit @5;
       (29, away, 3) -> HOME: seen, [HOME]: hit.
    S2 (9, home, 5) -> 3: only (home) seen: [3 (twice), 1]: hit; (39, away, 3) -> 4: hit.
    S3 (4, home, 0) -> 3: (home, 0) seen: [1, 3]: miss @1, hit @5; (29, away, 3) -> HOME: hit.
    S4 (23, home, 1) -> 5: only (home): [3, 1]: miss @1 and @5.
    7 moves: 4 hits @1, 6 @5."""
    train = np.stack([day((0, 10), (1, 20), (0, 18)), day((0, 10), (3, 20), (0, 18)),
                      day((2, 10), (3, 30), (4, 8))])
    test = np.stack([day((0, 10), (3, 20), (0, 18)), day((5, 10), (3, 30), (4, 8)),
                     day((0, 5), (3, 25), (0, 18)), day((1, 24), (5, 24))])
    m = longrange_metrics(test, train, COORDS8[:6], train_days=train)
    assert m["tstr_acc1"] == pytest.approx(4 / 7)
    assert m["tstr_acc5"] == pytest.approx(6 / 7)
    assert m["tstr_real_acc1"] == m["tstr_acc1"]


def test_tstr_without_moves_is_nan():
    m = longrange_metrics(np.stack([A]), np.stack([B]), COORDS8)  # nothing to learn from
    assert math.isnan(m["tstr_acc1"]) and math.isnan(m["tstr_acc5"])


# --- summaries add up; bad input -----------------------------------------------------------------


def test_summaries_of_batches_add_up_to_the_whole():
    rng = np.random.default_rng(5)
    days = np.repeat(rng.integers(0, 8, size=(60, 8)), 6, axis=1)
    whole = summarize_longrange(days, 8)
    parts = merge_summaries([summarize_longrange(days[i:i + 17], 8) for i in range(0, 60, 17)])
    rows = summary_counts(whole)
    again = summary_from_counts(*rows)
    for s in (parts, again):
        assert s.n_days == 60 and s.end_home == whole.end_home
        for f in ("motif_keys", "motif_counts", "home_return", "move_keys", "move_counts"):
            np.testing.assert_array_equal(getattr(s, f), getattr(whole, f))
    assert whole.home_return.size == HOME_BUCKETS
    other = summarize_longrange(days[::2], 8)
    assert compare_longrange(whole, other, 8) == compare_longrange(parts, other, 8)


def test_bad_days_are_rejected_with_the_reason():
    with pytest.raises(InvalidTrajectoryError, match="location ids in"):
        longrange_metrics(np.full((1, 48), 9), A[None, :], COORDS8)


# --- against uniform random days and a real-vs-real floor --------------------------------------


def toy_days(n: int, seed: int, n_loc: int = 60) -> np.ndarray:
    """Commuter days: home, work from about slot 16 to 36, on some days an errand on the way
    back (a shared shop), on a few days an evening out and back home."""
    rng = np.random.default_rng(seed)
    home, work = rng.integers(0, 40, n), rng.integers(40, 55, n)
    go, back = rng.integers(14, 19, n), rng.integers(34, 39, n)
    days = np.repeat(home[:, None], 48, axis=1)
    t = np.arange(48)
    days = np.where((t >= go[:, None]) & (t < back[:, None]), work[:, None], days)
    errand = rng.random(n) < 0.4
    shop = rng.integers(55, 60, n)
    days = np.where(errand[:, None] & (t >= back[:, None]) & (t < back[:, None] + 2),
                    shop[:, None], days)
    out = rng.random(n) < 0.2
    days = np.where(out[:, None] & (t >= 40) & (t < 44), shop[:, None], days)
    return days


def _first_order_chain(days: np.ndarray, n_loc: int, n: int, seed: int) -> np.ndarray:
    """An exact (non-private) first-order location chain per slot, fitted on `days`."""
    rng = np.random.default_rng(seed)
    start = np.bincount(days[:, 0], minlength=n_loc) / len(days)
    out = np.empty((n, 48), np.int64)
    out[:, 0] = rng.choice(n_loc, size=n, p=start)
    for t in range(47):
        counts = np.zeros((n_loc, n_loc))
        np.add.at(counts, (days[:, t], days[:, t + 1]), 1)
        cdf = np.cumsum(counts[out[:, t]], axis=1)
        out[:, t + 1] = (cdf > rng.random(n)[:, None] * cdf[:, -1:]).argmax(axis=1)
    return out


def _check_floor_beats_uniform(real: np.ndarray, other: np.ndarray, coords: np.ndarray):
    rng = np.random.default_rng(0)
    floor = longrange_metrics(real, other, coords)
    uniform = longrange_metrics(real, rng.integers(len(coords), size=real.shape), coords)
    for metric in ("motifs", "home_return", "end_home_gap"):
        assert floor[metric] < 0.5 * uniform[metric], (metric, floor, uniform)
    assert floor["motif_top_share"] > uniform["motif_top_share"] + 0.1
    for k in ("tstr_acc1", "tstr_acc5"):
        assert floor[k] > 10 * uniform[k] and floor[k] > 0.05, (k, floor, uniform)
    return floor, uniform


def test_toy_real_halves_beat_uniform_and_a_first_order_chain_misses_home():
    coords = np.column_stack([np.zeros(60), np.arange(60) * 0.01])
    real, other = toy_days(1500, 1), toy_days(1500, 2)
    floor, _ = _check_floor_beats_uniform(real, other, coords)
    chain = longrange_metrics(real, _first_order_chain(other, 60, 1500, 3), coords)
    # the chain forgets which home a day left from: it ends at home far less often
    assert chain["end_home_gap"] > floor["end_home_gap"] + 0.3
    assert chain["home_return"] > 5 * floor["home_return"]
    assert chain["motifs"] > floor["motifs"] + 0.1


@pytest.mark.realdata
def test_geolife_real_vs_held_out_beats_uniform(shared_data: Path):
    folder = shared_data / "geolife_pategail"
    coords = np.loadtxt(folder / "gps")
    real = np.loadtxt(folder / "real.data", dtype=np.int64)
    test = np.loadtxt(folder / "test.data", dtype=np.int64)
    _, uniform = _check_floor_beats_uniform(test, real, coords)
    assert uniform["motif_top_share"] == 0.0  # uniform days visit ~45 places: all "other"

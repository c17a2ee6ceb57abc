"""Unit tests of udfs.mobility with hand-computed oracles (no real data, no Spark)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from haversine import Unit, haversine
from scipy.spatial.distance import jensenshannon

from udfs.errors import InputDataError, InvalidParameterError, InvalidTrajectoryError
from udfs.mobility import jsd, jsd_metrics, metric_bins
from udfs.mobility_bins import HistogramSpec, bucket_index, histogram
from udfs.mobility_stats import (
    haversine_km,
    location_counts,
    paper_radius,
    paper_step_distances,
    row_mean48,
    run_length_counts,
    summarize_days,
)

LN2 = math.log(2)
# Four locations: 0 at the origin, 1 at (3, 4) degrees away (squared distance 25), 2 one degree
# east of 0 on the equator, 3 far away (squared distance 5000 > 2101.45).
COORDS = np.array([[0.0, 0.0], [3.0, 4.0], [0.0, 1.0], [50.0, 50.0]])


def day(*runs: tuple[int, int]) -> np.ndarray:
    """One 48-slot day from (location, length) runs."""
    d = np.concatenate([np.full(n, loc) for loc, n in runs])
    assert d.size == 48
    return d


def js2(p, q) -> float:
    """Independent oracle: scipy's Jensen-Shannon distance squared (natural log)."""
    return float(jensenshannon(np.asarray(p, float), np.asarray(q, float)) ** 2)


# --- JSD -------------------------------------------------------------------------------------


def test_jsd_matches_scipy_and_its_bounds():
    rng = np.random.default_rng(1)
    for _ in range(20):
        p, q = rng.random(30) * (rng.random(30) < 0.5), rng.random(30)
        assert jsd(p, q) == pytest.approx(js2(p, q), abs=1e-12)
        assert jsd(p, q) == pytest.approx(jsd(q, p), abs=1e-15)
        assert jsd(3 * p, q) == pytest.approx(jsd(p, q), abs=1e-12)  # counts are normalised
    assert jsd([1, 0], [0, 1]) == pytest.approx(LN2, abs=1e-15)
    assert jsd([2, 3, 0], [2, 3, 0]) == 0.0


@pytest.mark.parametrize(
    "p,q,msg",
    [
        ([0, 0], [1, 1], "positive sum"),
        ([-1, 2], [1, 1], "non-negative"),
        ([1, 1], [1, 1, 1], "one length"),
    ],
)
def test_jsd_rejects_bad_vectors(p, q, msg):
    with pytest.raises(InvalidParameterError, match=msg):
        jsd(p, q)


# --- bins --------------------------------------------------------------------------------------


def test_paper_bins_follow_np_histogram_exactly():
    spec = HistogramSpec.arange(0.0, 2101.45, 1000)
    assert spec.edges.size == 1000 and spec.n_bins == 999  # np.arange drops the end point
    rng = np.random.default_rng(2)
    values = np.concatenate([rng.uniform(-5, 2200, 5000), spec.edges, [spec.edges[-1] + 1e-9]])
    counts, dropped = histogram(values, spec)
    oracle = np.histogram(values, spec.edges)[0]
    np.testing.assert_array_equal(counts, oracle)
    assert dropped == values.size - oracle.sum()


def test_overflow_bins_keep_everything():
    spec = HistogramSpec.uniform(0.25, 4)  # [0,.25) [.25,.5) [.5,.75) [.75,1) [1,inf)
    counts, dropped = histogram(np.array([0.0, 0.25, 0.2499, 0.99, 1.0, 1e9]), spec)
    assert counts.tolist() == [2, 1, 0, 1, 2] and dropped == 0
    with pytest.raises(InvalidParameterError, match="non-negative"):
        bucket_index(np.array([-1.0]), spec)


def test_paper_dailyloc_and_duration_bin_quirks():
    b = metric_bins("paper")
    # DailyLoc k/48: 46 and 47 share the last bin, 48 (= 1.0) is dropped.
    idx = bucket_index(np.arange(49) / 48, b.dailyloc)
    assert idx[45] == 45 and idx[46] == idx[47] == 46 and idx[48] == -1
    # Duration: 47 and 48 share the last bin.
    idx = bucket_index(np.arange(1, 49), b.duration)
    assert idx[45] == 45 and idx[46] == idx[47] == 46
    g = metric_bins("geo")
    assert bucket_index(np.arange(1, 49), g.duration).tolist() == list(range(48))


# --- per-day statistics against loops and hand computations -------------------------------------


def test_row_mean48_is_bitwise_np_mean():
    x = np.random.default_rng(3).normal(size=(500, 48)) * 1e3 + 116.3
    np.testing.assert_array_equal(row_mean48(x), np.array([np.mean(r) for r in x]))


def test_haversine_matches_package():
    rng = np.random.default_rng(4)
    a = rng.uniform([-80, -180], [80, 180], (50, 2))
    b = rng.uniform([-80, -180], [80, 180], (50, 2))
    ours = haversine_km(a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    ref = [haversine(tuple(p), tuple(q), unit=Unit.KILOMETERS) for p, q in zip(a, b, strict=True)]
    np.testing.assert_allclose(ours, ref, rtol=1e-12)


def test_counts_and_runs_match_loop_oracles():
    days = np.random.default_rng(5).integers(0, 4, size=(200, 48))
    counts = location_counts(days)
    runs = np.zeros(49, dtype=int)
    for i, d in enumerate(days):
        top = sorted(Counter(d.tolist()).values(), reverse=True)
        assert counts[i].tolist() == top + [0] * (48 - len(top))
        n = 1
        for t in range(1, 48):
            if d[t] == d[t - 1]:
                n += 1
            else:
                runs[n] += 1
                n = 1
        runs[n] += 1
    np.testing.assert_array_equal(run_length_counts(days), runs)


def test_hand_computed_day():
    d = day((0, 5), (1, 1), (0, 42))[None, :]
    lat, lon = COORDS[d, 0], COORDS[d, 1]
    steps = paper_step_distances(lat, lon)[0]
    assert sorted(steps.tolist()) == [0.0] * 45 + [25.0, 25.0]
    # centroid = (3/48, 4/48); mean squared distance = 25 * (1/48) * (47/48)
    assert paper_radius(lat, lon)[0] == pytest.approx(25 * 47 / 48**2, rel=1e-14)
    s = summarize_days(d, COORDS, metric_bins("geo"))
    assert s.run_lengths[[1, 5, 42]].tolist() == [1, 1, 1] and s.run_lengths.sum() == 3
    assert s.distinct_days[2] == 1 and s.visits.tolist() == [47, 1, 0, 0]
    assert s.rank_slots[:3].tolist() == [47, 1, 0]


def test_geo_distance_and_radius_of_gyration_by_hand():
    d = day((0, 24), (2, 24))[None, :]  # half a day at (0,0), half at (0,1)
    s = summarize_days(d, COORDS, metric_bins("geo"))
    one_degree = 6371.0088 * math.pi / 180  # 111.195 km, lands in the overflow bin
    assert s.distance[0] == 46 and s.distance[-1] == 1
    # radius of gyration: every slot is 0.5 degree from the centroid (0, 0.5): 55.6 km
    assert s.radius.nonzero()[0].tolist() == [int(one_degree / 2 // 0.25)]


# --- jsd_metrics end to end: properties and the quirks -------------------------------------------


def test_identical_days_give_zero_and_disjoint_give_ln2():
    days = np.random.default_rng(6).integers(0, 4, size=(30, 48))
    for mode in ("paper", "geo"):
        assert all(v == 0.0 for v in jsd_metrics(days, days.copy(), COORDS, mode).values())
    stay0, stay1 = np.zeros((3, 48), int), np.ones((3, 48), int)
    alt = np.tile([0, 1], 24)[None, :]
    m = jsd_metrics(stay0, alt, COORDS, "geo")
    assert m["duration"] == pytest.approx(LN2) and m["dailyloc"] == pytest.approx(LN2)
    assert m["irank"] == pytest.approx(js2([48] + [0] * 19, [24, 24] + [0] * 18))
    assert jsd_metrics(stay0, stay1, COORDS, "geo")["grank"] == 0.0  # same probabilities


def test_paper_distance_squares_degrees_and_keeps_stays():
    real = np.zeros((1, 48), int)
    gen = day((0, 47), (1, 1))[None, :]  # one jump of 25 deg^2 = bin 11 of width 2.10145
    m = jsd_metrics(real, gen, COORDS, "paper")
    assert m["distance"] == pytest.approx(js2([47, 0], [46, 1]), abs=1e-12)
    assert m["radius"] == 0.0  # 0 vs 25 * 47 / 48^2 = 0.51 deg^2: both in bin 0


def test_paper_drops_far_jumps_geo_keeps_them():
    real = day((0, 47), (1, 1))[None, :]
    far = np.tile([0, 3], 24)[None, :]  # 47 jumps of 5000 deg^2, past 2101.45: all dropped
    gen = np.vstack([real, far])
    assert jsd_metrics(real, gen, COORDS, "paper")["distance"] == pytest.approx(0.0, abs=1e-15)
    assert jsd_metrics(real, gen, COORDS, "geo")["distance"] > 0.01


def test_paper_merges_dailyloc_46_47_and_duration_47_48():
    locs = np.arange(48)
    coords = np.column_stack([np.zeros(48), locs * 1e-3])
    d46 = np.concatenate([locs[:46], [0, 0]])[None, :]
    d47 = np.concatenate([locs[:47], [0]])[None, :]
    assert len(set(d46[0])) == 46 and len(set(d47[0])) == 47
    assert jsd_metrics(d46, d47, coords, "paper")["dailyloc"] == 0.0
    assert jsd_metrics(d46, d47, coords, "geo")["dailyloc"] == pytest.approx(LN2)
    stay, split = np.zeros((1, 48), int), day((0, 47), (1, 1))[None, :]
    expected_paper = js2([0, 1], [1, 1])  # {48} vs {47, 1}: 47 and 48 share a bin
    assert jsd_metrics(stay, split, coords, "paper")["duration"] == pytest.approx(expected_paper)
    assert jsd_metrics(stay, split, coords, "geo")["duration"] == pytest.approx(LN2)


def test_paper_empty_histogram_is_an_error_naming_the_metric():
    coords = np.column_stack([np.zeros(48), np.arange(48) * 1e-3])
    all_distinct = np.arange(48)[None, :]  # DailyLoc 48/48 = 1.0 is dropped in paper mode
    with pytest.raises(InputDataError, match="paper-mode dailyloc histogram of the generated"):
        jsd_metrics(np.zeros((1, 48), int), all_distinct, coords, "paper")
    assert jsd_metrics(np.zeros((1, 48), int), all_distinct, coords, "geo")["dailyloc"] > 0


def test_grank_uses_each_sides_own_top_probabilities():
    rng = np.random.default_rng(7)
    coords = rng.uniform(0, 1, (100, 2))
    real = rng.integers(0, 100, (40, 48))
    relabelled = (real + 37) % 100  # same probabilities on other locations
    assert jsd_metrics(real, relabelled, coords, "paper")["grank"] == 0.0


@pytest.mark.parametrize(
    "kwargs,err,msg",
    [
        (dict(mode="km"), InvalidParameterError, "mode must be one of"),
        (dict(gen=np.zeros((2, 47), int)), InvalidTrajectoryError, r"shape \(n >= 1, 48\)"),
        (dict(gen=np.full((2, 48), 4)), InvalidTrajectoryError, r"ids must lie in \[0, 3\]"),
        (dict(gen=np.zeros((2, 48))), InvalidTrajectoryError, "integer location ids"),
        (dict(coords=COORDS[:, :1]), InvalidTrajectoryError, "coords must have shape"),
        (dict(coords=COORDS * 10, mode="geo"), InvalidTrajectoryError, r"\|lat\| <= 90"),
        (dict(max_distance=0.0), InvalidParameterError, "max_distance must be > 0"),
    ],
)
def test_input_errors_say_why(kwargs, err, msg):
    args = dict(real=np.zeros((2, 48), int), gen=np.ones((2, 48), int), coords=COORDS, mode="paper")
    extra = {"max_distance": kwargs.pop("max_distance")} if "max_distance" in kwargs else {}
    args.update(kwargs)
    with pytest.raises(err, match=msg):
        jsd_metrics(args["real"], args["gen"], args["coords"], args["mode"], **extra)


def test_geo_grank_tells_apart_visit_shapes_on_a_large_map():
    """Telecom scale: 3,000 locations, the top-50 visit probabilities are all below 0.02.
    Days that share their visits evenly over 3,000 locations against days concentrated on 60
    give the same 0.02-wide histogram (all in the first bin: JSD 0, the old geo bins); the log
    bins separate them."""
    coords = np.column_stack([np.linspace(31.0, 31.3, 3000), np.full(3000, 121.4)])
    spread = np.arange(3000 * 48).reshape(-1, 48) % 3000  # every location equally often
    conc = np.random.default_rng(0).integers(0, 60, size=(63, 48))  # about 0.017 each
    assert jsd_metrics(spread, conc, coords, "geo")["grank"] > 0.5
    assert jsd_metrics(spread, spread[::-1].copy(), coords, "geo")["grank"] == 0.0

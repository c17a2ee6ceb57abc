"""`udfs.geo`: the one numpy haversine against the `haversine` package and the hand-written
copies it replaced (locmap, datagen stats, mobility_stats, the home attack)."""

from __future__ import annotations

import numpy as np
from haversine import Unit, haversine, haversine_vector

from udfs.geo import EARTH_RADIUS_KM, haversine_km


def _points(n, seed):
    rng = np.random.default_rng(seed)
    return rng.uniform([-89.9, -180], [89.9, 180], (n, 2)), rng.uniform([-89.9, -180],
                                                                         [89.9, 180], (n, 2))


def _replaced(lat1, lon1, lat2, lon2):
    """The formula the call sites had (radius 6371.0088, clip to [0, 1])."""
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dlat, dlon = p2 - p1, np.radians(lon2) - np.radians(lon1)
    a = np.sin(dlat / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dlon / 2) ** 2
    return 2 * 6371.0088 * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))


def test_radius_is_the_packages():
    assert EARTH_RADIUS_KM == 6371.0088
    assert haversine((0.0, 0.0), (0.0, 1.0), unit=Unit.RADIANS) * EARTH_RADIUS_KM == \
        haversine((0.0, 0.0), (0.0, 1.0))


def test_equals_haversine_vector_bit_for_bit():
    a, b = _points(20_000, 0)
    ours = haversine_km(a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    np.testing.assert_array_equal(ours, haversine_vector(a, b, Unit.KILOMETERS))


def test_equals_the_replaced_copies():
    a, b = _points(20_000, 1)
    ours = haversine_km(a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    old = _replaced(a[:, 0], a[:, 1], b[:, 0], b[:, 1])
    np.testing.assert_allclose(ours, old, rtol=1e-9, atol=0)
    assert np.array_equal(ours, old)  # in fact identical: the operations are the same


def test_broadcasts_to_a_pairwise_matrix():
    a, b = _points(30, 2)
    d = haversine_km(a[:, :1], a[:, 1:], b[None, :, 0], b[None, :, 1])
    assert d.shape == (30, 30)
    np.testing.assert_array_equal(d, haversine_vector(b, a, Unit.KILOMETERS, comb=True))


def test_scalars_lists_and_edge_cases():
    assert float(haversine_km(41.0, -87.0, 41.0, -87.0)) == 0.0
    assert haversine_km([0.0], [0.0], [0.0], [1.0])[0] == haversine((0, 0), (0, 1))
    d = haversine_km(0.0, 0.0, 0.0, 180.0)  # antipodal: finite, half the circumference
    assert np.isfinite(d) and abs(d - np.pi * EARTH_RADIUS_KM) < 1e-6
    assert haversine_km(np.float32(10.5), 0, 10.5, 1).dtype == np.float64

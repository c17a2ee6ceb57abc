"""LocationSpace: distances, absolute compass sectors, pickling, validation."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from haversine import haversine

from udfs.errors import InvalidParameterError, InvalidTrajectoryError
from udfs.space import LocationSpace


def test_distances_and_diameter_match_haversine(grid_space):
    a, b = grid_space.coords[3], grid_space.coords[31]
    assert grid_space.dist[3, 31] == pytest.approx(haversine(tuple(a), tuple(b)), rel=1e-6)
    assert grid_space.diameter == pytest.approx(grid_space.dist.max())


def test_distances_from_coordinates_are_the_stored_float32_numbers(grid_space):
    """`distances_from_coords` (what Spark tasks use, holding P's coordinates only) gives
    exactly `dist[a, b]` for every pair, both orders: the real Telecom station file when
    ../shared/data has it (3,042 stations, 9.3 M pairs), else a generated layout."""
    from pathlib import Path

    from udfs.space import distances_from_coords

    stations = Path(__file__).resolve().parents[3] / "shared" / "data" / "shanghai_telecom" / \
        "base_stations.csv"
    if stations.exists():
        import pandas as pd

        df = pd.read_csv(stations)
        sp = LocationSpace.from_latlon(df.latitude, df.longitude)
    else:
        rng = np.random.default_rng(3)
        sp = LocationSpace.from_latlon(30 + rng.random(1500) * 2, 120 + rng.random(1500) * 2)
    for space in (grid_space, sp):
        a, b = np.meshgrid(np.arange(space.n), np.arange(space.n), indexing="ij")
        assert np.array_equal(distances_from_coords(space.coords, a, b), space.dist[a, b])
        assert np.array_equal(distances_from_coords(space.coords, b, a), space.dist[a, b])


def test_sectors_are_absolute_compass_sectors():
    # centre, then north, east, south, west of it
    sp = LocationSpace.from_latlon([0, 1, 0, -1, 0], [0, 0, 1, 0, -1])
    assert sp.sectors(4)[0, 1:].tolist() == [0, 1, 2, 3]  # [0,90) N .. [270,360) W
    assert sp.sectors(2)[0, 1:].tolist() == [0, 0, 1, 1]
    assert sp.sectors(12)[0, 1:].tolist() == [0, 3, 6, 9]
    # absolute: seen from the north point, the centre is south (sector 2 of 4) whatever the
    # direction of travel
    assert sp.sectors(4)[1, 0] == 2
    assert all(sp.sectors(g)[i, i] == 0 for g in (2, 4, 6, 12) for i in range(5))


def test_bad_granularity_rejected(grid_space):
    with pytest.raises(InvalidParameterError, match="granularity"):
        grid_space.sectors(3)


def test_pickle_roundtrip(grid_space):
    grid_space.sectors(6)
    sp = pickle.loads(pickle.dumps(grid_space))
    assert np.array_equal(sp.dist, grid_space.dist) and sp.diameter == grid_space.diameter
    assert np.array_equal(sp.sectors(6), grid_space.sectors(6))


@pytest.mark.parametrize(
    "lat, lon, msg",
    [([], [], "empty"), ([1.0, np.nan], [2.0, 3.0], "NaN"), ([1.0], [1.0, 2.0], "latitudes"),
     ([95.0], [0.0], "outside")],
)
def test_bad_location_sets(lat, lon, msg):
    with pytest.raises(InvalidTrajectoryError, match=msg):
        LocationSpace.from_latlon(lat, lon)


def test_single_point_space():
    sp = LocationSpace.from_latlon([41.0], [-87.0])
    assert sp.diameter == 0.0 and sp.n == 1

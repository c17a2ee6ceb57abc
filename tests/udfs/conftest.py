"""Small location sets shared by the udfs tests."""

from __future__ import annotations

import numpy as np
import pytest

from udfs.space import LocationSpace


@pytest.fixture(scope="session")
def grid_space() -> LocationSpace:
    """A 6 x 6 grid of 0.01-degree cells near Chicago (36 locations)."""
    lat, lon = np.meshgrid(41.85 + 0.01 * np.arange(6), -87.65 + 0.01 * np.arange(6))
    return LocationSpace.from_latlon(lat.ravel(), lon.ravel())


@pytest.fixture(scope="session")
def lopsided_space() -> LocationSpace:
    """8 points: one far west (id 0), seven clustered east: makes the EM nearly tight."""
    lat = np.array([0.0, 0.0, 0.01, -0.01, 0.005, -0.005, 0.0, 0.01])
    lon = np.array([0.0, 1.0, 1.0, 1.0, 1.01, 1.01, 1.02, 1.02])
    return LocationSpace.from_latlon(lat, lon)

"""Great-circle distance on numpy arrays, and the Earth radius: the one home of both.

What it holds:
- `EARTH_RADIUS_KM`: the mean Earth radius (IUGG, 6371.0088 km), read from the `haversine`
  package (a dependency), so no module writes the number down again; km <-> radians for
  BallTree(metric="haversine") and km per degree are `EARTH_RADIUS_KM` times the angle;
- `haversine_km(lat1, lon1, lat2, lon2)`: haversine distance in km between points in degrees,
  vectorised with numpy broadcasting (pairs of equal shapes, or an (n, 1) column against a
  (1, m) row for all pairs), float64.

Why one home: ingest (locmap), datagen (stats, stations), the mobility statistics, the
mechanisms and the home attack all measure distance; a radius or a clip of their own would make
stages disagree on what "1 km" is. No Spark
SQL expression of it exists: Spark stages compute distances in their Python tasks with this
function (`udfs.space.distances_from_coords` for the float32 numbers of `LocationSpace.dist`).

The formula is the `haversine` package's kernel, operation for operation, with `a` capped at 1
(rounding can push it past 1 for antipodal points, which the package turns into NaN):
    d = R * 2 asin(sqrt(min(1, sin^2(dphi / 2) + cos(phi1) cos(phi2) sin^2(dlambda / 2)))),
    phi = radians(lat), dphi = radians(lat2) - radians(lat1), dlambda likewise.
On points in range the result equals `haversine.haversine_vector(..., comb=False)` bit for bit
(tests/udfs/test_geo.py). Why not call `haversine_vector` itself: it takes (n, 2) arrays of equal
shape only (no broadcasting, so an n x m pairwise matrix would first need four n x m copies),
and stacks and range-checks its input, which costs time without changing a number.
"""

from __future__ import annotations

import math

import numpy as np
from haversine import Unit
from haversine.haversine import get_avg_earth_radius

#: Mean Earth radius in km, as used by the `haversine` package (6371.0088).
EARTH_RADIUS_KM = get_avg_earth_radius(Unit.KILOMETERS)
#: km per degree of latitude (and of longitude at the equator) on that sphere.
KM_PER_DEGREE = math.pi * EARTH_RADIUS_KM / 180.0


def haversine_km(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Haversine distance in km between (lat1, lon1) and (lat2, lon2), degrees, broadcasting.

    Inputs are array-likes (or scalars) converted to float64; the output has their broadcast
    shape (a 0-d array for four scalars).
    """
    la1, lo1, la2, lo2 = (np.asarray(x, dtype=np.float64) for x in (lat1, lon1, lat2, lon2))
    p1, p2 = np.radians(la1), np.radians(la2)
    sp = np.sin((p2 - p1) * 0.5)
    sl = np.sin((np.radians(lo2) - np.radians(lo1)) * 0.5)
    a = sp * sp + np.cos(p1) * np.cos(p2) * (sl * sl)
    return EARTH_RADIUS_KM * (2.0 * np.arcsin(np.sqrt(np.minimum(a, 1.0))))

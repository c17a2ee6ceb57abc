"""The public location set P: coordinates, haversine distances, compass sectors, lookup tables.

`LocationSpace` is built once per dataset (``LocationSpace.from_latlon``) and shipped to Spark
executors as a broadcast; every mechanism in `udfs` reads it and never mutates it (per-epsilon
tables are cached lazily in ``_cache``, which is dropped on pickling and rebuilt on demand).

Memory at |P| = n (n = 3,233 in brackets): distances float32 n^2 (42 MB), 12-sector index
int8 n^2 (10 MB), two row orders int16 n^2 (2 x 21 MB). Coarser sector matrices (g = 2, 4, 6) are
derived from the 12-sector matrix by integer division (360/g is a multiple of 30 degrees, so
``floor(b / (360/g)) == floor(b / 30) // (12/g)`` exactly) and cached on first request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from haversine import Unit, haversine_vector

from udfs.errors import InvalidTrajectoryError
from udfs.geo import haversine_km

GRANULARITIES = (2, 4, 6, 12)
_BLOCK = 512  # rows per block when building n x n matrices (bounds temporary memory)
_SORT_MIN = 4096  # nearest-location queries per call from which they are sorted first


def initial_bearing_deg(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Initial great-circle compass bearing from point 1 to point 2 in [0, 360) degrees.

    0 = north, 90 = east (clockwise). Inputs in degrees, broadcastable.
    """
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dl = np.radians(lon2) - np.radians(lon1)
    y = np.sin(dl) * np.cos(p2)
    x = np.cos(p1) * np.sin(p2) - np.sin(p1) * np.cos(p2) * np.cos(dl)
    b = np.degrees(np.arctan2(y, x)) % 360.0
    return np.where(b >= 360.0, 0.0, b)  # -tiny % 360 can round to 360.0


@dataclass(eq=False)
class LocationSpace:
    """Public location set P with every precomputed structure the mechanisms need.

    Attributes:
        coords: (n, 2) float64 latitude, longitude in degrees; row i is location id i.
        dist: (n, n) float32 haversine distances in km (Earth radius 6371.0088 km).
        diameter: Delta_u = max of ``dist`` (taken from the float32 matrix, so every utility
            difference the EM uses is at most Delta_u: rounding never weakens the guarantee).
        sector12: (n, n) int8, ``floor(bearing(p, q) / 30)``; the sector of p from itself is 0.
        order: (n, n) row p = location ids sorted by distance from p (ties by id).
        sector_order: (n, n) row p = location ids sorted by 12-sector seen from p (ties by id),
            so every sector of every granularity is a contiguous slice.
        sector_start: (n, 13) int32, start of 12-sector d of row p in ``sector_order``.
        row_max: (n,) float64, max distance from each p (Delta_R of ATP for anchor p).
    """

    coords: np.ndarray
    dist: np.ndarray
    diameter: float
    sector12: np.ndarray
    order: np.ndarray
    sector_order: np.ndarray
    sector_start: np.ndarray
    row_max: np.ndarray
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        """Number of locations |P|."""
        return int(self.coords.shape[0])

    def __len__(self) -> int:
        return self.n

    @classmethod
    def from_latlon(cls, lat, lon) -> LocationSpace:
        """Build P from latitude/longitude arrays in degrees (location id = array index).

        Raises InvalidTrajectoryError for an empty set, mismatched lengths, NaN/inf or
        out-of-range coordinates.
        """
        lat = np.asarray(lat, dtype=np.float64).ravel()
        lon = np.asarray(lon, dtype=np.float64).ravel()
        if lat.shape != lon.shape:
            raise InvalidTrajectoryError(
                f"location set: {lat.size} latitudes but {lon.size} longitudes; "
                "pass one latitude and one longitude per location"
            )
        if lat.size == 0:
            raise InvalidTrajectoryError(
                "location set is empty; pass at least one location (P must be non-empty)"
            )
        bad = ~(np.isfinite(lat) & np.isfinite(lon))
        if bad.any():
            raise InvalidTrajectoryError(
                f"location set has NaN/inf coordinates at ids {np.flatnonzero(bad)[:5].tolist()}; "
                "drop or repair those locations before building the space"
            )
        if (np.abs(lat) > 90).any() or (np.abs(lon) > 180).any():
            raise InvalidTrajectoryError(
                "location set has latitudes outside [-90, 90] or longitudes outside [-180, 180]; "
                "pass degrees as (lat, lon), not (lon, lat) or radians"
            )
        n = lat.size
        if n > np.iinfo(np.int32).max:
            raise InvalidTrajectoryError("location set too large for int32 ids; split it")
        coords = np.column_stack([lat, lon])
        idx_dtype = np.int16 if n <= np.iinfo(np.int16).max else np.int32
        dist = np.empty((n, n), dtype=np.float32)
        sector12 = np.empty((n, n), dtype=np.int8)
        order = np.empty((n, n), dtype=idx_dtype)
        sector_order = np.empty((n, n), dtype=idx_dtype)
        sector_start = np.empty((n, 13), dtype=np.int32)
        ids = np.arange(n)
        for s in range(0, n, _BLOCK):
            e = min(n, s + _BLOCK)
            block = haversine_vector(coords, coords[s:e], Unit.KILOMETERS, comb=True)
            block[ids[s:e] - s, ids[s:e]] = 0.0
            dist[s:e] = block
            bear = initial_bearing_deg(lat[s:e, None], lon[s:e, None], lat[None, :], lon[None, :])
            sec = np.minimum(np.floor(bear / 30.0), 11).astype(np.int8)
            sec[ids[s:e] - s, ids[s:e]] = 0  # sector of p seen from itself is 0
            sector12[s:e] = sec
            order[s:e] = np.argsort(dist[s:e], axis=1, kind="stable")
            sector_order[s:e] = np.argsort(sec, axis=1, kind="stable")
            counts = np.stack([(sec == d).sum(axis=1) for d in range(12)], axis=1)
            sector_start[s:e, 0] = 0
            sector_start[s:e, 1:] = np.cumsum(counts, axis=1)
        diameter = float(dist.max())
        row_max = dist.max(axis=1).astype(np.float64)
        return cls(coords, dist, diameter, sector12, order, sector_order, sector_start, row_max)

    # ------------------------------------------------------------------ derived, cached
    def sectors(self, g: int) -> np.ndarray:
        """(n, n) int8 sector index matrix for granularity g in {2, 4, 6, 12} (cached)."""
        if g not in GRANULARITIES:
            from udfs.errors import InvalidParameterError

            raise InvalidParameterError(
                f"granularity {g!r} is not one of {GRANULARITIES}; pick one of those or 'auto'"
            )
        if g == 12:
            return self.sector12
        key = ("sectors", g)
        if key not in self._cache:
            self._cache[key] = (self.sector12 // (12 // g)).astype(np.int8)
        return self._cache[key]

    def unit_vectors(self) -> np.ndarray:
        """(n, 3) unit vectors of P (cached): the KD-tree's points, the midpoints' inputs."""
        return self.cached("unit_vectors",
                           lambda: _unit_vectors(self.coords[:, 0], self.coords[:, 1]))

    def nearest(self, lat, lon) -> np.ndarray:
        """Nearest location id of P to each (lat, lon) by great-circle distance (chord KD-tree)."""
        return self.nearest_unit(_unit_vectors(np.asarray(lat), np.asarray(lon)))

    def nearest_unit(self, xyz) -> np.ndarray:
        """Nearest location id of P to each unit vector (..., 3) (a chord KD-tree over P)."""
        from scipy.spatial import cKDTree

        tree = self.cached("kdtree", lambda: cKDTree(self.unit_vectors()))
        xyz = np.asarray(xyz, dtype=np.float64)
        flat = xyz.reshape(-1, 3)
        if flat.shape[0] < _SORT_MIN:
            _, idx = tree.query(flat)
            return np.asarray(idx, dtype=np.int64).reshape(xyz.shape[:-1])
        # the tree answers each query on its own, so their order is free: queries in grid-cell
        # order walk the same nodes one after another (about a quarter faster at |P| = 3,042)
        order = np.argsort(self._grid_key(flat), kind="stable")  # uint16 keys: a radix sort
        idx = np.empty(flat.shape[0], np.int64)
        idx[order] = tree.query(np.take(flat, order, axis=0))[1]
        return idx.reshape(xyz.shape[:-1])

    def _grid_key(self, xyz: np.ndarray) -> np.ndarray:
        """uint16 cell of each unit vector in a 256 x 256 grid over the two axes along which P
        spreads most, between P's 1% and 99% quantiles (outside: the border cells)."""

        def build():
            unit = self.unit_vectors()
            lo, hi = np.quantile(unit, [0.01, 0.99], axis=0)
            axes = np.argsort(hi - lo)[::-1][:2]
            return axes, lo[axes], 255.0 / np.maximum(hi[axes] - lo[axes], 1e-300)

        axes, lo, scale = self.cached("grid_key", build)
        with np.errstate(invalid="ignore"):  # a NaN query gets some cell: order only
            cell = [np.clip((xyz[:, a] - lo[i]) * scale[i], 0, 255).astype(np.uint16)
                    for i, a in enumerate(axes)]
        return (cell[0] << np.uint16(8)) | cell[1]

    def cached(self, key, build):
        """Return ``self._cache[key]``, building it with ``build()`` on first use."""
        val = self._cache.get(key)
        if val is None:
            val = build()
            self._cache[key] = val
        return val

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_cache"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def pair_dist(self, a, b) -> np.ndarray:
        """float32 D[a, b] (broadcast shapes) by one take from the flat matrix: the same values
        as ``dist[a, b]``, about 3x faster than 2-D fancy indexing on a hot path."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        return np.take(self.dist.reshape(-1), a * self.n + b)

    def distance_km(self, a, b) -> np.ndarray:
        """Haversine km between location ids a and b (float64 of the stored float32)."""
        return self.dist[np.asarray(a), np.asarray(b)].astype(np.float64)


def distances_from_coords(coords: np.ndarray, a, b) -> np.ndarray:
    """``dist[a, b]`` (float64 of the float32) of the space built from `coords`, from the
    coordinates alone: for processes that hold P's (lat, lon) rows but not its n x n matrices
    (the utility counts on Spark workers). The same numbers: `udfs.geo.haversine_km` is the
    haversine package's kernel operation for operation, symmetric, and 0 from a point to itself
    (tests/udfs/test_space.py compares every pair of a real station file)."""
    a, b = np.asarray(a), np.asarray(b)
    km = haversine_km(coords[a, 0], coords[a, 1], coords[b, 0], coords[b, 1])
    return km.astype(np.float32).astype(np.float64)


def _unit_vectors(lat, lon) -> np.ndarray:
    la, lo = np.radians(lat), np.radians(lon)
    return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=-1)


def row_count_le(space: LocationSpace, rows: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """For each i, #{q : dist[rows[i], q] <= radius[i]} by binary search over ``order`` rows."""
    rows = np.asarray(rows, dtype=np.int64)
    radius = np.asarray(radius, dtype=np.float64)
    if rows.size * space.n <= (1 << 16):  # small batch: one comparison pass beats the search
        return np.count_nonzero(space.dist[rows] <= radius[:, None], axis=1).astype(np.int64)
    flat_d, flat_o, base = space.dist.reshape(-1), space.order.reshape(-1), rows * space.n
    lo = np.zeros(rows.shape, dtype=np.int64)  # invariant: answer in [lo, hi]
    hi = np.full(rows.shape, space.n, dtype=np.int64)
    for _ in range(max(1, math.ceil(math.log2(space.n + 1)) + 1)):
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        midc = np.minimum(mid, space.n - 1)
        d = np.take(flat_d, base + np.take(flat_o, base + midc))  # dist[r, order[r, mid]]
        le = d <= radius
        lo = np.where(active & le, mid + 1, lo)
        hi = np.where(active & ~le, mid, hi)
    return lo

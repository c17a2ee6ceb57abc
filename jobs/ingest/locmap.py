"""Map points to the public location set P: the given id, else the nearest location. No pyspark.

Two kinds of location set:
- `LocationSet`: explicit points (base stations, POIs, the Geolife `gps` cells). A record's
  given id is used when P knows it; otherwise the record goes to the nearest location by
  haversine distance (BallTree, `udfs.geo`'s Earth radius) if that is within `max_distance_km`.
- `Grid`: square cells of `cell_deg` degrees (0.01 as in the Geolife preprocessing) for sources
  without a location set (PLT). Without a bounding box, cell ids are global
  (row * 36000 + col for 0.01 degrees) so they never depend on the data; with a box they count
  from the box's corner and points outside it are too far. `km_grid` (`ingest.grid_km`):
  cells of about `km` x `km` km over a configured box, for any source without a location set;
  every point inside the box maps to its cell (no distance limit), one outside is too far.

Row shape: parsed frame in -> the same rows plus `loc_id` (int64, -1 where rejected).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.ingest.readers.common import Reason, normalise_name
from udfs.errors import InputDataError
from udfs.geo import EARTH_RADIUS_KM, KM_PER_DEGREE, haversine_km

_ID_NAMES = {
    normalise_name(n)
    for n in (
        "loc_id",
        "location id",
        "id",
        "station_id",
        "station",
        "loc",
        "locationid",
        "venue_id",
        "spot_id",
    )
}
_LAT_NAMES = {"lat", "latitude"}
_LON_NAMES = {"lon", "lng", "long", "longitude"}


def canonical_ids(values: pd.Series) -> pd.Series:
    """Id text compared canonically: stripped, and '12.0' == '12' for integer-valued ids."""
    text = values.astype("string").str.strip()
    num = pd.to_numeric(text, errors="coerce")
    whole = num.notna() & np.isfinite(num.fillna(0)) & (num.fillna(0) % 1 == 0)
    out = text.astype(object)
    out[whole.to_numpy()] = num[whole].astype(np.int64).astype(str).to_numpy()
    return out.where(text.notna() & (text != ""), None)


@dataclass(frozen=True, eq=False)
class LocationSet:
    """The public location set P: integer ids, coordinates, and the source's own id text."""

    loc_id: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    names: np.ndarray  # canonical id text as written in the source's records

    def __post_init__(self) -> None:
        n = len(self.loc_id)
        if n == 0:
            raise InputDataError("the location set is empty: give at least one location")
        if not (len(self.lat) == len(self.lon) == len(self.names) == n):
            raise InputDataError("location set columns differ in length")
        if len(np.unique(self.loc_id)) != n:
            raise InputDataError("the location set has duplicate location ids")

    def __len__(self) -> int:
        return len(self.loc_id)

    @cached_property
    def _tree(self):
        from sklearn.neighbors import BallTree

        return BallTree(np.radians(np.column_stack([self.lat, self.lon])), metric="haversine")

    @cached_property
    def _by_name(self) -> dict[str, int]:
        return dict(zip(self.names.tolist(), self.loc_id.tolist(), strict=True))

    @cached_property
    def _integer_named(self) -> bool:
        return bool(np.array_equal(self.names.astype(str), self.loc_id.astype(str)))

    def lookup(self, given: pd.Series) -> np.ndarray:
        """Location ids for given id text (-1 where missing or unknown)."""
        if len(given) == 0:
            return np.zeros(0, dtype=np.int64)
        if self._integer_named:  # fast path: numeric ids, binary search in the sorted ids
            value = pd.to_numeric(given, errors="coerce").to_numpy(dtype=np.float64)
            order = np.argsort(self.loc_id)
            ids = self.loc_id[order]
            whole = np.isfinite(value) & (np.mod(value, 1) == 0)
            cand = np.where(whole, value, ids[0]).astype(np.int64)
            pos = np.clip(np.searchsorted(ids, cand), 0, len(ids) - 1)
            return np.where(whole & (ids[pos] == cand), ids[pos], -1)
        mapped = canonical_ids(given).map(self._by_name)
        return mapped.fillna(-1).to_numpy(dtype=np.int64)

    def nearest(self, lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(loc_id, distance_km) of the nearest location to each point."""
        if len(lat) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        dist, idx = self._tree.query(np.radians(np.column_stack([lat, lon])), k=1)
        return self.loc_id[idx[:, 0]], dist[:, 0] * EARTH_RADIUS_KM

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({"loc_id": self.loc_id, "lat": self.lat, "lon": self.lon})

    def diameter_km(self) -> float:
        """Max pairwise distance (exact for small sets, used in figures and checks)."""
        if len(self) > 5000:
            raise ValueError("diameter_km is meant for small location sets")
        d = haversine_km(self.lat[:, None], self.lon[:, None], self.lat[None, :], self.lon[None, :])
        return float(d.max())


@dataclass(frozen=True)
class Grid:
    """Square cells of `cell_deg` degrees; optional box (lat_min, lat_max, lon_min, lon_max).

    `km` (a `km_grid`): cells `cell_deg` high and `lon_deg` wide, about `km` km on each side
    at the box's middle latitude."""

    cell_deg: float = 0.01
    bbox: tuple[float, float, float, float] | None = None
    km: float | None = None

    @property
    def lon_deg(self) -> float:
        if self.km is None or self.bbox is None:
            return self.cell_deg
        mid = math.radians((self.bbox[0] + self.bbox[1]) / 2)
        return self.km / (KM_PER_DEGREE * max(math.cos(mid), 1e-6))

    @property
    def _origin(self) -> tuple[float, float]:
        return (-90.0, -180.0) if self.bbox is None else (self.bbox[0], self.bbox[2])

    @property
    def shape(self) -> tuple[int, int]:
        def cells(span: float) -> int:  # 1.2 / 0.01 is 120.00000000000001 in floating point
            return math.ceil(span / self.cell_deg - 1e-9)

        if self.bbox is None:
            return cells(180.0), cells(360.0)
        lat0, lat1, lon0, lon1 = self.bbox
        return cells(lat1 - lat0), math.ceil((lon1 - lon0) / self.lon_deg - 1e-9)

    def assign(self, lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(loc_id, distance_km to the cell centre); -1 and inf outside the box."""
        rows, cols = self.shape
        lat0, lon0 = self._origin
        with np.errstate(invalid="ignore"):
            r = np.floor((np.asarray(lat) - lat0) / self.cell_deg)
            c = np.floor((np.asarray(lon) - lon0) / self.lon_deg)
            inside = np.isfinite(r) & np.isfinite(c) & (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
        ids = np.where(inside, np.where(inside, r, 0) * cols + np.where(inside, c, 0), -1)
        ids = ids.astype(np.int64)
        clat, clon = self.centres(np.where(inside, ids, 0))
        dist = np.where(inside, haversine_km(lat, lon, clat, clon), np.inf)
        return ids, dist

    def centres(self, loc_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _, cols = self.shape
        lat0, lon0 = self._origin
        loc_id = np.asarray(loc_id, dtype=np.int64)
        return (
            lat0 + (loc_id // cols + 0.5) * self.cell_deg,
            lon0 + (loc_id % cols + 0.5) * self.lon_deg,
        )

    def frame(self, loc_id: np.ndarray | None = None) -> pd.DataFrame:
        """The cells `loc_id` (default: every cell of the box) with their centres."""
        if loc_id is None:
            if self.bbox is None:
                raise ValueError("a grid without a box has no finite cell list; pass loc_id")
            rows, cols = self.shape
            loc_id = np.arange(rows * cols, dtype=np.int64)
        loc_id = np.unique(np.asarray(loc_id, dtype=np.int64))
        lat, lon = self.centres(loc_id)
        return pd.DataFrame({"loc_id": loc_id, "lat": lat, "lon": lon})


MAX_GRID_CELLS = 4_000_000  # a grid_km grid publishes every cell of its box


def km_grid(km: float, bbox: tuple[float, float, float, float] | None) -> Grid:
    """`ingest.grid_km`: cells of about km x km over the configured box `ingest.grid_bbox`.

    The box must be configured, not taken from the data: a box spanning the records would
    publish their extreme coordinates (the northernmost record's latitude is one user's
    point), and the published cell list would change with who is in the data. With a public
    box the location set is a function of the config alone."""
    if bbox is None:
        raise InputDataError(
            "ingest.grid_km needs ingest.grid_bbox [lat_min, lat_max, lon_min, lon_max]: a "
            "public box (a city's, a region's); a box taken from the data would publish its "
            "extreme points")
    grid = Grid(km / KM_PER_DEGREE, tuple(bbox), km)
    rows, cols = grid.shape
    if rows * cols > MAX_GRID_CELLS:
        raise InputDataError(
            f"ingest.grid_km {km:g} over the box {list(bbox)} makes {rows * cols:,} cells, more "
            f"than {MAX_GRID_CELLS:,}: raise grid_km or shrink grid_bbox")
    return grid


def location_figures(locations: Locations | None) -> dict:
    """What a run's figures say about its location set (settings, all public)."""
    if isinstance(locations, Grid):
        rows, cols = locations.shape
        out = {"location_set": "grid_km" if locations.km is not None else "grid_deg",
               "grid_bbox": list(locations.bbox) if locations.bbox is not None else None}
        if locations.km is not None:
            out.update(grid_km=locations.km, grid_cells=rows * cols)
        return out
    if isinstance(locations, LocationSet):
        return {"location_set": "file"}
    return {"location_set": "record ids"}


Locations = LocationSet | Grid


def map_points(parsed: pd.DataFrame, locations: Locations, max_distance_km: float) -> pd.DataFrame:
    """Add `loc_id` to a parsed frame; reject points too far from every location.

    Rows already rejected keep their reason and get loc_id -1. Returns a new frame.
    """
    out = parsed.copy()
    reason = out["reason"].to_numpy(dtype=object).copy()
    todo = pd.isna(reason)
    loc = np.full(len(out), -1, dtype=np.int64)
    lat = out["lat"].to_numpy()
    lon = out["lon"].to_numpy()
    if isinstance(locations, Grid):
        ids, dist = locations.assign(lat[todo], lon[todo])
        ok = (ids >= 0) & ((dist <= max_distance_km) | (locations.km is not None))
        sub = np.where(ok, ids, -1)
        bad = np.where(~ok, Reason.TOO_FAR.value, None)
    else:
        given = out["given_loc"][todo]
        known = locations.lookup(given)
        ask = known < 0  # only records without a known id need the nearest location
        near = np.full(len(known), -1, dtype=np.int64)
        dist = np.full(len(known), np.inf)
        # a record without coordinates (a check-in array) is placed by its id alone
        ask &= np.isfinite(lat[todo]) & np.isfinite(lon[todo])
        near[ask], dist[ask] = locations.nearest(lat[todo][ask], lon[todo][ask])
        close = dist <= max_distance_km
        sub = np.where(known >= 0, known, np.where(close, near, -1))
        had_id = given.notna().to_numpy()
        bad = np.where(
            sub >= 0,
            None,
            np.where(had_id, Reason.UNKNOWN_LOCATION.value, Reason.TOO_FAR.value),
        ).astype(object)
        bad[sub >= 0] = None
    loc[todo] = sub
    reason[todo] = bad
    if isinstance(locations, LocationSet):
        _fill_coordinates(out, loc, locations)
    out["loc_id"] = loc
    out["reason"] = pd.Series(reason, index=out.index, dtype=object)
    return out


def _fill_coordinates(out: pd.DataFrame, loc: np.ndarray, locations: LocationSet) -> None:
    """Mapped records without coordinates take their location's (in place)."""
    lat, lon = out["lat"].to_numpy(), out["lon"].to_numpy()
    fill = (loc >= 0) & ~(np.isfinite(lat) & np.isfinite(lon))
    if not fill.any():
        return
    order = np.argsort(locations.loc_id)
    row = order[np.searchsorted(locations.loc_id, loc[fill], sorter=order)]
    out.loc[fill, "lat"] = locations.lat[row]
    out.loc[fill, "lon"] = locations.lon[row]


def derive_locations(parsed: pd.DataFrame) -> LocationSet:
    """P from the records themselves (check-ins without a locations file): one location per
    given id, at the mean coordinate of its valid records.

    Numbered 0..|P|-1 (in numeric id order when every id is an integer, else in first-seen
    order): the records' ids only name the locations they visit, and `trajpriv collect`
    indexes P by loc_id, so a derived set must be dense (Gowalla's ids run to 7 digits)."""
    ok = parsed["reason"].isna() & parsed["given_loc"].notna()
    rows = parsed.loc[ok, ["given_loc", "lat", "lon"]].copy()
    rows["name"] = canonical_ids(rows["given_loc"])
    agg = rows.groupby("name", sort=False)[["lat", "lon"]].mean().reset_index()
    named = _from_names(agg["name"], agg["lat"].to_numpy(), agg["lon"].to_numpy(), "records")
    return LocationSet(np.arange(len(named), dtype=np.int64), named.lat, named.lon, named.names)


def _from_names(names: pd.Series, lat: np.ndarray, lon: np.ndarray, what: str) -> LocationSet:
    names = canonical_ids(names.reset_index(drop=True))
    if names.isna().any():
        raise InputDataError(f"{what}: a location has an empty id")
    numeric = pd.to_numeric(names, errors="coerce")
    if numeric.notna().all() and (numeric.abs() < 2**31).all():
        order = np.argsort(numeric.to_numpy(), kind="stable")
        ids = numeric.to_numpy(dtype=np.int64)[order]
        return LocationSet(ids, lat[order], lon[order], names.to_numpy(dtype=object)[order])
    return LocationSet(
        np.arange(len(names), dtype=np.int64), lat, lon, names.to_numpy(dtype=object)
    )


def load_locations(path: Path | str, fmt: str = "auto") -> LocationSet:
    """Read P from a CSV with a header (id, lat, lon columns found by name; ids that are not
    integers are numbered in file order), a `gps` file (`lat lon` per line, id = line index)
    or an `.npy` array of rows `[id, lat, lon]` (`npy`, the Foursquare NYC POI file)."""
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"location file {path} does not exist")
    if fmt == "npy" or (fmt == "auto" and path.name.lower().endswith(".npy")):
        return _npy_locations(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputDataError(f"location file {path}: not UTF-8 ({exc})") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise InputDataError(f"location file {path} is empty: the location set needs a location")
    if fmt == "auto":
        fmt = "csv" if "," in lines[0] else "gps"
    return _gps_locations(path, lines) if fmt == "gps" else _csv_locations(path)


def _gps_locations(path: Path, lines: list[str]) -> LocationSet:
    """A `gps` file: `lat lon` per line, id = line index."""
    rows = [ln.split() for ln in lines]
    for number, row in enumerate(rows, 1):
        if len(row) != 2:
            raise InputDataError(f"location file {path} line {number}: expected 'lat lon'")
    values = pd.to_numeric(pd.Series([v for row in rows for v in row]), errors="coerce")
    coords = values.to_numpy(dtype=np.float64).reshape(-1, 2)
    names = pd.Series(np.arange(len(coords)).astype(str))
    _check_coords(coords[:, 0], coords[:, 1], path, first_line=1)
    return LocationSet(
        np.arange(len(coords), dtype=np.int64),
        coords[:, 0],
        coords[:, 1],
        names.to_numpy(dtype=object),
    )


# header names of a location id, most specific first (compared by `normalise_name`)
_ID_NAMES = ("locid", "locationid", "id", "stationid", "station", "loc", "venueid", "spotid")


def _csv_locations(path: Path) -> LocationSet:
    """A CSV with a header: id, lat, lon columns found by name; ids that are not integers are
    numbered in file order."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    cols = {normalise_name(c): c for c in frame.columns}
    lat_c = next((cols[n] for n in cols if n in _LAT_NAMES), None)
    lon_c = next((cols[n] for n in cols if n in _LON_NAMES), None)
    id_c = next((cols[n] for n in _ID_NAMES if n in cols), None)
    if lat_c is None or lon_c is None:
        raise InputDataError(
            f"location file {path} line 1: header {list(frame.columns)} needs latitude and "
            "longitude columns (lat/latitude, lon/lng/longitude)"
        )
    lat = pd.to_numeric(frame[lat_c], errors="coerce").to_numpy(dtype=np.float64)
    lon = pd.to_numeric(frame[lon_c], errors="coerce").to_numpy(dtype=np.float64)
    _check_coords(lat, lon, path, first_line=2)
    names = frame[id_c] if id_c is not None else pd.Series(np.arange(len(frame)).astype(str))
    dup = canonical_ids(names).duplicated(keep="first")
    if dup.any():
        line = int(np.flatnonzero(dup.to_numpy())[0]) + 2
        raise InputDataError(
            f"location file {path} line {line}: duplicate location id {names.iloc[line - 2]!r}"
        )
    _check_integer_ids(names, path)
    return _from_names(names, lat, lon, f"location file {path}")


def _npy_locations(path: Path) -> LocationSet:
    """P from an .npy array of rows [id, lat, lon]; ids must be whole numbers (line = row)."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputDataError(f"location file {path}: not a readable .npy array ({exc})") from None
    if array.ndim != 2 or array.shape[1] != 3 or array.dtype.kind not in "iuf" or not len(array):
        raise InputDataError(f"location file {path}: an .npy location set must be rows "
                             f"[id, lat, lon] of numbers, got shape {array.shape} of {array.dtype}")
    ids = array[:, 0].astype(np.float64)
    whole = np.isfinite(ids) & (np.mod(ids, 1) == 0) & (ids >= 0) & (ids < 2**31)
    if not whole.all():  # published as loc_id: a 32-bit integer, -1 meaning "no location"
        raise InputDataError(f"location file {path} line {int(np.argmin(whole)) + 1}: location "
                             f"id {ids[np.argmin(whole)]!r} is not a whole number in "
                             "0..2147483647")
    names = pd.Series(ids.astype(np.int64).astype(str), dtype=object)
    lat, lon = array[:, 1].astype(np.float64), array[:, 2].astype(np.float64)
    _check_coords(lat, lon, path, first_line=1)
    dup = names.duplicated(keep="first").to_numpy()
    if dup.any():
        line = int(np.flatnonzero(dup)[0]) + 1
        raise InputDataError(f"location file {path} line {line}: duplicate location id "
                             f"{names.iloc[line - 1]}")
    return _from_names(names, lat, lon, f"location file {path}")


def _check_integer_ids(names: pd.Series, path: Path) -> None:
    """Integer ids are published as they are (a 32-bit `loc_id`, -1 meaning "no location" in
    the mapping): a negative one or one of 2^31 or more cannot be, so the file is refused
    (before, such a file was accepted and its records quarantined or silently renumbered)."""
    numeric = pd.to_numeric(canonical_ids(names), errors="coerce")
    if not numeric.notna().all():
        return  # text ids: numbered in file order, as documented
    bad = ((numeric < 0) | (numeric >= 2**31)).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        what = "negative" if numeric.iloc[i] < 0 else "2^31 or more"
        raise InputDataError(
            f"location file {path} line {i + 2}: location id {names.iloc[i]!r} is {what}; "
            "integer ids must be 0..2147483647 (they are published as loc_id): renumber the "
            "locations and the records that name them"
        )


def _check_coords(lat: np.ndarray, lon: np.ndarray, path: Path, first_line: int) -> None:
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(lat) & np.isfinite(lon)) | (np.abs(lat) > 90) | (np.abs(lon) > 180)
    if bad.any():
        line = int(np.flatnonzero(bad)[0]) + first_line
        raise InputDataError(
            f"location file {path} line {line}: latitude/longitude missing or out of range"
        )

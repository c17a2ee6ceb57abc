"""The station layout of the synthetic Telecom-Shanghai data (docs/architecture.md section 5). No
pyspark.

Two sources, one shape (`loc_id, lat, lon, weight`, weight = popularity, summing to 1):
- the real Shanghai Telecom station list (`base_stations.csv`), filtered to a box because 33 rows
  lie far outside Shanghai; popularity from the June 2014 usage file (access counts joined to the
  nearest station) when given, else uniform;
- a generated clustered layout (a dense core, sub-centres and a sparse background) when no list
  is given, thinned so the nearest-neighbour spacing has a median of about 0.5 km.

`StationIndex` wraps the table for the per-user kernel: planar km coordinates (equirectangular
around the box centre, under 0.2 % error over Shanghai's extent) and a KD-tree for nearest queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.spatial import cKDTree

from udfs.errors import InputDataError
from udfs.geo import KM_PER_DEGREE

STATION_BOX = (30.6, 31.9, 120.8, 122.2)  # lat_min, lat_max, lon_min, lon_max (real list filter)
LAYOUT_BOX = (30.7, 31.6, 120.9, 121.95)  # the generated layout stays inside this box
LAYOUT_SPAWN_KEY = 1  # SeedSequence spawn key of the layout (users use 0, see datagen_model)
_CORE = (31.23, 121.47)  # People's Square: the centre of the generated layout


def _read_csv(path: Path, what: str) -> pd.DataFrame:
    if not Path(path).is_file():
        raise InputDataError(f"datagen: {what} file {path} does not exist")
    try:
        frame = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputDataError(f"datagen: {what} file {path} is not a readable CSV: {exc}") from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    missing = {"latitude", "longitude"} - set(frame.columns)
    if missing:
        raise InputDataError(f"datagen: {what} file {path} lacks columns {sorted(missing)}")
    return frame


def _in_box(lat: pd.Series, lon: pd.Series, box: tuple[float, float, float, float]) -> pd.Series:
    return lat.between(box[0], box[1]) & lon.between(box[2], box[3])


def load_stations(
    stations_csv: Path,
    usage_csv: Path | None = None,
    box: tuple[float, float, float, float] = STATION_BOX,
    max_join_km: float = 0.5,
) -> pd.DataFrame:
    """Real stations inside `box`, loc_id 0..n-1 in file order; popularity from `usage_csv`.

    Usage rows (access counts) join to their nearest station within `max_join_km`; a station
    that no usage row reaches gets the smallest observed count (seen, but rarely).
    """
    raw = _read_csv(stations_csv, "stations")
    lat = pd.to_numeric(raw["latitude"], errors="coerce")
    lon = pd.to_numeric(raw["longitude"], errors="coerce")
    keep = _in_box(lat, lon, box)
    if not keep.any():
        raise InputDataError(f"datagen: no station of {stations_csv} lies inside the box {box}")
    table = pd.DataFrame({"lat": lat[keep].to_numpy(), "lon": lon[keep].to_numpy()})
    table = table.drop_duplicates(ignore_index=True)
    table.insert(0, "loc_id", np.arange(len(table), dtype=np.int64))
    weight = np.ones(len(table))
    if usage_csv is not None:
        weight = _usage_weights(table, usage_csv, box, max_join_km)
    table["weight"] = weight / weight.sum()
    return table


def _usage_weights(
    table: pd.DataFrame, usage_csv: Path, box: tuple[float, float, float, float], max_km: float
) -> np.ndarray:
    usage = _read_csv(usage_csv, "usage")
    count_col = next((c for c in usage.columns if "accessnum" in c), None)
    if count_col is None:
        raise InputDataError(f"datagen: usage file {usage_csv} has no *AccessNum column")
    lat = pd.to_numeric(usage["latitude"], errors="coerce")
    lon = pd.to_numeric(usage["longitude"], errors="coerce")
    count = pd.to_numeric(usage[count_col], errors="coerce")
    ok = _in_box(lat, lon, box) & (count > 0)
    if not ok.any():
        return np.ones(len(table))
    index = StationIndex.from_table(table.assign(weight=1.0 / len(table)))
    dist, nearest = index.tree.query(index.project(lat[ok].to_numpy(), lon[ok].to_numpy()))
    near = dist <= max_km
    weight = np.bincount(nearest[near], weights=count[ok].to_numpy()[near], minlength=len(table))
    floor = weight[weight > 0].min() if (weight > 0).any() else 1.0
    return np.where(weight > 0, weight, floor)


def generate_layout(
    n_stations: int,
    seed: int,
    box: tuple[float, float, float, float] = LAYOUT_BOX,
    min_spacing_km: float = 0.15,
) -> pd.DataFrame:
    """A clustered layout of `n_stations` inside `box`, uniform popularity.

    Candidates come from a mixture (45 % a core Gaussian of 10 km, 40 % twelve sub-centres of
    3.5 km, 15 % uniform background); a candidate is dropped when an earlier kept one lies within
    `min_spacing_km` (dart throwing), so the layout looks like a cell network: dense centre,
    sparse rim, no two masts on top of each other.
    """
    if n_stations < 1:
        raise InputDataError("datagen: n_stations must be at least 1")
    rng = np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(LAYOUT_SPAWN_KEY,)))
    origin = ((box[0] + box[1]) / 2, (box[2] + box[3]) / 2)
    kx = KM_PER_DEGREE * np.cos(np.radians(origin[0]))
    centres = np.c_[
        rng.uniform(box[0] + 0.1, box[1] - 0.1, 12), rng.uniform(box[2] + 0.1, box[3] - 0.1, 12)
    ]
    lat = np.empty(0)
    lon = np.empty(0)
    keep = np.empty(0, bool)
    while keep.sum() < n_stations:
        m = 2 * n_stations
        kind = rng.choice(3, size=m, p=[0.45, 0.40, 0.15])
        centre = np.where((kind == 0)[:, None], np.array(_CORE), centres[rng.integers(0, 12, m)])
        sd = np.where(kind == 0, 10.0, 3.5)
        new_lat = centre[:, 0] + rng.normal(0, 1, m) * sd / KM_PER_DEGREE
        new_lon = centre[:, 1] + rng.normal(0, 1, m) * sd / kx
        new_lat = np.where(kind == 2, rng.uniform(box[0], box[1], m), new_lat)
        new_lon = np.where(kind == 2, rng.uniform(box[2], box[3], m), new_lon)
        inside = _in_box(pd.Series(new_lat), pd.Series(new_lon), box).to_numpy()
        lat = np.r_[lat, new_lat[inside]]
        lon = np.r_[lon, new_lon[inside]]
        keep = _dart_throw(_project(lat, lon, origin), min_spacing_km)
    chosen = np.flatnonzero(keep)[:n_stations]
    return pd.DataFrame(
        {
            "loc_id": np.arange(n_stations, dtype=np.int64),
            "lat": np.round(lat[chosen], 6),
            "lon": np.round(lon[chosen], 6),
            "weight": np.full(n_stations, 1.0 / n_stations),
        }
    )


def _dart_throw(xy: np.ndarray, radius: float) -> np.ndarray:
    """Keep point i unless an earlier kept point lies within `radius` (order-stable)."""
    neighbours = cKDTree(xy).query_ball_point(xy, radius)
    keep = np.zeros(len(xy), bool)
    for i, near in enumerate(neighbours):
        keep[i] = not any(keep[j] for j in near if j < i)
    return keep


@dataclass(frozen=True)
class StationIndex:
    """Station arrays for the kernel: ids, coordinates, planar km positions, popularity, KD-tree."""

    loc_id: np.ndarray
    lat: np.ndarray
    lon: np.ndarray
    weight: np.ndarray
    xy: np.ndarray = field(repr=False)
    tree: cKDTree = field(repr=False)
    neighbours: np.ndarray = field(repr=False)  # (n, 6) nearest other stations, nearest first
    origin: tuple[float, float]

    @classmethod
    def from_table(cls, table: pd.DataFrame) -> StationIndex:
        """Build from a `loc_id, lat, lon, weight` frame (weights are renormalised)."""
        lat = table["lat"].to_numpy(float)
        lon = table["lon"].to_numpy(float)
        weight = table["weight"].to_numpy(float)
        if len(lat) == 0 or not np.all(np.isfinite(weight)) or weight.sum() <= 0:
            raise InputDataError("datagen: the station table is empty or has no positive weight")
        origin = (float((lat.min() + lat.max()) / 2), float((lon.min() + lon.max()) / 2))
        xy = _project(lat, lon, origin)
        tree = cKDTree(xy)
        k = min(7, len(lat))
        near = tree.query(xy, k=k)[1].reshape(len(lat), k)
        neighbours = near[:, 1:] if k > 1 else near
        return cls(
            loc_id=table["loc_id"].to_numpy(np.int64),
            lat=lat,
            lon=lon,
            weight=weight / weight.sum(),
            xy=xy,
            tree=tree,
            neighbours=neighbours,
            origin=origin,
        )

    def __len__(self) -> int:
        return len(self.lat)

    def project(self, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        """Planar (x east, y north) km coordinates around the layout's centre."""
        return _project(np.asarray(lat, float), np.asarray(lon, float), self.origin)


def _project(lat: np.ndarray, lon: np.ndarray, origin: tuple[float, float]) -> np.ndarray:
    kx = KM_PER_DEGREE * np.cos(np.radians(origin[0]))
    return np.c_[(lon - origin[1]) * kx, (lat - origin[0]) * KM_PER_DEGREE]


def nearest_neighbour_km(table: pd.DataFrame) -> np.ndarray:
    """Distance from each station to its nearest other station (km, planar)."""
    index = StationIndex.from_table(table)
    dist, _ = index.tree.query(index.xy, k=2)
    return dist[:, 1]

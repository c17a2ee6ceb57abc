"""Check-in arrays in NumPy's `.npy` format (the Foursquare NYC set: rows `[user, poi, minutes]`).
No pyspark.

An array has no header and no dates: `ingest.columns` names its columns in order with the names
a header would use (`user`, `location id`, `timestamp`; `lat`, `lon` where the array holds
them; any other name is an ignored column), and the timestamps are numbers of `ingest.ts_unit`
counted from `ingest.time_origin`. A row without coordinates takes those of the location its
id names, so such an array needs a location file (`ingest.locations_path`,
`jobs.ingest.locmap.map_points`).

One array row is one record, numbered from 1 (`line`); quarantine shows it as its values
joined by commas. A user or location id that is not a whole number makes the row
`unparsable_line`; timestamps and coordinates are checked as in the text readers.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.ingest.readers.common import (
    ParsedColumns,
    Reason,
    Window,
    coordinate_checks,
    first_reason,
    timestamp_checks,
)
from jobs.ingest.readers.delimited import TableSpec, count_timestamps, resolve_header
from udfs.errors import InputDataError

SUFFIX = ".npy"
REQUIRED = ("user", "ts", "loc")  # coordinates come from the location set when absent


def is_npy(path: str | Path) -> bool:
    return str(path).lower().endswith(SUFFIX)


def array_spec(base: TableSpec) -> TableSpec:
    """The check-in layout of an array: user, time and location id; coordinates optional."""
    return dataclasses.replace(base, name="check-in arrays", required=REQUIRED,
                               optional=("lat", "lon"), header=False)


def check_file(path: Path, spec: TableSpec) -> None:
    """Refuse, before any Spark work, an array the reader cannot read: not an .npy file, not
    two-dimensional and numeric, or a column count other than `ingest.columns` names."""
    if spec.ts_unit == "datetime":
        raise InputDataError(
            f"{path}: an .npy array holds numbers, not dates: set ingest.ts_unit (minutes, "
            "seconds, milliseconds) and ingest.time_origin, the moment its times count from")
    _, n_cols = _roles(spec, path)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)  # the header only
    except (OSError, ValueError, EOFError) as exc:
        raise InputDataError(f"{path}: not a readable .npy array ({exc})") from None
    _check_layout(path, array.shape, array.dtype, n_cols)


def _roles(spec: TableSpec, path) -> tuple[dict[str, int], int]:
    roles, n_cols = resolve_header(spec.header_line(None), spec, f"{path} (ingest.columns)")
    if ("lat" in roles) != ("lon" in roles):
        raise InputDataError(f"{path} (ingest.columns): name both lat and lon, or neither "
                             "(the location set then gives each row its coordinates)")
    return roles, n_cols


def _check_layout(path, shape: tuple, dtype: np.dtype, n_cols: int) -> None:
    if len(shape) != 2 or dtype.kind not in "iuf":
        raise InputDataError(
            f"{path}: an .npy check-in array must be two-dimensional and numeric, got shape "
            f"{shape} of {dtype}")
    if shape[1] != n_cols:
        raise InputDataError(
            f"{path}: the array has {shape[1]} columns but ingest.columns names {n_cols}: name "
            "every column in array order (an unused one by any other name)")


def _whole_text(values: np.ndarray) -> tuple[pd.Series, np.ndarray]:
    """Ids as text ('698', never '698.0') and where a value is no whole number."""
    values = np.asarray(values)
    if values.dtype.kind in "iu":
        return pd.Series(values.astype(np.int64).astype(str), dtype=object), np.zeros(
            len(values), dtype=bool)
    whole = np.isfinite(values) & (np.mod(values, 1) == 0) & (np.abs(values) < 2**53)
    text = pd.Series(np.where(whole, values, 0).astype(np.int64).astype(str), dtype=object)
    return text.where(whole, None), ~whole


def _records(array: np.ndarray) -> pd.Series:
    """Each row as its values joined by commas (what quarantine shows)."""
    cols = [pd.Series(array[:, j]).astype(str) for j in range(array.shape[1])]
    text = cols[0]
    for col in cols[1:]:
        text = text + "," + col
    return text.astype(object)


def parse_npy(content: bytes, path: str, spec: TableSpec, window: Window) -> pd.DataFrame:
    """One .npy array's bytes -> parsed frame (one row per array row)."""
    try:
        array = np.load(io.BytesIO(content), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputDataError(f"{path}: not a readable .npy array ({exc})") from None
    roles, n_cols = _roles(spec, path)
    _check_layout(path, array.shape, array.dtype, n_cols)
    n = len(array)
    user, bad_user = _whole_text(array[:, roles["user"]])
    given, bad_loc = _whole_text(array[:, roles["loc"]])
    ts, far = count_timestamps(array[:, roles["ts"]], spec)
    nan = np.full(n, np.nan)
    lat = array[:, roles["lat"]].astype(np.float64) if "lat" in roles else nan
    lon = array[:, roles["lon"]].astype(np.float64) if "lon" in roles else nan
    coords = coordinate_checks(lat, lon) if "lat" in roles else []
    reason = first_reason(n, [
        (bad_user | bad_loc, Reason.UNPARSABLE_LINE.value),
        *coords,
        (far, Reason.TIMESTAMP_OUT_OF_RANGE.value),
        *timestamp_checks(ts, window),
    ])
    return ParsedColumns(source=path, line=np.arange(1, n + 1), record=_records(array),
                         user_id=user, ts=ts, lat=lat, lon=lon, reason=reason,
                         given_loc=given).frame()

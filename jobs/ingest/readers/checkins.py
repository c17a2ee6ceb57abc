"""Check-in CSVs like Gowalla/Foursquare (CHI) and the CPS campus data. No pyspark.

CHI: `User ID, Latitude, Longitude, Timestamp, Location ID` (ISO timestamps).
CPS: `User ID, Location ID, Timestamp, Latitude, Longitude`, timestamps in minutes (floats)
counted from `ingest.time_origin`, plus a locations file (the public set P).
Columns are found by name, so the order does not matter; `Location ID` is the given location.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd

from jobs.ingest.readers.common import Window
from jobs.ingest.readers.delimited import TableSpec, parse_delimited


def spec(ts_unit: str = "datetime", ts_origin: dt.datetime = dt.datetime(2000, 1, 1),
         utc_offsets: str = "local") -> TableSpec:
    return TableSpec(
        name="checkins",
        required=("user", "ts", "lat", "lon"),
        optional=("loc",),
        ts_unit=ts_unit,
        ts_origin=ts_origin,
        utc_offsets=utc_offsets,
    )


def parse_csv(
    content: bytes,
    path: str,
    window: Window,
    *,
    ts_unit: str = "datetime",
    ts_origin: dt.datetime = dt.datetime(2000, 1, 1),
    header: str | None = None,
    utc_offsets: str = "local",
) -> pd.DataFrame:
    """One check-in CSV file -> parsed frame."""
    return parse_delimited(content, path, spec(ts_unit, ts_origin, utc_offsets), window,
                           header=header)

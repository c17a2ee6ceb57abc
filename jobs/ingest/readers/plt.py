"""Geolife PLT files: `<root>/<user>/Trajectory/<name>.plt`. No pyspark.

Six header lines, then `lat,lon,0,altitude_ft,days_since_1899-12-30,date,time` (times in GMT).
The user id is the folder name two levels above the file. A line with fewer than 7 fields, or
a last line without its newline that does not parse, is a truncated line.
"""

from __future__ import annotations

from pathlib import PurePath

import pandas as pd

from jobs.ingest.readers.common import (
    ParsedColumns,
    Window,
    line_reasons,
    parse_datetime,
    parse_float,
    split_fields,
    split_lines,
    value_checks,
)

HEADER_LINES = 6
N_FIELDS = 7


def user_of(path: str) -> str:
    """`.../<user>/Trajectory/x.plt` -> `<user>` (else the file's parent folder)."""
    parts = PurePath(path.removeprefix("file:")).parts
    if len(parts) >= 3 and parts[-2].lower() == "trajectory":
        return parts[-3]
    return parts[-2] if len(parts) >= 2 else ""


def parse_plt(content: bytes, path: str, window: Window) -> pd.DataFrame:
    """One PLT file's bytes -> parsed frame (one row per data line)."""
    lines = split_lines(content, skip=HEADER_LINES)
    fields, count = split_fields(lines.text, ",", N_FIELDS)
    lat, lat_bad = parse_float(fields[0])
    lon, lon_bad = parse_float(fields[1])
    _, alt_bad = parse_float(fields[3])
    date = fields[5].fillna("").astype(str).str.strip()
    time = fields[6].fillna("").astype(str).str.strip()
    ts = parse_datetime(date + " " + time)
    reason = line_reasons(lines, count, N_FIELDS, lat_bad | lon_bad | alt_bad,
                          value_checks(lat, lon, ts, window))
    n = len(fields)
    return ParsedColumns(
        source=path,
        line=lines.line,
        record=lines.text,
        user_id=pd.Series([user_of(path)] * n, dtype=object),
        ts=ts,
        lat=lat,
        lon=lon,
        reason=reason,
    ).frame()

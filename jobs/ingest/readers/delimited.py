"""Header-mapped delimited text (CSV) records: the engine of the Telecom and check-in readers.

The header names the columns; each *role* (user, ts, end, lat, lon, loc) is found by a list of
accepted names compared without case, spaces or underscores, so `User ID`, `user_id` and `user`
all fill the user role. A file whose header lacks a required role is refused as a whole
(InputDataError naming the file and the missing column), because none of its lines can be read.
No pyspark.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd

from jobs.ingest.readers.common import (
    Lines,
    Window,
    line_reasons,
    normalise_name,
    parse_datetime,
    parse_float,
    parsed_frame,
    split_fields,
    split_lines,
    split_quoted,
)
from udfs.errors import InputDataError

ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "user": ("user", "userid", "uid", "user_id"),
    "ts": ("timestamp", "start", "starttime", "time", "ts", "datetime", "utctimestamp"),
    "end": ("end", "endtime"),
    "lat": ("lat", "latitude"),
    "lon": ("lon", "lng", "long", "longitude"),
    "loc": ("locationid", "locid", "location", "station", "stationid", "venueid", "spotid"),
}


@dataclass(frozen=True)
class TableSpec:
    """Which roles a source needs and how its timestamps are written."""

    name: str
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    sep: str = ","
    ts_unit: str = "datetime"  # "datetime" (text) | "minutes" | "seconds" | "milliseconds"
    ts_format: str | None = None  # strptime format of "datetime" text (None: ISO 8601)
    ts_origin: dt.datetime = dt.datetime(2000, 1, 1)
    utc_offsets: str = "local"  # ISO text with an offset: wall time as written, or "utc"
    header: bool = True  # False: no header line; `columns` names the fields in file order
    columns: tuple[str, ...] = ()
    encoding: str = "utf-8"
    quoted: bool = False  # CSV quoting: `"a, b"` is one field

    def header_line(self, first_line: str | None) -> str:
        """The header the roles are found in: the file's first line, or the given columns."""
        return (first_line or "") if self.header else self.sep.join(self.columns)


def recode(content: bytes, encoding: str) -> bytes:
    """A file in another encoding as UTF-8 bytes; undecodable bytes pass through unchanged
    (surrogate escapes), so their lines are quarantined `non_utf8` as in a UTF-8 file."""
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        return content
    return content.decode(encoding, errors="surrogateescape").encode(
        "utf-8", errors="surrogateescape")


def resolve_header(header: str, spec: TableSpec, path: str) -> tuple[dict[str, int], int]:
    """Map each role of `spec` to its column index; InputDataError naming what is missing.
    Returns (roles, number of header columns)."""
    parts = next(csv.reader([header], delimiter=spec.sep)) if spec.quoted else header.split(
        spec.sep)
    names = [normalise_name(n) for n in parts]
    found: dict[str, int] = {}
    for role in (*spec.required, *spec.optional):
        aliases = {normalise_name(a) for a in ROLE_NAMES[role]}
        hits = [i for i, n in enumerate(names) if n in aliases]
        if hits:
            found[role] = hits[0]
    missing = [r for r in spec.required if r not in found]
    if missing:
        wanted = "; ".join(f"{r}: one of {list(ROLE_NAMES[r])}" for r in missing)
        raise InputDataError(
            f"{path} line 1: header {header.strip()!r} lacks a column for {wanted} "
            f"({spec.name} records need {list(spec.required)})"
        )
    return found, len(names)


def parse_timestamps(text: pd.Series, spec: TableSpec) -> tuple[pd.Series, np.ndarray]:
    """(timestamps, garbage): numeric units count from ts_origin; NaT where unparsable."""
    if spec.ts_unit == "datetime" and spec.ts_format:  # an explicit strptime format
        ts = pd.to_datetime(text.fillna("").astype(str).str.strip(), format=spec.ts_format,
                            errors="coerce")
        if getattr(ts.dt, "tz", None) is not None:
            ts = ts.dt.tz_convert("UTC") if spec.utc_offsets == "utc" else ts
            ts = ts.dt.tz_localize(None)
        return pd.Series(ts, index=text.index), np.zeros(len(text), dtype=bool)
    if spec.ts_unit == "datetime":
        ts = parse_datetime(text, spec.utc_offsets)
        return ts, np.zeros(len(text), dtype=bool)
    values, _ = parse_float(text)
    finite = np.isfinite(values)
    unit = {"minutes": 60.0, "seconds": 1.0, "milliseconds": 1e-3}[spec.ts_unit]
    ns = np.where(finite, values * unit * 1e9, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        ok = finite & (np.abs(ns) < 9e18)
    stamps = pd.Timestamp(spec.ts_origin) + pd.to_timedelta(np.where(ok, ns, 0).astype(np.int64))
    ts = pd.Series(stamps).where(ok)
    return ts, np.zeros(len(text), dtype=bool)


def parse_delimited(
    content: bytes, path: str, spec: TableSpec, window: Window, *, header: str | None = None
) -> pd.DataFrame:
    """Parse one CSV file's bytes into a parsed frame (one row per non-blank data line).

    `header`: the file's header line when the caller already checked it (else the first line).
    """
    lines: Lines = split_lines(recode(content, spec.encoding), skip=1 if spec.header else 0)
    head = spec.header_line(header if header is not None else
                            (lines.header[0] if lines.header else ""))
    roles, n_cols = resolve_header(head, spec, path)
    split = split_quoted if spec.quoted else split_fields
    fields, count = split(lines.text, spec.sep, n_cols)
    # Unnamed trailing header columns (a spreadsheet's `a,b,c,`) may be absent from a line.
    named = len(head.rstrip(f"{spec.sep} \t").split(spec.sep))
    count = np.where((count >= named) & (count < n_cols), n_cols, count)

    def col(role: str, strip: bool = False) -> pd.Series:
        if role not in roles:
            return pd.Series([None] * len(fields), dtype=object)
        values = fields[roles[role]]
        return values.str.strip() if strip else values

    lat, lat_bad = parse_float(col("lat"))
    lon, lon_bad = parse_float(col("lon"))
    ts, _ = parse_timestamps(col("ts"), spec)
    end_ts = parse_timestamps(col("end"), spec)[0] if "end" in roles else None
    user = col("user", strip=True)
    no_user = (user.fillna("") == "").to_numpy()
    given = col("loc", strip=True).replace("", None) if "loc" in roles else None
    reason = line_reasons(lines, count, n_cols, no_user | lat_bad | lon_bad, lat, lon, ts, window)
    return parsed_frame(
        source=path,
        line=lines.line,
        record=lines.text,
        user_id=user,
        ts=ts,
        end_ts=end_ts,
        lat=lat,
        lon=lon,
        reason=reason,
        given_loc=given,
    )

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
import re
from dataclasses import dataclass
from pathlib import PurePath

import numpy as np
import pandas as pd

from jobs.config import format_holds_year
from jobs.ingest.readers.common import (
    Lines,
    ParsedColumns,
    Reason,
    Window,
    line_reasons,
    normalise_name,
    parse_datetime,
    parse_float,
    split_fields,
    split_lines,
    split_quoted,
    value_checks,
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


_NO_END = frozenset({"", "null", "none", "na", "n/a", "nan", "nat"})  # an end not given


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
    quoted: bool = False  # CSV quoting: `"a, b"` is one field (and may span lines)
    # The day of every record of this file when its timestamps are clock times or counts from
    # midnight (`ingest.date_from`: taken from the file name); None: timestamps carry the date.
    day: dt.date | None = None

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


PANDAS_MIN, PANDAS_MAX = pd.Timestamp.min, pd.Timestamp.max  # 1677-09-21 .. 2262-04-11
# the same bounds as Python datetimes, inside them by a microsecond (no nanoseconds to drop)
_PY_MIN = dt.datetime(1677, 9, 21, 0, 12, 44)
_PY_MAX = dt.datetime(2262, 4, 11, 23, 47, 16)


def file_date(path: str, pattern: str, fmt: str | None, year: int | None = None) -> dt.date:
    """The date `ingest.date_from` takes from a file's name (else from its whole path): the
    regex's group `date`, else its first group, else the whole match; read with `fmt`
    (strptime; None: ISO 8601, `2014-06-01` or `20140601`), in `year` when `fmt` holds no
    year (`ingest.date_year`). InputDataError naming the file when it does not match or
    holds no date, or when neither the format nor `year` gives the year: its records could
    not be dated."""
    if not format_holds_year(fmt) and year is None:
        raise InputDataError(
            f"{path}: ingest.date_format {fmt!r} holds no year, so the file's date would fall "
            "in 1900: set ingest.date_year (e.g. date_year: 2014) or a date_format with %Y")
    rx = re.compile(pattern)
    m = rx.search(PurePath(path).name) or rx.search(str(path))
    if m is None:
        raise InputDataError(
            f"{path}: the file name does not match ingest.date_from {pattern!r}, so its clock "
            "times have no date: rename the file, fix the pattern, or exclude the file "
            "(ingest.exclude)")
    text = m.group("date") if "date" in rx.groupindex else m.group(1) if rx.groups else m.group(0)
    try:
        if fmt and not format_holds_year(fmt):  # the year read with the date: 02_29 is valid
            return dt.datetime.strptime(f"{year:04d}|{text}", f"%Y|{fmt}").date()
        if fmt:
            return dt.datetime.strptime(text, fmt).date()
        return dt.date.fromisoformat(text)
    except ValueError:
        raise InputDataError(
            f"{path}: {text!r}, taken from the file name by ingest.date_from, is not a date "
            f"in {fmt or 'ISO 8601'}" + (f" of {year}" if year is not None else "")
            + " (set ingest.date_format)") from None


def _beyond_pandas(text: pd.Series, ts: pd.Series, fmt: str | None) -> np.ndarray:
    """Rows whose text is a valid date that pandas' nanosecond timestamps cannot hold
    (9999-12-31): Python's datetime reads years 1-9999. Only failed rows are tried."""
    out = np.zeros(len(text), dtype=bool)
    failed = np.flatnonzero(ts.isna().to_numpy())  # NaT rows only (few): blanks skip below
    for i in failed:
        value = str(text.iloc[i]).strip() if pd.notna(text.iloc[i]) else ""
        if not value:
            continue
        try:
            stamp = (dt.datetime.strptime(value, fmt) if fmt else
                     dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            continue
        stamp = stamp.replace(tzinfo=None)
        out[i] = not (_PY_MIN <= stamp <= _PY_MAX)
    return out


def parse_timestamps(text: pd.Series, spec: TableSpec) -> tuple[pd.Series, np.ndarray]:
    """(timestamps, out_of_range): numeric units count from ts_origin (from the file's day
    with `spec.day`); NaT where unparsable; `out_of_range` marks valid times pandas cannot
    hold (`timestamp_out_of_range`, not `unparsable_timestamp`)."""
    if spec.ts_unit == "datetime" and spec.ts_format:  # an explicit strptime format
        ts = pd.to_datetime(text.fillna("").astype(str).str.strip(), format=spec.ts_format,
                            errors="coerce")
        if getattr(ts.dt, "tz", None) is not None:
            ts = ts.dt.tz_convert("UTC") if spec.utc_offsets == "utc" else ts
            ts = ts.dt.tz_localize(None)
        ts = pd.Series(ts, index=text.index)
        if spec.day is not None:  # clock times: the time of day on the file's day
            ts = pd.Timestamp(spec.day) + (ts - ts.dt.normalize())
        far = _beyond_pandas(text, ts, spec.ts_format) if spec.day is None else np.zeros(
            len(text), dtype=bool)
        return ts, far
    if spec.ts_unit == "datetime":
        ts = parse_datetime(text, spec.utc_offsets)
        return ts, _beyond_pandas(text, ts, None)
    return count_timestamps(parse_float(text)[0], spec)


def count_timestamps(values: np.ndarray, spec: TableSpec) -> tuple[pd.Series, np.ndarray]:
    """Numbers of `spec.ts_unit` counted from ts_origin (from the file's day with `spec.day`)
    -> (timestamps, out_of_range); NaT where not finite or beyond what pandas holds."""
    values = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(values)
    unit = {"minutes": 60.0, "seconds": 1.0, "milliseconds": 1e-3}[spec.ts_unit]
    origin = pd.Timestamp(spec.day) if spec.day is not None else pd.Timestamp(spec.ts_origin)
    ns = np.where(finite, values * unit * 1e9, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        # within what a nanosecond timestamp holds, counted from the origin
        room_hi = float(PANDAS_MAX.value - origin.value)
        room_lo = float(PANDAS_MIN.value - origin.value)
        ok = finite & (ns < min(room_hi, 9e18)) & (ns > max(room_lo, -9e18))
    stamps = origin + pd.to_timedelta(np.where(ok, ns, 0).astype(np.int64))
    ts = pd.Series(stamps).where(ok)
    return ts, finite & ~ok


def _end_times(end_text: pd.Series, ts: pd.Series, spec: TableSpec
               ) -> tuple[pd.Series, list[tuple[np.ndarray, str]]]:
    """The stays' end times and their (mask, reason) checks: out of range, written but not
    parsable, before the start."""
    end_ts, end_far = parse_timestamps(end_text, spec)
    if spec.day is not None:  # a clock time before the start: the stay ended next day
        end_ts = end_ts.where(~(end_ts < ts), end_ts + pd.Timedelta(days=1))
    # A dated end before its start is no stay: quarantined, not clamped to the start.
    before = (end_ts < ts).to_numpy(dtype=bool)
    # an end that is written but does not parse is no missing end (it was read as one)
    garbage = end_ts.isna().to_numpy() & ~end_far
    if garbage.any():  # of the NaT ends, the written ones that are no "missing" word
        words = end_text[garbage].fillna("").astype(str).str.strip().str.lower()
        garbage[garbage] = ~words.isin(_NO_END).to_numpy()
    return end_ts, [(end_far, Reason.TIMESTAMP_OUT_OF_RANGE.value),
                    (garbage, Reason.UNPARSABLE_TIMESTAMP.value),
                    (before, Reason.END_BEFORE_START.value)]


def parse_delimited(
    content: bytes, path: str, spec: TableSpec, window: Window, *, header: str | None = None
) -> pd.DataFrame:
    """Parse one CSV file's bytes into a parsed frame (one row per non-blank data line).

    `header`: the file's header line when the caller already checked it (else the first line).
    """
    lines: Lines = split_lines(recode(content, spec.encoding), skip=1 if spec.header else 0,
                               quoted=spec.quoted)
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
    ts, ts_far = parse_timestamps(col("ts"), spec)
    ts_bad = [(ts_far, Reason.TIMESTAMP_OUT_OF_RANGE.value)]
    end_ts = None
    if "end" in roles:
        end_ts, end_bad = _end_times(col("end"), ts, spec)
        ts_bad += end_bad
    user = col("user")  # as written: ` u1` and `u1` are two users (no silent merge)
    no_user = (user.fillna("").str.strip() == "").to_numpy()
    given = col("loc", strip=True).replace("", None) if "loc" in roles else None
    reason = line_reasons(lines, count, n_cols, no_user | lat_bad | lon_bad,
                          value_checks(lat, lon, ts, window, ts_bad))
    return ParsedColumns(
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
    ).frame()

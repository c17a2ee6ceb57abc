"""What every reader shares: the quarantine vocabulary, line splitting and field checks. No pyspark.

A reader turns the bytes of one input file into a *parsed frame*: exactly one row per input
record (header lines and blank lines are not records), with the typed fields of the record and a
`reason` that is None for a record that passed every check so far, else one word of `Reason`.
Later steps (location mapping, duplicate detection) only ever fill more reasons, never drop rows,
so `records read = accepted + quarantined` holds by construction and is tested per source.

Row shape (PARSED_COLUMNS): source, line, record, user_id, ts, end_ts, lat, lon, given_loc, reason.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import warnings
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import pandas as pd


class Reason(StrEnum):
    """The fixed vocabulary of quarantine reasons (column `reason` of trajpriv_raw.quarantine)."""

    UNPARSABLE_LINE = "unparsable_line"
    TRUNCATED_LINE = "truncated_line"
    NON_UTF8 = "non_utf8"
    # a control character (C0 other than tab, or DEL) in the line: a NUL cut fields in the C
    # parser (31.24\x006946 read as 31.24), others are never part of a valid record
    CONTROL_CHARACTER = "control_character"
    MISSING_COORDINATE = "missing_coordinate"  # empty, NaN or infinite latitude/longitude
    COORDINATE_OUT_OF_RANGE = "coordinate_out_of_range"  # |lat| > 90 or |lon| > 180
    NULL_ISLAND = "null_island"  # exactly (0, 0): a GPS fix that never happened
    UNPARSABLE_TIMESTAMP = "unparsable_timestamp"
    # a valid date the pipeline's nanosecond timestamps cannot hold (before 1677-09-21 or after
    # 2262-04-11, e.g. the sentinel 9999-12-31): no mobility record, so not read as one
    TIMESTAMP_OUT_OF_RANGE = "timestamp_out_of_range"
    OUTSIDE_WINDOW = "outside_window"
    TOO_FAR = "too_far"  # farther than max_distance_km from every location
    UNKNOWN_LOCATION = "unknown_location"  # a location id that is not in the location set
    DUPLICATE = "duplicate"  # same user, timestamp and location as an earlier record
    # a dated end earlier than its start (clock times with ingest.date_from are not: an end
    # clock time before the start ended the next day)
    END_BEFORE_START = "end_before_start"


REASONS: tuple[str, ...] = tuple(r.value for r in Reason)

PARSED_COLUMNS: tuple[str, ...] = (
    "source",
    "line",
    "record",
    "user_id",
    "ts",
    "end_ts",
    "lat",
    "lon",
    "given_loc",
    "reason",
)

_NAN_TOKENS = frozenset(
    {
        "",
        "nan",
        "+nan",
        "-nan",
        "inf",
        "+inf",
        "-inf",
        "infinity",
        "-infinity",
        "+infinity",
        "null",
        "none",
        "na",
        "n/a",
    }
)


@dataclass(frozen=True)
class Window:
    """The configured ingestion window [start, end] in whole days (either side may be open)."""

    start: dt.date | None = None
    end: dt.date | None = None

    def outside(self, ts: pd.Series) -> np.ndarray:
        out = np.zeros(len(ts), dtype=bool)
        if self.start is not None:
            out |= (ts < pd.Timestamp(self.start)).to_numpy()
        if self.end is not None:
            out |= (ts >= pd.Timestamp(self.end) + pd.Timedelta(days=1)).to_numpy()
        return out


@dataclass(frozen=True)
class Lines:
    """The non-blank lines of one file after its header: text, 1-based line number, flags."""

    text: pd.Series  # str
    line: np.ndarray  # int64, 1-based
    non_utf8: np.ndarray  # bool
    control: np.ndarray  # bool: the line holds a control character (Reason.CONTROL_CHARACTER)
    unterminated: np.ndarray  # bool: the file's last line without a newline (maybe cut short)
    header: list[str]  # the header lines that were skipped


_CONTROL = "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # C0 controls but tab, LF and CR; and DEL


def split_lines(content: bytes, *, skip: int = 0, quoted: bool = False) -> Lines:
    """Split `content` into lines, skip `skip` header lines and blank lines, flag bad UTF-8.

    The whole file is decoded at once when it is valid UTF-8 (the fast path); otherwise each
    line is decoded on its own and the broken ones keep their bytes as `\\xNN` escapes.
    `quoted`: CSV quoting, so a line whose `"` quotes are left open continues on the next
    line(s) (a quoted field spanning lines): they form one record, numbered by its first line.
    A quote still open at the end of the file joins nothing (its lines are read one by one).
    """
    raw = content.split(b"\n")
    terminated_last = content.endswith(b"\n")
    if terminated_last:
        raw = raw[:-1]
    try:
        text = content.decode("utf-8")
        lines = text.split("\n")
        if terminated_last:
            lines = lines[:-1]
        bad = np.zeros(len(lines), dtype=bool)
    except UnicodeDecodeError:
        lines, flags = [], []
        for chunk in raw:
            try:
                lines.append(chunk.decode("utf-8"))
                flags.append(False)
            except UnicodeDecodeError:
                lines.append(chunk.decode("utf-8", errors="backslashreplace"))
                flags.append(True)
        bad = np.asarray(flags, dtype=bool)
    text_s = pd.Series(lines, dtype=object).str.rstrip("\r")
    number = np.arange(1, len(lines) + 1, dtype=np.int64)
    header = text_s.iloc[:skip].tolist()
    keep = (number > skip) & (text_s.str.strip() != "").to_numpy()
    unterminated = np.zeros(len(lines), dtype=bool)
    if len(lines) and not terminated_last:
        unterminated[-1] = True
    control = np.zeros(len(lines), dtype=bool)
    byte = np.frombuffer(content, dtype=np.uint8)
    if (((byte < 32) & (byte != 9) & (byte != 10) & (byte != 13)) | (byte == 127)).any():
        control = text_s.str.contains(_CONTROL, regex=True).to_numpy(dtype=bool)  # rare path
    if quoted and len(lines) and (byte == ord('"')).any():
        text_s, number, bad, control, unterminated = _join_quoted(
            text_s, number, bad, control, unterminated, skip)
        keep = (number > skip) & (text_s.str.strip() != "").to_numpy()
    return Lines(
        text=text_s[keep].reset_index(drop=True),
        line=number[keep],
        non_utf8=bad[keep],
        control=control[keep],
        unterminated=unterminated[keep],
        header=header,
    )


def _join_quoted(text: pd.Series, number: np.ndarray, bad: np.ndarray, control: np.ndarray,
                 unterminated: np.ndarray, skip: int):
    """Join the lines of a quoted field that spans lines (see `split_lines`): a data line
    continues the previous one when the quotes before it are left open (an odd count)."""
    odd = (text.str.count('"').to_numpy() % 2).astype(np.int64)
    odd[:skip] = 0
    open_after = np.cumsum(odd) % 2 == 1  # a quote is open after this line
    cont = np.r_[False, open_after[:-1]]
    if not cont.any():
        return text, number, bad, control, unterminated
    if open_after[-1]:  # a quote open at the end: the last group is not joined
        starts = np.flatnonzero(~cont)
        cont[starts[-1]:] = False
    group = np.cumsum(~cont) - 1
    firsts = np.flatnonzero(~cont)
    values = text.tolist()
    joined = [values[i] for i in firsts]
    for g in np.unique(group[cont]):
        members = np.flatnonzero(group == g)
        joined[g] = "\n".join(values[i] for i in members)
    n = len(firsts)

    def any_of(flags: np.ndarray) -> np.ndarray:
        return np.bincount(group, weights=flags.astype(np.int64), minlength=n) > 0

    last = np.r_[firsts[1:], len(values)] - 1
    return (pd.Series(joined, dtype=object), number[firsts], any_of(bad), any_of(control),
            unterminated[last])


def split_quoted(text: pd.Series, sep: str, n_fields: int) -> tuple[pd.DataFrame, np.ndarray]:
    """`split_fields` for CSV quoting (`"a, b",c`, `""` for a quote): Python's csv module
    line by line, so a separator inside quotes is no field boundary (a field spanning lines
    arrives joined, `split_lines(quoted=True)`). Surplus blank fields are dropped as in
    `split_fields`."""
    values = text.tolist()
    rows = list(csv.reader(values, delimiter=sep, quotechar='"', strict=False))
    if len(rows) != len(values):  # a quote left open made the reader run on into later lines
        rows = [next(csv.reader([v], delimiter=sep, quotechar='"', strict=False), [])
                for v in values]
    count = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    for i in np.flatnonzero(count > n_fields):
        if all(not f.strip() for f in rows[i][n_fields:]):
            rows[i], count[i] = rows[i][:n_fields], n_fields
    # A quote left open (an odd count: `split_lines` joined no continuation for it) is a
    # malformed line, not a field running to the end of the line: unparsable (count above).
    open_quote = np.flatnonzero(text.str.count('"').to_numpy() % 2 == 1)
    count[open_quote] = n_fields + 1
    padded = [r[:n_fields] + [None] * (n_fields - len(r)) for r in rows]
    fields = pd.DataFrame(padded, columns=list(range(n_fields)), dtype=object)
    if fields.empty:
        fields = pd.DataFrame({c: pd.Series([], dtype=object) for c in range(n_fields)})
    return fields, count


def split_fields(text: pd.Series, sep: str, n_fields: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Fields 0..n_fields-1 of each line (None/'' where missing) and the field count per line.

    Fast path: pandas' C CSV parser over the joined lines when no line has surplus fields or a
    stray carriage return (so rows stay aligned with lines); otherwise `str.split`.
    """
    n = len(text)
    if n == 0:
        empty = pd.DataFrame({c: pd.Series([], dtype=object) for c in range(n_fields)})
        return empty, np.zeros(0, dtype=np.int64)
    joined = "\n".join(text.tolist())
    raw = np.frombuffer(joined.encode("utf-8"), dtype=np.uint8)
    ends = np.r_[np.flatnonzero(raw == 10), len(raw)]  # where each line ends
    before = np.searchsorted(np.flatnonzero(raw == ord(sep)), ends)  # separators before it
    count = np.diff(np.r_[0, before]) + 1
    text, trimmed = _trim_blank_surplus(text, count, sep, n_fields)
    # a CR or NUL byte would shift or cut fields in the C parser, and trimmed lines differ from
    # the joined text: those files take str.split
    fast = not trimmed and count.max() <= n_fields and sep != "\n"
    if fast and not ((raw == 13) | (raw == 0)).any():
        fields = pd.read_csv(
            io.StringIO(joined),
            sep=sep,
            header=None,
            names=list(range(n_fields)),
            dtype=str,
            na_filter=False,
            skip_blank_lines=False,
            quoting=csv.QUOTE_NONE,
            engine="c",
        )
        if len(fields) == n:
            return fields, count
    fields = text.str.split(sep, n=n_fields - 1, expand=True)
    for col in range(n_fields):
        if col not in fields.columns:
            fields[col] = None
    return fields[list(range(n_fields))], count


def _trim_blank_surplus(text: pd.Series, count: np.ndarray, sep: str,
                        n_fields: int) -> tuple[pd.Series, bool]:
    """Lines with more fields than the header whose surplus fields are all blank (a
    spreadsheet's trailing separators, `a,b,c,,`) are read as their first n_fields fields
    (`count` is lowered in place); a surplus with any content still makes the line
    unparsable. Returns (text, whether any line was trimmed)."""
    over = np.flatnonzero(count > n_fields)
    if over.size == 0 or sep == "\n":
        return text, False
    parts = text.iloc[over].str.split(sep, n=n_fields)
    blank = (parts.str[n_fields].str.strip(sep + " \t") == "").to_numpy(dtype=bool)
    if not blank.any():
        return text, False
    text = text.copy()
    text.iloc[over[blank]] = parts[blank].str[:n_fields].str.join(sep).to_numpy(dtype=object)
    count[over[blank]] = n_fields
    return text, True


def parse_float(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(values, garbage): NaN for blank/NaN/inf tokens; `garbage` marks text that is no number."""
    text = text.fillna("").astype(object)
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    garbage = np.zeros(len(values), dtype=bool)
    nan = np.flatnonzero(np.isnan(values))
    if len(nan):
        words = text.iloc[nan].astype(str).str.strip().str.lower()
        garbage[nan] = ~words.isin(_NAN_TOKENS).to_numpy()
    return values, garbage


_OFFSET = r"^(.*\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)\s*(Z|[+-]\d{2}(?::?\d{2})?)$"


def parse_datetime(text: pd.Series, offsets: str = "local") -> pd.Series:
    """ISO-8601-like timestamps ('2014-06-01 08:10:00', '...T...'); NaT where unparsable.

    A UTC offset (`+08:00`, `Z`) is dropped with `offsets="local"` (the wall time as written:
    a record's day is its local calendar day) or applied with `offsets="utc"` (the UTC time);
    files may mix offsets either way. Naive timestamps are read as written.
    """
    if offsets not in ("local", "utc"):
        raise ValueError(f"offsets must be 'local' or 'utc', got {offsets!r}")
    text = text.fillna("").astype(object)
    try:  # fast path: one vectorised parse (naive, or one offset throughout the file)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # pandas' "mixed time zones"
            ts = _iso(text)
        if ts.dtype == object:
            raise TypeError("mixed offsets")
        if getattr(ts.dt, "tz", None) is not None:
            wall = ts.dt.tz_localize(None) if offsets == "local" else (
                ts.dt.tz_convert("UTC").dt.tz_localize(None))
            return wall.astype("datetime64[ns]")
        failed = (ts.isna() & (text != "")).to_numpy()
        if not failed.any():
            return ts
    except (ValueError, TypeError, FutureWarning):  # offsets mixed (or with naive text)
        ts = pd.Series(pd.NaT, index=text.index, dtype="datetime64[ns]")
        failed = np.ones(len(text), dtype=bool)
    # the rest, one by one kind: an offset is cut off (local) or applied (utc)
    rest = text[failed].astype(str)
    parts = rest.str.extract(_OFFSET)
    has = parts[1].notna()
    if (~has).any():  # no offset: naive text (NaT again where it failed the fast path)
        ts.loc[rest.index[~has.to_numpy()]] = _iso(rest[~has]).to_numpy()
    if has.any():
        idx = rest.index[has.to_numpy()]
        if offsets == "local":
            ts.loc[idx] = _iso(parts.loc[has, 0]).to_numpy()
        else:
            utc = pd.to_datetime(rest[has].str.strip(), format="ISO8601", errors="coerce",
                                 utc=True)
            ts.loc[idx] = utc.dt.tz_localize(None).to_numpy()
    return ts


def _iso(text: pd.Series) -> pd.Series:
    ts = pd.Series(pd.to_datetime(text, format="ISO8601", errors="coerce"), index=text.index)
    retry = ts.isna() & (text != "")
    if retry.any():  # surrounding blanks are allowed; only the few failures pay for strip()
        ts[retry] = pd.to_datetime(
            text[retry].astype(str).str.strip(), format="ISO8601", errors="coerce"
        )
    return ts


RECORD_LIMIT = 2000  # characters of a record kept in quarantine.record (a line may be 100 MB)


def bounded_records(record: pd.Series) -> pd.Series:
    """Records as quarantine shows them: longer ones cut to RECORD_LIMIT characters, with the
    length they had (so a garbage line of 100 MB is not stored whole)."""
    lengths = record.str.len().fillna(0).to_numpy()
    long = lengths > RECORD_LIMIT
    if not long.any():
        return record
    out = record.copy()
    cut = record[long].str[:RECORD_LIMIT]
    out[long] = cut + [f"… ({int(n):,} characters in all)" for n in lengths[long]]
    return out


@dataclass(frozen=True, kw_only=True)
class ParsedColumns:
    """What a reader parsed from one file, a value per line; `frame()` assembles the parsed
    frame. end_ts / given_loc: None where the source has no such column."""

    source: str
    line: np.ndarray
    record: pd.Series
    user_id: pd.Series
    ts: pd.Series
    lat: np.ndarray
    lon: np.ndarray
    reason: pd.Series
    end_ts: pd.Series | None = None
    given_loc: pd.Series | None = None

    def frame(self) -> pd.DataFrame:
        """The parsed frame with PARSED_COLUMNS and canonical dtypes."""
        n = len(self.record)
        idx = pd.RangeIndex(n)
        return pd.DataFrame(
            {
                "source": pd.Series([self.source] * n, index=idx, dtype=object),
                "line": pd.Series(np.asarray(self.line, dtype=np.int64), index=idx),
                "record": pd.Series(bounded_records(self.record.reset_index(drop=True))
                                    .to_numpy(dtype=object), index=idx),
                "user_id": pd.Series(self.user_id.to_numpy(dtype=object), index=idx),
                "ts": pd.Series(_micros(self.ts), index=idx),
                "end_ts": pd.Series(
                    _micros(self.end_ts)
                    if self.end_ts is not None
                    else np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]"),
                    index=idx,
                ),
                "lat": pd.Series(np.asarray(self.lat, dtype=np.float64), index=idx),
                "lon": pd.Series(np.asarray(self.lon, dtype=np.float64), index=idx),
                "given_loc": pd.Series(
                    self.given_loc.to_numpy(dtype=object) if self.given_loc is not None
                    else [None] * n,
                    index=idx,
                    dtype=object,
                ),
                "reason": pd.Series(self.reason.to_numpy(dtype=object), index=idx, dtype=object),
            }
        )


def _micros(ts: pd.Series) -> np.ndarray:
    """Timestamps floored to microseconds (Spark's precision), as datetime64[ns]."""
    return pd.Series(pd.to_datetime(ts)).dt.floor("us").to_numpy(dtype="datetime64[ns]")


def first_reason(n: int, checks: list[tuple[np.ndarray, str]]) -> pd.Series:
    """The first failing check's reason per row (None if all pass); checks in priority order."""
    reason = np.full(n, None, dtype=object)
    for mask, word in checks:
        fill = np.asarray(mask, dtype=bool) & pd.isna(reason)
        reason[fill] = word
    return pd.Series(reason, dtype=object)


def coordinate_checks(lat: np.ndarray, lon: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Missing/non-finite, out of range, (0, 0): in this priority order."""
    with np.errstate(invalid="ignore"):
        missing = ~(np.isfinite(lat) & np.isfinite(lon))
        out_of_range = ~missing & ((np.abs(lat) > 90) | (np.abs(lon) > 180))
        null_island = (lat == 0) & (lon == 0)
    return [
        (missing, Reason.MISSING_COORDINATE.value),
        (out_of_range, Reason.COORDINATE_OUT_OF_RANGE.value),
        (null_island, Reason.NULL_ISLAND.value),
    ]


def timestamp_checks(ts: pd.Series, window: Window,
                     out_of_range: np.ndarray | None = None) -> list[tuple[np.ndarray, str]]:
    """Out of the timestamps' range, unparsable (NaT), outside the window: in this order."""
    nat = ts.isna().to_numpy()
    far = np.zeros(len(nat), dtype=bool) if out_of_range is None else out_of_range
    return [
        (far, Reason.TIMESTAMP_OUT_OF_RANGE.value),
        (nat, Reason.UNPARSABLE_TIMESTAMP.value),
        (~nat & window.outside(ts), Reason.OUTSIDE_WINDOW.value),
    ]


def value_checks(
    lat: np.ndarray,
    lon: np.ndarray,
    ts: pd.Series,
    window: Window,
    ts_bad: list[tuple[np.ndarray, str]] | None = None,
) -> list[tuple[np.ndarray, str]]:
    """The (mask, reason) checks of the parsed values, in priority order: the coordinate
    checks, then the timestamp checks (`ts_bad`: further checks of the timestamps, such as an
    end that does not parse, checked before the start's)."""
    return [*coordinate_checks(lat, lon), *(ts_bad or []), *timestamp_checks(ts, window)]


def line_reasons(
    lines: Lines,
    count: np.ndarray,
    n_fields: int,
    unparsable: np.ndarray,
    values: list[tuple[np.ndarray, str]],
) -> pd.Series:
    """Each line's quarantine reason (None = accepted), the same rules for every text reader.

    In priority order: non-UTF-8 bytes, a control character, too few fields (truncated), too
    many fields or a field that does not parse (`unparsable`), then the checks of the parsed
    values (`value_checks`). A final line without its newline that fails a check was most
    likely cut short: it says truncated.
    """
    checks = [
        (lines.non_utf8, Reason.NON_UTF8.value),
        (lines.control, Reason.CONTROL_CHARACTER.value),
        (count < n_fields, Reason.TRUNCATED_LINE.value),
        (count > n_fields, Reason.UNPARSABLE_LINE.value),
        (unparsable, Reason.UNPARSABLE_LINE.value),
        *values,
    ]
    reason = first_reason(len(count), checks)
    cut = lines.unterminated & reason.notna().to_numpy() & ~lines.non_utf8 & ~lines.control
    reason[cut] = Reason.TRUNCATED_LINE.value
    return reason


def normalise_name(name: str) -> str:
    """Header names compared without case, spaces, `_` or `-` ('User ID' == 'user_id')."""
    return "".join(ch for ch in name.strip().lower() if ch.isalnum())

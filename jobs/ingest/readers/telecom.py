"""Telecom-style records: one row per connection, `user, start, end, lat, lon[, station]`.

The shape of the Shanghai Telecom data and of `trajpriv datagen`'s output. Files are CSV with a
header (column names matched by role, see `delimited.ROLE_NAMES`) or Parquet with the same
column names. `start` is the record's timestamp; `end` (optional) tells shaping when a stay
ended, so a 5-hour connection followed by a move is not a 3-hour gap. A `station` column, when
present, is the given location id. No pyspark.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd

from jobs.ingest.readers.common import (
    ParsedColumns,
    Reason,
    Window,
    coordinate_checks,
    first_reason,
    normalise_name,
    parse_datetime,
    timestamp_checks,
)
from jobs.ingest.readers.delimited import (
    ROLE_NAMES,
    TableSpec,
    parse_delimited,
    parse_timestamps,
)

SPEC = TableSpec(name="telecom", required=("user", "ts", "lat", "lon"), optional=("end", "loc"))


def spec(ts_unit: str = "datetime", ts_origin: dt.datetime = dt.datetime(2000, 1, 1),
         utc_offsets: str = "local") -> TableSpec:
    """SPEC with the configured timestamps (`ingest.ts_unit`, `time_origin`, `utc_offsets`)."""
    return dataclasses.replace(SPEC, ts_unit=ts_unit, ts_origin=ts_origin,
                               utc_offsets=utc_offsets)


def parse_csv(content: bytes, path: str, window: Window, header: str | None = None, *,
              ts_unit: str = "datetime", ts_origin: dt.datetime = dt.datetime(2000, 1, 1),
              utc_offsets: str = "local") -> pd.DataFrame:
    """One CSV file of records -> parsed frame."""
    return parse_delimited(content, path, spec(ts_unit, ts_origin, utc_offsets), window,
                           header=header)


def _role_columns(columns: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for role, aliases in ROLE_NAMES.items():
        wanted = {normalise_name(a) for a in aliases}
        for name in columns:
            if normalise_name(name) in wanted:
                found.setdefault(role, name)
    return found


def missing_roles(columns: list[str]) -> list[str]:
    """Required roles a Parquet schema does not provide (checked in the driver)."""
    found = _role_columns(columns)
    return [r for r in SPEC.required if r not in found]


def _record_text(batch: pd.DataFrame) -> pd.Series:
    """Each row as text, its fields as `str()` gives them joined by commas (what quarantine
    shows for a typed record). Column by column, not a Python join per row."""
    if len(batch) == 0 or batch.shape[1] == 0:
        return pd.Series([""] * len(batch), index=batch.index, dtype=object)
    text = batch.iloc[:, 0].astype(str)
    for i in range(1, batch.shape[1]):
        text = text + "," + batch.iloc[:, i].astype(str)
    return text.astype(object)


def parse_frame(batch: pd.DataFrame, path: str, window: Window, first_row: int = 1, *,
                ts_unit: str = "datetime", ts_origin: dt.datetime = dt.datetime(2000, 1, 1),
                utc_offsets: str = "local") -> pd.DataFrame:
    """Typed records (a Parquet batch) -> parsed frame; `line` is the row number in the input.
    Numeric start/end columns count `ts_unit` from `ts_origin` (as in the CSV reader)."""
    roles = _role_columns(list(batch.columns))
    n = len(batch)
    record = _record_text(batch)

    def numeric(role: str) -> np.ndarray:
        return pd.to_numeric(batch[roles[role]], errors="coerce").to_numpy(dtype=np.float64)

    def stamps(role: str) -> pd.Series:
        col = batch[roles[role]]
        if ts_unit != "datetime":
            return parse_timestamps(col.astype("string"), spec(ts_unit, ts_origin))[0]
        if pd.api.types.is_datetime64_any_dtype(col):
            if col.dt.tz is None:
                return col
            if utc_offsets == "utc":
                col = col.dt.tz_convert("UTC")
            return col.dt.tz_localize(None)
        return parse_datetime(col.astype("string"), utc_offsets)

    lat, lon = numeric("lat"), numeric("lon")
    ts = stamps("ts").reset_index(drop=True)
    user = batch[roles["user"]].astype("string").fillna("").astype(object)  # as written
    no_user = (user.str.strip() == "").to_numpy()
    end_ts = stamps("end").reset_index(drop=True) if "end" in roles else None
    before = (end_ts < ts).to_numpy(dtype=bool) if end_ts is not None else np.zeros(n, bool)
    given = None
    if "loc" in roles:
        given = batch[roles["loc"]].astype("string").str.strip().astype(object)
        given = given.where(given.notna() & (given != ""), None)
    reason = first_reason(
        n,
        [
            (no_user, Reason.UNPARSABLE_LINE.value),
            *coordinate_checks(lat, lon),
            (before, Reason.END_BEFORE_START.value),
            *timestamp_checks(ts, window),
        ],
    )
    return ParsedColumns(
        source=path,
        line=np.arange(first_row, first_row + n),
        record=record.reset_index(drop=True),
        user_id=user.reset_index(drop=True),
        ts=ts,
        end_ts=end_ts,
        lat=lat,
        lon=lon,
        reason=reason,
        given_loc=given.reset_index(drop=True) if given is not None else None,
    ).frame()

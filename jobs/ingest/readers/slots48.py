"""The 48-slot Geolife format of the PateGail preprocessing. No pyspark.

A folder with `gps` (line i = `lat lon` of location id i, 0.01-degree cell centres) and
`real.data` (one user-day per line: 48 location ids separated by spaces). When
`real_data_per_user.csv` (`user_id, day_idx, s0..s47`) sits beside it, it gives each day its user
and day number; without it every line is its own user (`row<i>`), day 0. A day's date is
`origin + day_idx` days (the preprocessing dropped the real dates).

Each line is one record: it is accepted as a slot day or quarantined (wrong number of ids ->
truncated/unparsable line, an id that is no integer -> unparsable line, an id not in `gps` ->
unknown location, the same user and day twice -> duplicate).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

from jobs.ingest.readers.common import Reason, first_reason, split_fields, split_lines
from udfs.errors import InputDataError

SLOTS = 48
PER_USER_FILE = "real_data_per_user.csv"
DATA_FILE = "real.data"


def resolve(path: Path) -> tuple[Path, Path | None]:
    """(data file, per-user CSV or None) for a folder or a file path."""
    if path.is_dir():
        per_user = path / PER_USER_FILE
        if per_user.is_file():
            return per_user, per_user
        data = path / DATA_FILE
        if not data.is_file():
            raise InputDataError(
                f"48-slot folder {path} holds neither {PER_USER_FILE} nor {DATA_FILE}"
            )
        return data, None
    if not path.is_file():
        raise InputDataError(f"48-slot input {path} does not exist")
    return (path, path) if path.name.endswith(".csv") else (path, None)


def _line_heads(fields: pd.DataFrame, n: int, per_user: bool
                ) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """Each line's user, whether its head (user, day number) is unusable, and its day index;
    without per-user heads each line is a user of its own (`row<i>`) on day 0."""
    if not per_user:
        return (pd.Series([f"row{i}" for i in range(n)], dtype=object),
                np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64))
    user = fields[0].fillna("").str.strip()
    day_num = pd.to_numeric(fields[1], errors="coerce")
    bad_head = (user == "").to_numpy() | ~(
        day_num.notna() & (day_num.fillna(-1) >= 0) & (day_num.fillna(0) % 1 == 0)
    ).to_numpy()
    return user, bad_head, day_num.fillna(0).astype(np.int64).to_numpy()


def parse_slots(
    content: bytes, path: str, *, per_user: bool, n_locations: int, origin: dt.date
) -> pd.DataFrame:
    """Lines of slot ids -> frame (source, line, record, user_id, date, slots, reason)."""
    lines = split_lines(content, skip=1 if per_user else 0)
    if per_user:
        fields, count = split_fields(lines.text, ",", SLOTS + 2)
        expected = SLOTS + 2
        ids_part = fields.iloc[:, 2:]
    else:
        text = lines.text.str.strip().str.replace(r"\s+", " ", regex=True)
        fields, count = split_fields(text, " ", SLOTS)
        expected = SLOTS
        ids_part = fields
    n = len(fields)
    values = ids_part.apply(pd.to_numeric, errors="coerce").to_numpy(dtype=np.float64)
    if n == 0:
        values = np.zeros((0, SLOTS))
    whole = np.isfinite(values) & (np.mod(values, 1) == 0)
    not_int = ~whole.all(axis=1)
    ids = np.where(whole, values, -1).astype(np.int64)
    unknown = ~not_int & ((ids < 0) | (ids >= n_locations)).any(axis=1)
    user, bad_head, day_idx = _line_heads(fields, n, per_user)
    reason = first_reason(
        n,
        [
            (lines.non_utf8, Reason.NON_UTF8.value),
            (lines.control, Reason.CONTROL_CHARACTER.value),
            (count < expected, Reason.TRUNCATED_LINE.value),
            (count > expected, Reason.UNPARSABLE_LINE.value),
            (bad_head | not_int, Reason.UNPARSABLE_LINE.value),
            (unknown, Reason.UNKNOWN_LOCATION.value),
        ],
    )
    cut = lines.unterminated & reason.notna().to_numpy() & ~lines.non_utf8 & ~lines.control
    reason[cut] = Reason.TRUNCATED_LINE.value
    dates = pd.Timestamp(origin) + pd.to_timedelta(np.clip(day_idx, 0, 100_000), unit="D")
    frame = pd.DataFrame(
        {
            "source": path,
            "line": lines.line,
            "record": lines.text.to_numpy(dtype=object),
            "user_id": user.to_numpy(dtype=object),
            "date": dates.to_numpy(dtype="datetime64[ns]"),
            "slots": list(ids.astype(np.int32)),
            "reason": reason.to_numpy(dtype=object),
        }
    )
    ok = frame["reason"].isna()
    dup = frame[ok].duplicated(["user_id", "date"], keep="first")
    frame.loc[dup[dup].index, "reason"] = Reason.DUPLICATE.value
    return frame


def read_slots(path: Path, gps: Path | None, origin: dt.date) -> tuple[pd.DataFrame, Path]:
    """Read a 48-slot dataset; returns (frame of all records, the location file used)."""
    data, per_user = resolve(path)
    gps = gps if gps is not None else (path if path.is_dir() else path.parent) / "gps"
    if not gps.is_file():
        raise InputDataError(
            f"48-slot data {path}: location file {gps} does not exist (set ingest.locations_path)"
        )
    n_locations = sum(1 for line in gps.read_bytes().splitlines() if line.strip())
    content = data.read_bytes()
    if not content.strip():
        raise InputDataError(f"48-slot data {data} is empty")
    frame = parse_slots(
        content, str(data), per_user=per_user is not None, n_locations=n_locations, origin=origin
    )
    return frame, gps

"""The sections of the input: the synthetic records `datagen` lands and what `ingest` reads."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from jobs.config.types import Finite, LatLonBox, OptionalLatLonBox, Section, check_window


class DatagenConfig(Section):
    """Synthetic Telecom-Shanghai-shaped records (docs/architecture.md section 5)."""

    enabled: bool = True
    users: int = Field(300, ge=1)
    days: int = Field(14, ge=1)
    start_date: dt.date = dt.date(2014, 6, 1)
    n_stations: int = Field(3233, ge=1)
    stations_csv: Path | None = None
    usage_csv: Path | None = None
    active_share: float = Field(0.37, gt=0, le=1)
    partitions: int = Field(8, ge=1)
    # Generator seed; None = the top-level `seed`. Same seed -> identical records.
    seed: int | None = Field(None, ge=0)
    work_share: float = Field(0.8, ge=0, le=1)  # share of users with a work place 2-15 km away
    records_per_day: float = Field(8.5, gt=1, le=200)  # mean records of an active user-day
    # Real station list filter and generated layout bounds: [lat_min, lat_max, lon_min, lon_max].
    station_box: LatLonBox = (30.6, 31.9, 120.8, 122.2)
    layout_box: LatLonBox = (30.7, 31.6, 120.9, 121.95)
    # Landing format of the records: csv (text, like the real data; header, ISO timestamps) or
    # parquet (typed, faster to ingest). Same columns: user, start, end, lat, lon, loc_id.
    output_format: Literal["csv", "parquet"] = "csv"

    @field_validator("start_date")
    @classmethod
    def _datagen_start(cls, value: dt.date) -> dt.date:
        if not dt.date(1971, 1, 1) <= value <= dt.date(2200, 1, 1):
            raise ValueError("start_date must lie between 1971-01-01 and 2200-01-01")
        return value


def format_holds_year(fmt: str | None) -> bool:
    """Whether a strptime format gives the year (None: ISO 8601, which always does); a
    format without one would date every file in strptime's default year, 1900."""
    return fmt is None or re.search(r"%[YyGcx]", fmt.replace("%%", "")) is not None



class IngestConfig(Section):
    """Which raw source to read and how to map and shape it (docs/architecture.md sections 3 and 5).

    `path`/`locations_path` default, for `source: telecom`, to what `trajpriv datagen` lands:
    `<storage.root>/landing/<dataset>/records/` and `.../stations.csv`. Without a location file,
    PLT points map to a grid of `grid_deg` cells (optionally inside `grid_bbox`) and check-ins to
    the locations their own `Location ID`s name. `time_origin` is day 0 of numeric timestamps
    (`ts_unit: minutes`, the CPS data) and of the 48-slot data's day numbers. `order: file` keeps
    each user's records in input order (CPS rows are the path; their minutes are not monotone).
    Trajectories (`jobs.ingest.shaping`): `segment: day` cuts at midnight and after gaps of more
    than `gap_hours`, `gap` only after such gaps (across midnight), `none` only by length; every
    piece holds at most `max_len` stays, and pieces under `min_len` are counted, not kept.
    """

    source: Literal["telecom", "plt", "checkins", "slots48"] = "telecom"
    path: Path | None = None
    locations_path: Path | None = None
    locations_format: Literal["auto", "csv", "gps", "npy"] = "auto"
    max_distance_km: Finite = Field(1.0, gt=0)
    window_start: dt.date | None = None
    window_end: dt.date | None = None
    max_len: int = Field(8, ge=1, le=100_000)
    min_len: int = Field(1, ge=1)
    segment: Literal["day", "gap", "none"] = "day"
    gap_hours: Finite = Field(3.0, gt=0, le=24 * 366 * 10)
    ts_unit: Literal["datetime", "minutes", "seconds", "milliseconds"] = "datetime"
    ts_format: str | None = None  # strptime format of the text timestamps (None: ISO 8601)
    utc_offsets: Literal["local", "utc"] = "local"  # `+08:00`: keep the wall time, or to UTC
    # Delimited text layout (telecom and check-in sources): separator, header line or the
    # column names in file order, text encoding.
    sep: str = ","
    header: bool = True
    columns: list[str] | None = None
    encoding: str = "utf-8"
    quoting: Literal["none", "csv"] = "none"  # csv: `"a, b"` is one field, `""` a quote
    # Clock-time exports: `date_from` is a regex on the file name whose group `date` (else
    # first group) is the day of every record in the file; the timestamps are then times of
    # day in `ts_format` ('%H.%M') or `ts_unit` counts from that midnight. `date_format`:
    # strptime of the captured date (None: ISO 8601, 2014-06-01 or 20140601).
    date_from: str | None = None
    date_format: str | None = None
    # The year of file-name dates whose `date_format` holds none ('%m_%d'); without it the
    # year is the window's when window_start and window_end lie in one year, else refused.
    date_year: int | None = Field(None, ge=1678, le=2261)
    # Which files of an input folder are records: `include` globs (default: the source's
    # suffixes) less `exclude` globs, on the path below `path` or the file name.
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    time_origin: dt.datetime = dt.datetime(2000, 1, 1)
    order: Literal["time", "file"] = "time"
    grid_deg: Finite = Field(0.01, gt=0, le=10)
    grid_bbox: OptionalLatLonBox = None
    # A location set built on the fly for sources without one: cells of about grid_km x
    # grid_km km over grid_bbox (required: a public box, never the data's extremes).
    grid_km: float | None = Field(None, gt=0, le=1000)
    buckets: int = Field(8, ge=1, le=4096)

    def file_date_year(self) -> int | None:
        """The year of the file-name dates when `date_format` holds none: `date_year`, else the
        window's one year; None when the format gives the year. ValueError (the fix named)
        when neither is set, or when date_year would override a year the format gives."""
        if format_holds_year(self.date_format):
            if self.date_year is not None:
                raise ValueError(
                    f"date_year {self.date_year} and a date_format "
                    f"{self.date_format or 'ISO 8601'!r} that holds the year: the year would "
                    "come from two places; remove date_year")
            return None
        if self.date_year is not None:
            return self.date_year
        start, end = self.window_start, self.window_end
        if start is not None and end is not None and start.year == end.year:
            return start.year
        raise ValueError(
            f"date_format {self.date_format!r} holds no year, so every file's date would fall "
            "in 1900: set ingest.date_year (e.g. date_year: 2014), or window_start and "
            "window_end within one year, or a date_format with %Y")

    @field_validator("date_from")
    @classmethod
    def _date_from(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {value!r}") from None
        return value

    @field_validator("sep")
    @classmethod
    def _sep(cls, value: str) -> str:
        value = {"tab": "\t", "\\t": "\t"}.get(value, value)
        if len(value) != 1 or value in "\r\n\"'" or value.isalnum():
            raise ValueError(f"must be one separator character (',', ';', '|', tab), got {value!r}")
        return value

    @field_validator("ts_format")
    @classmethod
    def _ts_format(cls, value: str | None) -> str | None:
        if value is not None and "%" not in value:
            raise ValueError(f"expected a strptime format such as '%d/%m/%Y %H:%M', got {value!r}")
        return value

    @field_validator("encoding")
    @classmethod
    def _encoding(cls, value: str) -> str:
        import codecs

        try:
            return codecs.lookup(value).name
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, utf-16, latin-1, "
                             "gb18030)") from None

    @model_validator(mode="after")
    def _consistent(self) -> IngestConfig:
        check_window(self.window_start, self.window_end)
        if not self.header and not self.columns:
            raise ValueError("header: false needs columns: the field names in file order")
        if self.header and self.columns:
            raise ValueError("columns: is for files without a header line; set header: false")
        if self.min_len > self.max_len:
            raise ValueError(
                f"min_len {self.min_len} is above max_len {self.max_len}: no piece could be kept"
            )
        if self.date_from is not None and self.ts_unit == "datetime":
            if not self.ts_format:
                raise ValueError("date_from needs ts_format, the clock time of a record "
                                 "(e.g. '%H.%M' or '%H:%M:%S'), or a numeric ts_unit")
            dated = re.findall(r"%[YymdjbBcxUWGV]", self.ts_format)
            if dated:
                raise ValueError(f"with date_from the day comes from the file name: ts_format "
                                 f"{self.ts_format!r} may hold the time of day only, not {dated}")
        if self.date_from is not None:
            self.file_date_year()  # a date_format without a year needs one from the config
        elif self.date_year is not None:
            raise ValueError("date_year is the year of the dates ingest.date_from takes from "
                             "file names: set date_from, or remove date_year")
        if self.grid_km is not None and self.grid_bbox is None:
            raise ValueError("grid_km needs grid_bbox [lat_min, lat_max, lon_min, lon_max]: a "
                             "public box (a box taken from the data would publish its extremes)")
        if self.grid_bbox is None and self.grid_deg < 0.01:
            raise ValueError(
                f"grid_deg {self.grid_deg} < 0.01 needs a grid_bbox (global cell ids would "
                "overflow 32-bit location ids)"
            )
        return self

"""Pipeline configuration: pydantic models loaded from `conf/*.yaml`, overridable on the CLI.

Why pydantic with `extra="forbid"` everywhere: a misspelt key in a 9,481-user run must fail at
start, naming the key, not after an hour of Spark work with the default silently used.

Overrides use dotted paths, `--set study.epsilons=[1,4]`; the value is parsed as YAML so lists,
numbers and booleans need no extra syntax.

`storage.root` never depends on the working directory (`resolve_root`): a relative root resolves
against the folder of the config file (conf/default.yaml says `../data`: the checkout's data/),
whether the file or a `--set` gave it. A config that is not a file of yours (the built-in
defaults of `load_config(None)`, or the packaged copy of conf/ inside the wheel) resolves against
`$TRAJPRIV_HOME/conf` (TRAJPRIV_HOME: an absolute folder holding conf/ and data/), else the
checkout's conf/. Other relative paths of a config (ingest.path, ...) are resolved against the
directory the command runs from (the repository root for `make run`).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from udfs.budget import MAX_CONFIG_EPSILON, valid_epsilon
from udfs.collect import MECHANISMS, PUBLISHED_MECHANISMS
from udfs.collect_kernel import PUBLISH_CHOICES, PublishOptions
from udfs.errors import ConfigError

#: The pipeline's stages in order, each a package `jobs.<stage>` (`trajpriv <stage>`).
STAGES = ("datagen", "ingest", "study", "collect", "train", "synthesize", "evaluate", "report")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StorageConfig(_Section):
    """Where every table, landing file, model artefact and report lives. `load_config` makes
    `root` absolute (`resolve_root`); a relative default means data/ beside conf/."""

    root: Path = Path("../data")
    # seconds a job waits for another process to release the embedded Derby metastore of this
    # root (one JVM at a time) before it fails saying which process holds it
    metastore_wait_s: float = Field(60.0, ge=0)
    # a stage refuses to start on a disk with less free space than this (MiB)
    min_free_mb: float = Field(256.0, ge=0)

    @property
    def warehouse(self) -> Path:
        return self.root.resolve() / "warehouse"

    @property
    def metastore(self) -> Path:
        return self.root.resolve() / "metastore_db"

    @property
    def landing(self) -> Path:
        return self.root.resolve() / "landing"

    @property
    def runs_dir(self) -> Path:
        return self.root.resolve() / "runs"

    @property
    def secrets(self) -> Path:
        """Keys (pseudonym key, run seeds) kept inside the raw zone's reach, mode 0700."""
        return self.root.resolve() / "secrets"


class CatalogConfig(_Section):
    """Where the Hive metastore lives. `embedded` (default): Derby under `storage.root`, one
    Spark process at a time. `postgres`: a PostgreSQL database (`postgres_url`, one database per
    data root), so `trajpriv sql` and other Spark sessions read while a stage writes; stages on
    one root still run one at a time (the ledger's plan-then-charge must not race).
    `postgres_password_env` names the environment variable holding the password (never the
    password itself in a config); `jdbc_jar` is the PostgreSQL JDBC driver Spark loads."""

    metastore: Literal["embedded", "postgres"] = "embedded"
    postgres_url: str = "jdbc:postgresql://127.0.0.1:5433/trajpriv_metastore"
    postgres_user: str = "postgres"
    postgres_password_env: str | None = None
    jdbc_jar: Path = Path("/usr/share/java/postgresql.jar")
    # The database role of analysts' sessions and the endpoints (`trajpriv serve`): it reads the
    # metastore and sees the published database only (`python -m jobs.spark.metastore_pg
    # analyst` creates it); its password, if any, in the environment variable named here.
    analyst_user: str = "trajpriv_analyst"
    analyst_password_env: str | None = None

    @field_validator("postgres_url")
    @classmethod
    def _jdbc(cls, value: str) -> str:
        if not value.startswith("jdbc:postgresql://"):
            raise ValueError("must be a PostgreSQL JDBC URL: jdbc:postgresql://host:port/db")
        return value


class SparkConfig(_Section):
    """Spark master and any `spark.*` setting; local[2] on a laptop, a cluster URL in production."""

    master: str = "local[2]"
    app_name: str = "trajpriv"
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _only_spark_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if not k.startswith("spark.")]
        if bad:
            raise ValueError(f"only spark.* settings belong here, got {bad}")
        return {k: str(v) for k, v in value.items()}


class DatagenConfig(_Section):
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
    station_box: tuple[float, float, float, float] = (30.6, 31.9, 120.8, 122.2)
    layout_box: tuple[float, float, float, float] = (30.7, 31.6, 120.9, 121.95)
    # Landing format of the records: csv (text, like the real data; header, ISO timestamps) or
    # parquet (typed, faster to ingest). Same columns: user, start, end, lat, lon, loc_id.
    output_format: Literal["csv", "parquet"] = "csv"

    @field_validator("station_box", "layout_box")
    @classmethod
    def _datagen_box(cls, value: tuple[float, float, float, float]):
        lat0, lat1, lon0, lon1 = value
        if not (-90 <= lat0 < lat1 <= 90 and -180 <= lon0 < lon1 <= 180):
            raise ValueError("expected [lat_min, lat_max, lon_min, lon_max] with min < max")
        return value

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


class IngestConfig(_Section):
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
    max_distance_km: float = Field(1.0, gt=0)
    window_start: dt.date | None = None
    window_end: dt.date | None = None
    max_len: int = Field(8, ge=1, le=100_000)
    min_len: int = Field(1, ge=1)
    segment: Literal["day", "gap", "none"] = "day"
    gap_hours: float = Field(3.0, gt=0, le=24 * 366 * 10)
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
    grid_deg: float = Field(0.01, gt=0, le=10)
    grid_bbox: tuple[float, float, float, float] | None = None
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
        import re

        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc}): {value!r}") from None
        return value

    @field_validator("max_distance_km", "gap_hours", "grid_deg")
    @classmethod
    def _finite(cls, value: float) -> float:
        import math

        if not math.isfinite(value):
            raise ValueError(f"must be finite, got {value}")
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

    @field_validator("grid_bbox")
    @classmethod
    def _box(cls, value: tuple[float, float, float, float] | None):
        if value is not None:
            lat0, lat1, lon0, lon1 = value
            if not (-90 <= lat0 < lat1 <= 90 and -180 <= lon0 < lon1 <= 180):
                raise ValueError("expected [lat_min, lat_max, lon_min, lon_max] with min < max")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> IngestConfig:
        if self.window_start and self.window_end and self.window_end < self.window_start:
            raise ValueError(
                f"window_end {self.window_end} is before window_start {self.window_start}"
            )
        if not self.header and not self.columns:
            raise ValueError("header: false needs columns: the field names in file order")
        if self.header and self.columns:
            raise ValueError("columns: is for files without a header line; set header: false")
        if self.min_len > self.max_len:
            raise ValueError(
                f"min_len {self.min_len} is above max_len {self.max_len}: no piece could be kept"
            )
        if self.date_from is not None and self.ts_unit == "datetime":
            import re

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


# The names come from the one mechanism registry (`udfs.collect`).
Mechanism = Literal[MECHANISMS]  # type: ignore[valid-type]
PublishedMechanism = Literal[PUBLISHED_MECHANISMS]  # type: ignore[valid-type]


def _finite_positive_epsilon(eps: float) -> float:
    if not valid_epsilon(eps, at_most=MAX_CONFIG_EPSILON):
        raise ValueError(f"each epsilon must be finite and in (0, {MAX_CONFIG_EPSILON:g}], "
                         f"got {eps}")
    return eps


class PrivacyConfig(_Section):
    """The one privacy unit and budget every release charges (docs/architecture.md section 4).

    `unit: user`: neighbouring datasets differ in one user's data. A user may spend at most
    `budget` (epsilon) per window of `window_days` days, summed over every collection release
    of the user's trajectories dated in that window (sequential composition); training records
    its (epsilon, delta) per trained user in the same ledger (`trajpriv budget` shows totals).
    The default, 10 per 7 days, is a budget a data protection officer can sign.
    """

    unit: Literal["user"] = "user"
    budget: float = Field(10.0, gt=0)
    window_days: int = Field(7, ge=1)

    @field_validator("budget")
    @classmethod
    def _finite_budget(cls, value: float) -> float:
        import math

        if not math.isfinite(value):
            raise ValueError(f"must be finite (an infinite budget refuses nobody), got {value}")
        return value


class PublishConfig(_Section):
    """What a published row reveals beyond the LDP guarantee, and settings that reduce it.

    `date`: the trajectory's day (`day`), the Monday of its week (`week`) or nothing (`none`).
    `traj_key`: `stable` (one key per trajectory whatever the release: a --fresh release links
    to the earlier one) or `per_release` (a new key in every release). `pseudonym`: `stable`
    (one per user: every release of a user links), `per_window` (rotated every budget window:
    links only within a window) or `none` (no user column: rows of a user cannot be grouped).
    """

    # Choices and defaults are the release kernel's (`udfs.collect_kernel.PublishOptions`).
    date: Literal[PUBLISH_CHOICES["date"]] = PublishOptions.date  # type: ignore[valid-type]
    traj_key: Literal[PUBLISH_CHOICES["traj_key"]] = (  # type: ignore[valid-type]
        PublishOptions.traj_key)
    pseudonym: Literal[PUBLISH_CHOICES["pseudonym"]] = (  # type: ignore[valid-type]
        PublishOptions.pseudonym)
    # The OS group of analysts: with one set, the published zone's folders and files are
    # group-readable (0750/0640) and everything else under the root stays its owner's only.
    group: str | None = None


class CollectConfig(_Section):
    """The published LDP collection: one mechanism at one epsilon (docs/architecture.md section 4).

    Each trajectory dated in the collection window (`window_start`..`window_end`, inclusive;
    None = unbounded; the DAG passes its data interval) is released once under this setting,
    charged `epsilon` to its user's budget (`privacy:`); a trajectory already released under
    the same setting is skipped (spends nothing) unless `trajpriv collect --fresh`. Choosing
    the setting is a study's job (`study:`), whose output stays in the trusted zone.
    """

    mechanism: PublishedMechanism = "atp"
    epsilon: float = 2.5
    granularity: Literal["auto", 2, 4, 6, 12] = "auto"
    r_dir: float = Field(0.75, gt=0, lt=1)
    window_start: dt.date | None = None
    window_end: dt.date | None = None
    calibrated: bool = True  # ATP radius calibration (post-processing either way)
    # How TP/ATP join their two copies (post-processing either way; `udfs.tp.combine`):
    # medoid (the default; bench/reproduce_ldp.py compares them), copy_medoid, paper (Eq. 7 as
    # written) or midpoint.
    combiner: Literal["medoid", "copy_medoid", "paper", "midpoint"] = "medoid"
    max_len: int | None = Field(None, ge=1)  # refuse longer trajectories (None: no limit)

    @field_validator("epsilon")
    @classmethod
    def _epsilon(cls, value: float) -> float:
        return _finite_positive_epsilon(value)

    @model_validator(mode="after")
    def _window_ordered(self) -> CollectConfig:
        if self.window_start and self.window_end and self.window_end < self.window_start:
            raise ValueError(
                f"window_end {self.window_end} is before window_start {self.window_start}"
            )
        return self

    def window_text(self) -> str:
        """The collection window in words, as a log line says it ('all dates' when unset)."""
        start, end = self.window_start, self.window_end
        if start is None and end is None:
            return "all dates"
        if end is None:
            return f"from {start}"
        return f"{start} to {end}" if start is not None else f"up to {end}"


class StudyConfig(_Section):
    """A sweep of settings to choose the published one, run in the trusted zone (`trajpriv
    study`). Its perturbed data and raw-based utility figures (NE, PRQ, ACD, Kendall tau)
    land in `trajpriv_trusted.*`, never in `trajpriv_pub`, and it charges no budget: nothing
    of it is released. `max_trajectories` caps the sample it perturbs (None: every
    trajectory of the collection window)."""

    enabled: bool = True
    mechanisms: list[Mechanism] = Field(default_factory=lambda: ["atp", "tp", "exp", "uniform"])
    epsilons: list[float] = Field(default_factory=lambda: [1.0, 4.0, 10.0])
    prq_km: list[float] = Field(default_factory=lambda: [0.5, 1.0, 2.0])
    acd_top_fraction: float = Field(0.1, gt=0, le=1)
    max_trajectories: int | None = Field(None, ge=1)
    # The synthesis study: each method trained on the training split at train.target_epsilon,
    # its days scored against the held-out days (trusted zone; nothing released or charged).
    # [] turns it off. `synthesis_seeds` trainings per method (mean and spread);
    # `synthesis_max_users` caps the training users (a keyed-hash sample; None: all).
    # names of jobs.methods' registry (built in: markov, markov2, pategail, pategail++, ldp,
    # ldp++)
    synthesis_methods: list[str] = Field(
        default_factory=lambda: ["markov", "markov2", "pategail", "pategail++"])
    synthesis_seeds: int = Field(1, ge=1, le=20)
    synthesis_max_users: int | None = Field(2000, ge=2)

    @field_validator("synthesis_methods")
    @classmethod
    def _registered(cls, value: list[str]) -> list[str]:
        from jobs.methods import check

        return [check(name) for name in value]

    @field_validator("prq_km")
    @classmethod
    def _prq_positive(cls, value: list[float]) -> list[float]:
        import math

        bad = [v for v in value if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"each PRQ radius must be finite and > 0 km, got {bad}")
        return value

    @field_validator("epsilons")
    @classmethod
    def _epsilons(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("at least one epsilon is needed")
        return [_finite_positive_epsilon(v) for v in value]

    @model_validator(mode="after")
    def _unique(self) -> StudyConfig:
        if len(set(self.mechanisms)) != len(self.mechanisms):
            raise ValueError(f"mechanisms has duplicates: {self.mechanisms}")
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"epsilons has duplicates: {self.epsilons}")
        if len(set(self.synthesis_methods)) != len(self.synthesis_methods):
            raise ValueError(f"synthesis_methods has duplicates: {self.synthesis_methods}")
        return self


def _core_train_fields() -> dict[str, Any]:
    """The fields of `models.config.TrainConfig` as pydantic fields (type, default), so the
    `train` section holds every model setting typed, with the core's default: one home for
    each default, no free-form dict. The section declares a few itself (below)."""
    import dataclasses
    import typing

    from models.config import TrainConfig as CoreTrainConfig

    hints = typing.get_type_hints(CoreTrainConfig)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(CoreTrainConfig)
            if f.name not in _TRAIN_OWN}


# Core fields the `train` section declares itself: a user-facing name (method <- scheme, critic
# <- critic_kind), the product's default where it differs from the core's (rounds, target
# epsilon), or a different meaning (seed: unset = derived from the run key). The Markov
# release's settings of private pre-training come from the `train.markov` section (one home for
# them, shared with method `markov`): `_TRAIN_MARKOV`.
_TRAIN_MARKOV = {"markov_mechanism": "mechanism", "markov_cell_depth": "cell_depth",
                 "markov_tau": "tau", "markov_smooth": "smooth"}
_TRAIN_OWN = {"scheme", "critic_kind", "rounds", "target_epsilon", "seed", *_TRAIN_MARKOV}
_TRAIN_RENAMED = {"method": "scheme", "critic": "critic_kind"}

_TrainModelFields = create_model("_TrainModelFields", __base__=_Section, **_core_train_fields())


class MarkovSettings(_Section):
    """The DP Markov model's release (`models.markov`; method `markov`, and the Markov release
    that private pre-training starts from): the noise (`gaussian`, Gaussian per release composed
    under the accountant; `laplace`, pure epsilon), the k-d depth of the public move cells, the
    soft threshold of the hierarchies and transition rows (in noise sds) and the pooling of the
    action table over neighbouring slots. All are utility choices: the guarantee holds for any."""

    mechanism: Literal["gaussian", "laplace"] = "gaussian"
    cell_depth: int = Field(5, ge=1, le=16)
    tau: float = Field(2.0, ge=0, allow_inf_nan=False)
    smooth: int = Field(1, ge=0, le=46)


class Markov2Settings(_Section):
    """What the adaptive second-order DP Markov model (`models.markov2`; method `markov2`, study
    and bench only) adds to `train.markov`'s settings: the second-order table's share of the
    budget (the first-order releases keep theirs times 1 - share) and the threshold, in sds of
    a row's noisy total, above which a move uses its (cell before, current cell) row instead of
    the first-order one. Utility choices: the guarantee holds for any."""

    # the second-order release's share of the budget (0.2: 12% more noise sd on the others)
    second_share: float = Field(0.2, gt=0, lt=1)
    # a row is used where its noisy total exceeds this many of its noise sds (3: a row of pure
    # noise passes with probability 0.00135)
    threshold: float = Field(3.0, ge=0, allow_inf_nan=False)


class TrainConfig(_TrainModelFields):
    """PateGAIL / PateGAIL++ training on Spark (docs/architecture.md section 6).

    Every field of `models.config.TrainConfig` is a typed field here (episodes_per_round,
    critic_hidden, beta, ...; the core's docs and defaults), validated by the core's own checks
    at load; `model_config_of` hands the core its typed config. `blocks` cuts each round's
    episodes into equal blocks with their own random streams: results do not depend on
    `num_processes` as long as `blocks` stays the same (it must be a multiple of num_processes
    and divide episodes_per_round).
    """

    enabled: bool = True
    # pategail (uniform Laplace) by default: the sensitivity-aware pategail++ has not measured
    # better at equal epsilon (README, training section)
    # markov: the DP Markov chain (models/markov.py), one release of normalised per-user counts
    # a name of jobs.methods' registry (built in: markov, pategail, pategail++, ldp, ldp++; the
    # study's markov2 is not published)
    method: str = "pategail"
    markov: MarkovSettings = Field(default_factory=MarkovSettings)
    markov2: Markov2Settings = Field(default_factory=Markov2Settings)
    # true: the noise is calibrated at run time so that all `rounds` fit `target_epsilon` for
    # the users trained (the run's log says the noise); false: `noise` as set, and a run whose
    # rounds do not all fit says before it starts after which round it will stop
    noise_for_target: bool = False
    # critic per user: bce (cross-entropy discriminator, PateGAIL's) or wgan (WGAN-GP,
    # PateGAIL++'s); unset: the method's paper
    critic: Literal["bce", "wgan"] | None = None
    target_epsilon: float = Field(10.0, gt=0)
    rounds: int = Field(20, ge=1)
    # the training seed; unset: derived by HMAC from the raw zone's run key, the dataset and the
    # top-level seed (jobs.train.stage.training_seed)
    seed: int | None = None
    num_processes: int = Field(1, ge=1)
    use_gpu: bool = False  # NCCL, one GPU per rank (cuda:LOCAL_RANK); checked at start
    holdout_fraction: float = Field(0.3, gt=0, lt=1)
    blocks: int = Field(4, ge=1)
    # TorchDistributor local_mode: true = torchrun on the driver host; false = one barrier Spark
    # task per rank (needs num_processes free task slots, checked at start on a local master)
    local_mode: bool = True
    timeout_s: float = Field(1800.0, gt=0)  # collective timeout of the process group

    @field_validator("method")
    @classmethod
    def _registered(cls, value: str) -> str:
        from jobs.methods import check_trainable

        return check_trainable(value)

    @field_validator("target_epsilon", "timeout_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        import math

        if not math.isfinite(value):
            raise ValueError(f"must be finite, got {value}")
        return value

    @model_validator(mode="after")
    def _core_checks(self) -> TrainConfig:
        """The core's own validation (one home for the rules), and the block layout. The
        Markov method trains no policy: the learned methods' settings do not apply to it."""
        if not self.learned:
            return self
        mc = self.model_config_of(seed=0)
        if mc.episodes_per_round % self.blocks or self.blocks % self.num_processes:
            raise ValueError(f"blocks={self.blocks} must divide episodes_per_round "
                             f"({mc.episodes_per_round}) and be a multiple of num_processes "
                             f"({self.num_processes})")
        return self

    @property
    def learned(self) -> bool:
        """A policy trained by imitation learning (TorchDistributor ranks), not a Markov fit."""
        from jobs.methods import get

        return get(self.method).learned

    def model_config_of(self, seed: int, method: str | None = None):
        """The core's typed `models.config.TrainConfig` of this section, with `seed`; `method`
        (a learned one) in place of `train.method` (the synthesis study trains several)."""
        method = method or self.method
        from jobs.methods import get

        if not get(method).learned:
            raise ConfigError(f"train.method={method} trains no policy: it has no core "
                              "training config")
        from models.config import TrainConfig as CoreTrainConfig

        values = {name: getattr(self, name) for name in _core_train_fields()}
        values.update({core: getattr(self, own) for own, core in _TRAIN_RENAMED.items()})
        values.update({core: getattr(self.markov, own) for core, own in _TRAIN_MARKOV.items()})
        if method != self.method:  # another method's paper critic, unless one is set
            values.update(scheme=method, critic_kind=self.critic)
        values.update(rounds=self.rounds, target_epsilon=self.target_epsilon, seed=seed)
        try:
            return CoreTrainConfig(**values)
        except ConfigError as exc:  # the core names its field; say it as the config key
            raise ValueError(re.sub(r"^train config field '(\w+)'=", r"train.\1=", str(exc))
                             ) from None


class SynthesizeConfig(_Section):
    enabled: bool = True
    n_days: int = Field(500, ge=1)
    partitions: int = Field(4, ge=1)


class EvaluateConfig(_Section):
    """`attacks` (or `trajpriv evaluate --attacks`) runs `attack_kinds` on the dataset's latest
    results: home re-identification on the published points; white-box MIA and LiRA against the
    train run(s) whose synthetic days are evaluated, with that run's training days as members
    and held-out days of the same users as non-members. `attack_users`: at most this many users
    (sampled by pseudonym) are attacked; `lira_shadows`: shadow models trained with the run's
    recipe (each costs about one in-process training on those users' days);
    `attack_bootstrap`: bootstrap replicates of every confidence interval."""

    mode: Literal["paper", "geo"] = "geo"
    attacks: bool = False
    attack_kinds: list[Literal["home", "whitebox", "lira"]] = Field(
        default_factory=lambda: ["home", "whitebox", "lira"])
    attack_users: int = Field(300, ge=2)
    lira_shadows: int = Field(4, ge=2, le=256)
    attack_bootstrap: int = Field(500, ge=20, le=100_000)

    @field_validator("attack_kinds")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError(f"name each of home, whitebox, lira at most once, at least one; got "
                             f"{value}")
        return value


class ReportConfig(_Section):
    output: Path | None = None


class ServeConfig(_Section):
    """The analysts' endpoints of `trajpriv serve` over the published zone: Spark's Thrift
    JDBC/ODBC server (HiveServer2 protocol) on `host:port` and Spark Connect on
    `host:connect_port`. `auth` is HiveServer2's `hive.server2.authentication` (NONE: a user
    name, no password; LDAP, KERBEROS or CUSTOM with their settings in `hiveconf`).
    `query_timeout_s`: a query running longer is cancelled (its error names this setting);
    `max_result_mb`: the most a query's collected result may hold on the driver
    (spark.driver.maxResultSize); `scratch`: the endpoints' own writable folder (logs, Hive
    scratch, pid file), 0700, default `/tmp/trajpriv-<uid>`."""

    host: str = "localhost"
    port: int = Field(10000, ge=1, le=65535)
    connect_port: int = Field(15002, ge=1, le=65535)
    auth: Literal["NONE", "NOSASL", "LDAP", "KERBEROS", "CUSTOM"] = "NONE"
    hiveconf: dict[str, str] = Field(default_factory=dict)
    query_timeout_s: int = Field(900, ge=1)
    max_result_mb: int = Field(256, ge=1)
    scratch: Path | None = None


class Config(_Section):
    """The whole pipeline. `dataset` names the rows every stage reads and writes."""

    dataset: str = "synthetic"  # the rows' name in every table (a partition): one per source
    # every draw of every stage derives from it (keyed per stage, setting and user); >= 0
    seed: int = Field(20260601, ge=0)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    datagen: DatagenConfig = Field(default_factory=DatagenConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    study: StudyConfig = Field(default_factory=StudyConfig)
    collect: CollectConfig = Field(default_factory=CollectConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    synthesize: SynthesizeConfig = Field(default_factory=SynthesizeConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    report: ReportConfig = Field(default_factory=ReportConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)

    @field_validator("dataset")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", value):
            raise ValueError("use 1-64 letters, digits, '_' or '-'")
        return value

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    if parts[:2] == ["spark", "conf"] and len(parts) > 2:  # spark.* keys contain dots themselves
        parts = ["spark", "conf", ".".join(parts[2:])]
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", parsed YAML value). Raises ConfigError naming the bad override."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*|\.spark\.[\w.]+)*", key):
        raise ConfigError(f"--set {text!r}: expected key.path=value, e.g. study.epsilons=[1,4]")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc})") from None
    return key, value


def _format_validation(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = "unknown key (not allowed here)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {key}: {msg}")
    return f"invalid configuration ({source}):\n" + "\n".join(lines)


def config_from_mapping(tree: dict[str, Any], source: str = "<mapping>") -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, source)) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader refusing a key given twice in one mapping: plain YAML keeps the last,
    so a second `ingest:` section would silently drop every key of the first."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key {key!r} appears twice (lines {seen[key]} and "
                    f"{key_node.start_mark.line + 1}); merge the two into one",
                    key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


#: An absolute folder holding conf/ and data/ (a checkout or an unpacked release): the base of a
#: relative storage.root for configs that are not a file of yours (packaged ones, the defaults).
HOME_ENV = "TRAJPRIV_HOME"
#: conf/ of a source checkout (absent in an installed wheel, where the configs are `jobs.conf`).
_CHECKOUT_CONF = Path(__file__).resolve().parents[1] / "conf"
#: Where an installed wheel keeps its copy of conf/ (absent in a checkout).
_PACKAGED_CONF = Path(__file__).resolve().parent / "conf"


def packaged_config(name: str = "default") -> Traversable:
    """conf/<name>.yaml as shipped: the checkout's file when running from one, else the wheel's
    copy (package data `jobs.conf`, readable even from a `--py-files` zip). The default of
    `--config`: unlike a relative "conf/default.yaml", it does not depend on the working
    directory."""
    if (_CHECKOUT_CONF / f"{name}.yaml").is_file():
        return _CHECKOUT_CONF / f"{name}.yaml"
    return resources.files("jobs").joinpath("conf", f"{name}.yaml")


def _default_conf_dir(source: str) -> Path:
    """The folder a config that is not a file of yours stands in: $TRAJPRIV_HOME/conf, else the
    checkout's conf/; ConfigError when neither exists (an installed wheel without TRAJPRIV_HOME)."""
    home = os.environ.get(HOME_ENV, "")
    if home:
        folder = Path(home).expanduser()
        if not folder.is_absolute():
            raise ConfigError(f"{HOME_ENV}={home!r} is a relative path: set it to an absolute "
                              "folder (storage.root's relative default is $TRAJPRIV_HOME/data)")
        return folder / "conf"
    if _CHECKOUT_CONF.is_dir():
        return _CHECKOUT_CONF
    raise ConfigError(f"{source}: storage.root is relative and there is no config folder to "
                      f"resolve it against: set storage.root to an absolute folder (--set "
                      f"storage.root=/data/trajpriv), pass --config FILE, or export "
                      f"{HOME_ENV}=<absolute folder> (data then goes to $TRAJPRIV_HOME/data)")


def resolve_root(root: Path, config_dir: Path) -> Path:
    """`root` made absolute: `~` expanded, a relative root joined to `config_dir` (the config
    file's folder), never to the working directory, so every command on one config opens the
    same catalog wherever it runs from."""
    root = root.expanduser()
    if root.is_absolute():
        return root
    return Path(os.path.normpath(config_dir / root))


def _is_packaged(file: Traversable) -> bool:
    if not isinstance(file, Path):
        return True  # inside a zip (--py-files): only the wheel's own copy can be there
    return file.resolve().is_relative_to(_PACKAGED_CONF)


def load_config(
    path: str | os.PathLike[str] | Traversable | None, overrides: list[str] | None = None
) -> Config:
    """Load a YAML config, apply `key.path=value` overrides, validate; ConfigError if wrong.

    `path`: a config file, a `packaged_config()`, or None for the built-in defaults. The root
    comes back absolute (`resolve_root`)."""
    tree: dict[str, Any] = {}
    source = "defaults"
    config_dir: Path | None = None
    if path is not None:
        file = path if isinstance(path, Traversable) else Path(path)
        source = str(file)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        if not _is_packaged(file):
            config_dir = Path(os.path.abspath(file)).parent
        try:
            loaded = yaml.load(file.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {file} is not valid YAML: {exc}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file}: top level must be a mapping of sections")
        tree = loaded
    for text in overrides or []:
        key, value = parse_override(text)
        _set_dotted(tree, key, value)
    if overrides:
        source += " with --set " + " ".join(overrides)
    cfg = config_from_mapping(tree, source)
    root = cfg.storage.root.expanduser()
    if not root.is_absolute():
        root = resolve_root(root, config_dir or _default_conf_dir(source))
    return cfg.model_copy(update={"storage": cfg.storage.model_copy(update={"root": root})})

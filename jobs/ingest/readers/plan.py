"""Plan an ingestion in the driver: resolve and check the inputs, load the location set.

Why apart from the Spark job: everything that can be wrong with the input (a missing path, an
empty folder, a header without a needed column, a corrupt Parquet file, no location file) is
found here, before any Spark work, and ends the job with an InputDataError that names the file
and why. The job (`jobs.ingest.stage`) only starts once the plan holds. No pyspark.
"""

from __future__ import annotations

import fnmatch
import gzip
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from jobs.config import Config
from jobs.config.data import IngestConfig
from jobs.ingest.locmap import Grid, Locations, LocationSet, km_grid, load_locations
from jobs.ingest.readers import npy, slots48, telecom
from jobs.ingest.readers.delimited import file_date, resolve_header
from jobs.ingest.readers.pipeline import ReaderOptions
from jobs.ingest.readers.sources import PARQUET_SOURCES, SOURCES, RecordSource
from udfs.errors import InputDataError


@dataclass
class InputPlan:
    """Everything the Spark part needs, checked in the driver before any Spark work."""

    kind: str  # text | parquet | slots48
    files: list[str]
    headers: dict[str, str] = field(default_factory=dict)
    locations: Locations | None = None  # None: derive from the records (check-ins)
    opts: ReaderOptions = field(default_factory=ReaderOptions)
    where: str = ""


reader_options = ReaderOptions.from_config


def input_paths(cfg: Config) -> tuple[Path, Path | None]:
    """(input path, location file) with the telecom landing defaults filled in."""
    icfg = cfg.ingest
    landing = cfg.storage.landing / cfg.dataset
    path = icfg.path if icfg.path is not None else None
    locs = icfg.locations_path
    if SOURCES[icfg.source].lands:
        path = path or landing / "records"
        if locs is None and icfg.grid_km is None and (landing / "stations.csv").is_file():
            locs = landing / "stations.csv"
    if path is None:
        raise InputDataError(f"ingest.path is not set: source {icfg.source!r} needs an input path")
    return Path(path), (Path(locs) if locs is not None else None)


def _list_files(path: Path, suffixes: tuple[str, ...], include: list[str] | None = None,
                exclude: list[str] | None = None) -> list[Path]:
    """The input files under `path`: hidden and `_` files never; then the `include` globs
    (default: the source's suffixes) less the `exclude` globs, matched against the file's
    path relative to `path` and against its name (`README*` drops a README.txt anywhere)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputDataError(f"input path {path} does not exist")

    def matches(p: Path, globs: list[str]) -> bool:
        rel = p.relative_to(path).as_posix()
        return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(p.name, g) for g in globs)

    return sorted(
        p
        for p in path.rglob("*")
        if p.is_file()
        and not p.name.startswith((".", "_"))
        and (matches(p, include) if include else p.name.lower().endswith(suffixes))
        and not (exclude and matches(p, exclude))
    )


def plan_inputs(cfg: Config) -> InputPlan:
    """Resolve and check the inputs in the driver (InputDataError with file and reason)."""
    icfg = cfg.ingest
    source = SOURCES[icfg.source]
    path, locs = input_paths(cfg)
    opts = reader_options(icfg)
    if source.reader == "slots48":
        data, _ = slots48.resolve(path)
        return InputPlan("slots48", [str(data)], opts=opts, where=str(path))
    files = _list_files(path, source.suffixes, icfg.include, icfg.exclude)
    if not files:
        raise InputDataError(f"input path {path} holds no {source.want}")
    if all(f.stat().st_size == 0 for f in files):
        raise InputDataError(f"input {path} is empty: {len(files)} file(s), all of 0 bytes")
    files = [f for f in files if f.stat().st_size > 0]
    locations = _plan_locations(cfg, source, path, locs)
    _check_arrays(files, locations, opts, path)
    parquet = _check_parquet(files, source, icfg, path)
    plan = InputPlan(
        "parquet" if parquet else "text",
        [str(f) for f in files],
        locations=locations,
        opts=opts,
        where=str(path),
    )
    if plan.kind == "text" and source.spec is not None and not npy.is_npy(files[0]):
        _check_text_heads(plan, files, opts, path)
    return plan


def _plan_locations(cfg: Config, source: RecordSource, path: Path,
                    locs: Path | None) -> Locations | None:
    """The location set the records are mapped to: the given file, a public grid, or none
    (records that carry their own coordinates)."""
    icfg = cfg.ingest
    if locs is not None:
        return load_locations(locs, icfg.locations_format)
    if icfg.grid_km is not None:  # a public grid over the configured (public) box
        return km_grid(icfg.grid_km, icfg.grid_bbox)
    if source.locations == "grid":
        return Grid(icfg.grid_deg, icfg.grid_bbox)
    if source.locations == "records":
        return None
    raise InputDataError(
        f"telecom records at {path} need a location set: set ingest.locations_path, or "
        "ingest.grid_km with ingest.grid_bbox for a grid (or run datagen, which writes "
        f"{cfg.storage.landing / cfg.dataset / 'stations.csv'})"
    )


def _check_parquet(files: list[Path], source: RecordSource, icfg: IngestConfig,
                   path: Path) -> list[Path]:
    """The Parquet files among `files`, checked: a source that reads Parquet, no text files
    beside them, no date_from, readable, microsecond timestamps, every role's column."""
    parquet = [f for f in files if f.name.lower().endswith(".parquet")]
    if parquet and not source.parquet:
        raise InputDataError(f"{parquet[0]}: Parquet input is read for source "
                             f"{', '.join(PARQUET_SOURCES)} only")
    if parquet and icfg.date_from:
        raise InputDataError(f"{parquet[0]}: ingest.date_from dates clock times of text files; "
                             "Parquet timestamps carry their date (unset date_from)")
    if parquet and len(parquet) != len(files):
        raise InputDataError(f"input {path} mixes Parquet and text files; keep one format")
    for f in parquet:
        import pyarrow.parquet as pq

        try:
            schema = pq.read_schema(f)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise InputDataError(f"{f}: not a readable Parquet file ({exc})") from None
        names = schema.names
        nanos = [x.name for x in schema if pa.types.is_timestamp(x.type) and x.type.unit == "ns"]
        if nanos:
            raise InputDataError(
                f"{f}: columns {nanos} hold nanosecond timestamps, which Spark cannot read; "
                "write them in microseconds (pandas: to_parquet(..., coerce_timestamps='us'))"
            )
        missing = telecom.missing_roles(names)
        if missing:
            raise InputDataError(f"{f}: Parquet records lack columns for {missing} (have {names})")
    return parquet


def _check_text_heads(plan: InputPlan, files: list[Path], opts: ReaderOptions,
                      path: Path) -> None:
    """Text tables: the columns name every role, every file names its day (date_from), and
    each file's header resolves (kept in `plan.headers`)."""
    from jobs.ingest.readers.pipeline import table_spec

    spec = table_spec(opts)
    if not spec.header:  # the given columns must name every role, whatever the files
        resolve_header(spec.header_line(None), spec, f"{path} (ingest.columns)")
    for f in files if opts.date_from else []:  # every file must name its day
        file_date(str(f), opts.date_from, opts.date_format, opts.date_year)
    for f in files if spec.header else []:
        head = _head(f, spec.encoding)
        resolve_header(head, spec, str(f))  # raises naming the file and the missing column
        plan.headers[str(f)] = head


def _check_arrays(files: list[Path], locations: Locations | None, opts: ReaderOptions,
                  path: Path) -> None:
    """.npy check-in arrays: alone in the input, with a location file (their rows carry a
    location id, not coordinates), each readable with the configured columns."""
    arrays = [f for f in files if npy.is_npy(f)]
    if not arrays:
        return
    if len(arrays) != len(files):
        raise InputDataError(f"input {path} mixes .npy arrays and other files; keep one format")
    if opts.date_from:
        raise InputDataError(f"{arrays[0]}: ingest.date_from dates clock times of text files; "
                             "an array's times count from ingest.time_origin (unset date_from)")
    if not isinstance(locations, LocationSet):
        raise InputDataError(
            f"{arrays[0]}: check-in arrays name locations by id, so they need the location "
            "file those ids index: set ingest.locations_path (rows [id, lat, lon], .npy or csv)")
    from jobs.ingest.readers.pipeline import table_spec

    spec = npy.array_spec(table_spec(opts))
    for f in arrays:
        npy.check_file(f, spec)


def _head(path: Path, encoding: str = "utf-8") -> str:
    """The first line of a file as text (gzip unpacked, decoded from `encoding`)."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as handle:
        start = handle.read(1 << 16)
    text = start.decode(encoding, errors="replace") if encoding != "utf-8" else start.decode(
        "utf-8", errors="backslashreplace")
    return text.split("\n", 1)[0].lstrip("\ufeff").rstrip("\r")

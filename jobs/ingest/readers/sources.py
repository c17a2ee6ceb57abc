"""The raw sources ingest reads: one registry, as for mechanisms, methods and attacks. No pyspark.

A source (`ingest.source`) is a record layout with its traits: which files of an input folder
are its records, how they are read, where its location set comes from when no location file
is given, and whether Parquet records are accepted. The planner (`plan`) and the kernels
(`pipeline`) ask the source for these traits and compare no source's name. The config spells
the names itself (it may not import a stage), so this module checks at import that the
registry and `IngestConfig.source` name the same sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from jobs.config import IngestConfig
from jobs.ingest.readers import checkins, npy, telecom
from jobs.ingest.readers.delimited import TableSpec

_TEXT = (".csv", ".csv.gz", ".txt", ".parquet", npy.SUFFIX)


@dataclass(frozen=True)
class RecordSource:
    name: str
    # how its records are read: "delimited" (telecom and check-in text, .npy arrays, Parquet),
    # "plt" (Geolife PLT files) or "slots48" (one table of 48-slot days, not a folder of files)
    reader: str
    suffixes: tuple[str, ...] = ()  # a folder's record files unless ingest.include says
    want: str = ""  # those files in an error's words
    # the delimited layout (columns by role, timestamps); None: not a delimited source
    spec: TableSpec | None = None
    # without a location file or grid_km: "grid" (cells of ingest.grid_deg), "records" (the
    # locations the records name) or "required" (an error naming the fix)
    locations: str = "required"
    lands: bool = False  # `trajpriv datagen` lands its records and stations (default paths)
    parquet: bool = False  # Parquet records accepted


SOURCES = {s.name: s for s in (
    RecordSource("telecom", "delimited", _TEXT, "*.csv, *.parquet or *.npy files", telecom.SPEC,
                 lands=True, parquet=True),
    RecordSource("plt", "plt", (".plt", ".plt.gz"), "*.plt files", locations="grid"),
    RecordSource("checkins", "delimited", _TEXT, "*.csv, *.parquet or *.npy files",
                 checkins.spec(), locations="records"),
    RecordSource("slots48", "slots48"),
)}
PARQUET_SOURCES = tuple(name for name, s in SOURCES.items() if s.parquet)

if tuple(SOURCES) != get_args(IngestConfig.model_fields["source"].annotation):
    raise ImportError(f"reader registry {tuple(SOURCES)} != ingest.source's choices "
                      f"{get_args(IngestConfig.model_fields['source'].annotation)}")

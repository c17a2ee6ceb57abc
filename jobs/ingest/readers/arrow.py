"""Arrow schemas of the ingestion kernels and pandas <-> Arrow conversion. No pyspark.

Why here and not in the Spark job: the kernels build their output (the union of every table's
rows) directly as Arrow, which is what Spark's mapInArrow/applyInArrow exchange with the JVM, and
the pandas-only path (`ingest_local`) turns the same Arrow table back into pandas. One conversion
layer, so the Spark job and its pandas oracle cannot drift apart.

Row shapes:
- PARSED: one row per input record after location mapping; `source` is the index of the file in
  the job's sorted file list (an int is cheaper to shuffle than a path on every row; the path
  comes back for the few quarantined rows);
- UNION: kind in {point, quarantine, trajectory, slot_day} plus the columns of all four; unused
  columns are null (see `jobs.ingest.readers.pipeline.union_table`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

PARSED_DDL = (
    "source long, line long, record string, user_id string, ts timestamp, "
    "end_ts timestamp, lat double, lon double, reason string, loc_id long"
)
UNION_DDL = (
    "kind string, source string, line long, record string, reason string, user_id string, "
    "ts timestamp, lat double, lon double, loc_id long, date timestamp, traj_id long, "
    "loc_ids array<int>, ts_list array<timestamp>, n long, slots array<int>"
)
_ARROW_TYPES = {
    "string": pa.string(),
    "long": pa.int64(),
    "double": pa.float64(),
    "timestamp": pa.timestamp("us", tz="UTC"),  # Spark's TimestampType (session zone UTC)
    "array<int>": pa.list_(pa.int32()),
    "array<timestamp>": pa.list_(pa.timestamp("us", tz="UTC")),
}


def arrow_schema(ddl: str) -> pa.Schema:
    """The Arrow schema Spark expects for a DDL string of the types above."""
    return pa.schema(
        [(c.split(" ", 1)[0], _ARROW_TYPES[c.split(" ", 1)[1]]) for c in ddl.split(", ")]
    )


PARSED_ARROW = arrow_schema(PARSED_DDL)
UNION_ARROW = arrow_schema(UNION_DDL)
PARSED_COLUMNS = PARSED_ARROW.names
UNION_COLUMNS = UNION_ARROW.names


def timestamp_array(values, typ: pa.DataType = _ARROW_TYPES["timestamp"]) -> pa.Array:
    """Naive timestamps (UTC wall times) -> Arrow microseconds, floored; NaT becomes null.

    Integer arithmetic on the nanoseconds, so no pandas accessor or double cast per column.
    """
    ns = pd.to_datetime(pd.Series(values, copy=False)).to_numpy("datetime64[ns]").view(np.int64)
    missing = ns == np.iinfo(np.int64).min
    micros = np.floor_divide(np.where(missing, 0, ns), 1000)
    return pa.array(micros, type=pa.int64(), mask=missing).cast(typ)


def list_array(values, typ: pa.DataType) -> pa.Array:
    """An object column of numpy arrays (or lists, or None) -> Arrow list array of `typ`."""
    arr = pa.array(np.asarray(values, dtype=object), from_pandas=True)
    if pa.types.is_null(arr.type):
        return pa.nulls(len(values), typ)
    if pa.types.is_timestamp(typ.value_type):
        return arr.cast(pa.list_(pa.timestamp("us"))).cast(typ)
    return arr.cast(typ)


def to_arrow(frame: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """A kernel's pandas frame -> Arrow table of `schema` (lists built in C++, no per-row Python).

    Naive timestamps are UTC wall times (the session zone); they are floored to microseconds.
    """
    arrays = []
    for f in schema:
        col = frame[f.name]
        if pa.types.is_list(f.type):
            arrays.append(list_array(col.to_numpy(dtype=object), f.type))
        elif pa.types.is_timestamp(f.type):
            arrays.append(timestamp_array(col, f.type))
        else:
            arrays.append(pa.array(col, type=f.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """Arrow rows -> the kernels' pandas shape (naive datetime64[ns] timestamps)."""
    frame = table.to_pandas()
    for name, typ in zip(table.schema.names, table.schema.types, strict=True):
        if pa.types.is_timestamp(typ):
            col = frame[name]
            if getattr(col.dt, "tz", None) is not None:
                col = col.dt.tz_convert("UTC").dt.tz_localize(None)
            frame[name] = col.astype("datetime64[ns]")
    return frame

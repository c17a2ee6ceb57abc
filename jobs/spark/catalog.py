"""Idempotent table writes and the run log.

Why: Airflow retries and reruns a task for the same logical date; a rerun must replace that
dataset's (or run's) rows, never append a second copy. Tables are partitioned Parquet tables in
the Hive catalog; a write overwrites exactly the partitions its rows fall in (dynamic partition
overwrite, staged by Spark and moved into place when the job commits, so readers never see a
half-written partition), then drops the partitions of the replaced scope that the new data no
longer has.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.spark.tables import ALL, RUNS, Table, schema_differences
from udfs.errors import InputDataError

log = logging.getLogger(__name__)


def table_exists(spark: SparkSession, table: str) -> bool:
    """Whether `table` (or view) is in the catalog. A yes is remembered for the process: nothing
    in trajpriv drops a table or view, and each answer is a metastore round trip (a small
    collect release asked 17 times)."""
    key = (spark.sparkContext.applicationId, str(table))
    if key in _EXISTING:
        return True
    found = spark.catalog.tableExists(table)
    if found:
        _EXISTING.add(key)
    return found


#: (Spark application, table) pairs `table_exists` has seen in the catalog.
_EXISTING: set[tuple[str, str]] = set()


#: The table property that records which definition a trajpriv view was created from.
VIEW_DEFINITION = "trajpriv.definition"


def ensure_view(spark: SparkSession, view: Table, select_sql: str) -> bool:
    """`CREATE OR REPLACE VIEW view (columns with comments) AS select_sql`, unless the view
    already holds exactly this definition; True when it was (re)created.

    Why the check: every release and every synthesis ended by recreating its points view, a
    metastore write plus an analysis of the whole query (3.1 s a release on a loaded 2-core
    machine) that changes nothing after the first time. The definition's digest is kept in the
    view's TBLPROPERTIES, so a new column list or query text (another version) replaces it.
    """
    sql_text = " ".join(f"{view.view_columns()} AS {select_sql}".split())
    digest = hashlib.sha256(sql_text.encode()).hexdigest()[:16]
    key = (spark.sparkContext.applicationId, str(view))
    if _ENSURED_VIEWS.get(key) == digest:  # this process found or made it so already
        return False
    if table_exists(spark, view):
        stored = spark.sql(f"SHOW TBLPROPERTIES {view} ('{VIEW_DEFINITION}')").first()
        if stored is not None and stored["value"] == digest:
            _ENSURED_VIEWS[key] = digest
            return False
    spark.sql(f"CREATE OR REPLACE VIEW {view} {view.view_columns()} "
              f"TBLPROPERTIES ('{VIEW_DEFINITION}' = '{digest}') AS {select_sql}")
    _ENSURED_VIEWS[key] = digest
    return True


#: (Spark application, view) -> the definition digest this process last found or wrote: the
#: root's lock admits one writing process, so a later identical `ensure_view` in the same
#: process (every release of a run, every test of a shared session) needs no metastore call.
_ENSURED_VIEWS: dict[tuple[str, str], str] = {}


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """Read a catalog table; a missing table is an InputDataError that says which stage makes it."""
    if not table_exists(spark, table):
        raise InputDataError(
            f"table {table} does not exist: run the stage that writes it first "
            "(datagen/ingest for trajpriv_raw.*, collect/synthesize/evaluate for trajpriv_pub.*)"
        )
    return spark.table(table)


def _sql_literal(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def catalogue_entry(table: str | Table) -> str | Table:
    """The catalogue's `Table` for a name it holds, however the caller spelled it (a plain
    `"trajpriv_pub.locations"` from a test or a bench is that entry, checked and commented like
    it); any other name as given."""
    return ALL.get(str(table), table)


def layout_of(df: DataFrame, table: str | Table, partition_by: Iterable[str] | None) -> list[str]:
    """The partition columns of a write, after checking `df` against the catalogue entry.

    A catalogue `Table` brings its own partitioning and column types: data that differs is a
    programming error, refused before anything is written. A plain name (a scratch table of a
    test or a bench) must say its partitioning.
    """
    if isinstance(table, Table):
        if partition_by is not None and tuple(partition_by) != table.partition_by:
            raise ValueError(f"{table} is partitioned by {table.partition_by} in the catalogue, "
                             f"not {tuple(partition_by)}")
        diffs = schema_differences(
            table, {f.name: f.dataType.simpleString() for f in df.schema.fields})
        if diffs:
            raise ValueError(f"writing {table}: the data differs from jobs/spark/tables.py: "
                             + "; ".join(diffs))
        return list(table.partition_by)
    if partition_by is None:
        raise ValueError(f"writing {table}: a table outside the catalogue needs partition_by")
    return list(partition_by)


def write_table(
    df: DataFrame,
    table: str | Table,
    *,
    partition_by: list[str] | None = None,
    replace: Mapping[str, Any] | None = None,
    covers: Iterable[Mapping[str, Any]] | None = None,
) -> None:
    """Write `df` into `table`, replacing the scope `replace` (partition column -> value).

    Every partition the new rows fall in is overwritten; partitions of the scope that the new
    rows do not cover are dropped afterwards. The caller keeps its rows inside the scope (they
    would overwrite other partitions otherwise). Creates the table on first write; the table's
    partition columns come last in its schema, so read it by column name.

    `covers`: the partition values of `df` (one mapping per partition) when the caller already
    knows them, so finding the stale partitions needs no second pass over the data. A caller
    that passes it must list every partition `df` has; listing more keeps them from the drop.
    """
    spark = df.sparkSession
    table = catalogue_entry(table)
    partition_by = layout_of(df, table, partition_by)
    replace = dict(replace or {})
    unknown = set(replace) - set(partition_by)
    if unknown:
        raise ValueError(f"replace keys {sorted(unknown)} are not partition columns {partition_by}")
    if not table_exists(spark, table):
        create_table(df, table, partition_by)
        return
    target_cols, existing_parts = stored_layout(spark, table)
    if existing_parts != list(partition_by):
        raise InputDataError(
            f"table {table} is partitioned by {existing_parts}, this write by {partition_by}: "
            "another writer created it with a different layout; drop the table and rerun"
        )
    missing = set(target_cols) - set(df.columns)
    if missing:
        raise ValueError(f"writing {table}: columns {sorted(missing)} are missing from the data")
    df.select(*target_cols).write.insertInto(table, overwrite=True)
    if replace:
        _drop_stale_partitions(spark, table, partition_by, replace, df, covers)


#: (Spark application, table) -> (its columns in stored order, its partition columns) as the
#: metastore holds them: a table's layout is fixed once created (nothing in trajpriv drops or
#: alters a table, and the root's lock admits one writing process), so each process asks the
#: metastore once per table.
_STORED_LAYOUT: dict[tuple[str, str], tuple[list[str], list[str]]] = {}


def stored_layout(spark: SparkSession, table: str) -> tuple[list[str], list[str]]:
    """(columns in stored order, partition columns) of the existing `table`, as its metastore
    entry says.

    Why remembered: `spark.catalog.listColumns` fetches and decodes the whole table entry,
    about 0.5 s a call on a 2-core machine, and resolving `spark.table(...)` for its column
    order is another metastore round trip; a collect release writes or appends to a table
    eight times (its rows, its `releases` row, its trusted figures, the ledger's charges and
    markers, the run log).
    """
    key = (spark.sparkContext.applicationId, str(table))
    if key not in _STORED_LAYOUT:
        cols = spark.catalog.listColumns(table)
        _STORED_LAYOUT[key] = ([c.name for c in cols], [c.name for c in cols if c.isPartition])
    columns, partitions = _STORED_LAYOUT[key]
    return list(columns), list(partitions)


def create_table(df: DataFrame, table: str, partition_by: list[str]) -> None:
    """First write of `table`: CTAS, after moving aside a leftover folder at its location.

    A catalogue table is created with its columns' comments (`Table.comments`), so `DESCRIBE`
    tells an analyst what each column holds.

    Why: Spark refuses to create a managed table over a non-empty folder
    (LOCATION_ALREADY_EXISTS), and exactly that folder is what a process killed during a
    table's first write leaves (files, no catalog entry). Without this the stage would fail
    on every rerun. The leftover holds no committed data (the catalog never knew it), so it is
    renamed to `<folder>.orphan-<UTC time>` beside it (kept for inspection, same mode) and said
    in one line.
    """
    spark = df.sparkSession
    location = managed_location(spark, table)
    if location is not None and location.exists() and any(location.iterdir()):
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        aside = location.with_name(f"{location.name}.orphan-{stamp}")
        location.rename(aside)
        log.warning("table %s: its folder %s held files but no catalog entry (a first write "
                    "that was interrupted); moved aside to %s", table, location, aside)
    table = catalogue_entry(table)
    if isinstance(table, Table):  # its comments, for DESCRIBE (layout_of checked the columns)
        notes = table.comments()
        df = df.select(*[F.col(c).alias(c, metadata={"comment": notes[c]}) for c in df.columns])
    writer = df.write.format("parquet")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if location is not None:
        from udfs.faults import on_first_write

        on_first_write(table, lambda: writer.save(str(location)))
    writer.saveAsTable(table)


def managed_location(spark: SparkSession, table: str) -> Path | None:
    """Where the managed table `db.name` lives: `<database location>/<name>` (None if the
    database is not on the local file system)."""
    db, _, name = table.partition(".")
    try:
        uri = spark.catalog.getDatabase(db).locationUri
    except Exception:  # database missing: CTAS will say so
        return None
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    return Path(unquote(parsed.path)) / name.lower()


def append_table(df: DataFrame, table: str | Table, *,
                 partition_by: list[str] | None = None) -> None:
    """Append `df` to `table` (created on first write): the ledger's and the run log's write.

    Nothing is overwritten or deleted: each call adds files, committed by Spark's job commit.
    """
    spark = df.sparkSession
    table = catalogue_entry(table)
    partition_by = layout_of(df, table, partition_by)
    if not table_exists(spark, table):
        create_table(df, table, partition_by)
        return
    target_cols = stored_layout(spark, table)[0]
    missing = set(target_cols) - set(df.columns)
    if missing:
        raise ValueError(f"writing {table}: columns {sorted(missing)} are missing from the data")
    df.select(*target_cols).write.insertInto(table, overwrite=False)


def _drop_stale_partitions(
    spark: SparkSession,
    table: str,
    partition_by: list[str],
    replace: Mapping[str, Any],
    written: DataFrame,
    covers: Iterable[Mapping[str, Any]] | None,
) -> None:
    spec = ", ".join(f"{k}={_sql_literal(v)}" for k, v in replace.items())
    existing = [
        row[0] for row in spark.sql(f"SHOW PARTITIONS {table} PARTITION ({spec})").collect()
    ]
    if not existing:
        return
    if covers is None:
        covers = [row.asDict() for row in written.select(*partition_by).distinct().collect()]
    kept = {"/".join(f"{c}={_escape(part[c])}" for c in partition_by) for part in covers}
    stale = [part for part in existing if part not in kept]
    if not stale:
        return
    # One statement for all of them: each DROP is a metastore transaction and a table refresh.
    specs = ", ".join(f"PARTITION ({_spec_of(part)})" for part in stale)
    spark.sql(f"ALTER TABLE {table} DROP IF EXISTS {specs}")


# Characters Hive/Spark escape as %XX in partition paths (ExternalCatalogUtils.escapePathName),
# which is also how SHOW PARTITIONS prints the values.
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(chr(i) for i in range(1, 32))


def _escape(value: Any) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in str(value))


def _spec_of(part: str) -> str:
    """'a=x/b=y%3Az' (SHOW PARTITIONS) -> "a='x', b='y:z'" (a PARTITION clause)."""
    pairs = (item.split("=", 1) for item in part.split("/"))
    return ", ".join(f"{k}={_sql_literal(unquote(v))}" for k, v in pairs)


# Spark types of the simple DDL types the catalogue's columns use (`Table.columns`)
_SIMPLE_TYPES = {"string": T.StringType, "date": T.DateType, "bigint": T.LongType,
                 "int": T.IntegerType, "double": T.DoubleType, "timestamp": T.TimestampType,
                 "boolean": T.BooleanType}


def spark_schema(table: Table, order: Iterable[str] | None = None,
                 required: Iterable[str] = ()) -> T.StructType:
    """The StructType of `table`'s columns, typed from the catalogue (their one home): in
    `order` (default: the catalogue's), the `required` ones not nullable. Built without a
    JVM, so a module may hold it at import."""
    types = table.column_types()
    names = list(types) if order is None else list(order)
    unknown = sorted(set(names) - set(types)) + sorted(set(required) - set(names))
    if unknown:
        raise ValueError(f"{table}: no columns {unknown} to build a schema of")
    need = set(required)
    return T.StructType([T.StructField(n, _SIMPLE_TYPES[types[n]](), n not in need)
                         for n in names])


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One stage execution as trajpriv_pub.runs holds it (its columns, in order; `figures`:
    the public figures, stored as sorted JSON). The config text never holds secrets: run
    seeds and the pseudonym key live in the raw zone."""

    run_id: str
    stage: str
    config_yaml: str
    started_at: dt.datetime
    finished_at: dt.datetime
    status: str
    figures: Mapping[str, Any]

    def row(self) -> tuple:
        return (self.run_id, self.stage, self.config_yaml, self.started_at, self.finished_at,
                self.status, json.dumps(self.figures, default=str, sort_keys=True))


def record_run(spark: SparkSession, record: RunRecord) -> None:
    """Append one row to trajpriv_pub.runs (a run id is unique per stage execution)."""
    append_table(spark.createDataFrame([record.row()], RUNS.columns), RUNS)  # its columns


def catalogue_drift(spark: SparkSession) -> list[str]:
    """How the tables and views in the metastore differ from jobs/spark/tables.py (one line
    each; [] when every existing one matches): columns, types, comments and partition
    columns."""
    out = []
    for table in ALL.values():
        if not table_exists(spark, table):
            continue
        cols = spark.catalog.listColumns(table)
        types = {c.name: c.dataType.replace(" ", "") for c in cols}
        out += [f"{table}: {d}" for d in schema_differences(table, types)]
        out += [f"{table}: column {c.name} has no comment" for c in cols if not c.description]
        parts = tuple(c.name for c in cols if c.isPartition)
        if parts != table.partition_by:
            out.append(f"{table}: partitioned by {parts}, the catalogue says {table.partition_by}")
    return out

"""Which zone a query may read: the analyst's `trajpriv sql` reads `trajpriv_pub` only.

Why a check of our own: the three databases live in one catalog, and Spark itself has no
per-database grants in the embedded metastore. An analyst's query is checked before it runs:
- it must be a read (SELECT / WITH / VALUES / TABLE, or SHOW / DESCRIBE / EXPLAIN); DDL and
  DML would change or drop what others rely on;
- every relation of its analyzed plan (views expanded, so a view over raw data is caught too)
  must be a catalog table or view of `trajpriv_pub`; a direct file read (parquet.`path`,
  read_files) names no catalog table and is refused.
`--trusted` lifts the check for the raw and trusted zones (data stewards, debugging), and the
command says so on stderr. The check reads Spark's EXPLAIN output, which runs nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from jobs.spark.tables import PUBLISHED_DATABASES
from udfs.errors import TrajprivError

if TYPE_CHECKING:  # no pyspark at import: `trajpriv sql` checks a query before any session
    from pyspark.sql import SparkSession

RESTRICTED_DBS = ("trajpriv_raw", "trajpriv_trusted")
_READ_VERBS = ("select", "with", "values", "table", "from", "(")
_META_VERBS = ("show", "describe", "desc", "explain")
# "Relation spark_catalog.db.table[cols] parquet" (a datasource table); "Relation [cols] parquet"
# (a file read: no catalog name); HiveTableRelation [`spark_catalog`.`db`.`table`, ...].
_RELATION = re.compile(r"(?<![A-Za-z])(?:Hive)?(?:Table)?Relation\s+(\S+)")
_CATALOG_TABLE = re.compile(r"^`?spark_catalog`?\.`?(\w+)`?\.`?\w+`?$")


class ZoneError(TrajprivError):
    """A query reaches data outside the zone its caller may read."""


def _first_word(query: str) -> str:
    text = re.sub(r"(--[^\n]*\n|/\*.*?\*/)", " ", query, flags=re.S).strip().lower()
    return text[:1] if text.startswith("(") else (text.split(None, 1) or [""])[0]


def check_read_only(query: str) -> None:
    """Raise ZoneError unless `query` is a read or a SHOW / DESCRIBE / EXPLAIN (any zone):
    `trajpriv sql` never writes, so with a shared metastore it may run beside a stage."""
    verb = _first_word(query)
    if verb not in _READ_VERBS and verb not in _META_VERBS:
        raise ZoneError(f"refused: `trajpriv sql` runs read-only queries (this one starts with "
                        f"{verb.upper() or 'nothing'}); stages write the tables")


def check_analyst_query(spark: SparkSession, query: str) -> None:
    """Raise ZoneError unless `query` only reads `trajpriv_pub` (see the module docstring)."""
    verb = _first_word(query)
    lowered = query.lower()
    if verb in _META_VERBS:
        if verb != "explain" and any(db in lowered for db in RESTRICTED_DBS):
            raise ZoneError(_refusal("it names a restricted database"))
        if verb == "explain":
            check_analyst_query(spark, re.sub(r"^\s*explain(\s+(extended|formatted|codegen|"
                                              r"cost))?", "", query, flags=re.I))
        return
    if verb not in _READ_VERBS:
        raise ZoneError(_refusal(f"`trajpriv sql` runs read-only queries (this one starts "
                                 f"with {verb.upper() or 'nothing'})"))
    plan = spark.sql(f"EXPLAIN EXTENDED {query}").collect()[0][0]
    analyzed = plan.split("== Analyzed Logical Plan ==", 1)[-1].split(
        "== Optimized Logical Plan ==", 1)[0]
    for rest in _RELATION.findall(analyzed):
        if rest.startswith("[`"):  # HiveTableRelation [`spark_catalog`.`db`.`table`, ...
            name = rest[1:].split(",", 1)[0]
        elif rest.startswith("["):  # Relation [columns] parquet: a path, no catalog table
            raise ZoneError(_refusal("it reads files directly, not a published table"))
        else:  # Relation spark_catalog.db.table[columns] parquet
            name = rest.split("[", 1)[0]
        match = _CATALOG_TABLE.match(name.strip("`"))
        db = match.group(1) if match else None
        if db not in PUBLISHED_DATABASES:
            raise ZoneError(_refusal(f"it reads {name.replace('`', '')}"))
    if any(f"{db}." in analyzed or f"`{db}`" in analyzed for db in RESTRICTED_DBS):
        raise ZoneError(_refusal("it reaches a restricted database"))


def _refusal(why: str) -> str:
    return (f"refused: {why}. Analysts read the published zone (trajpriv_pub.*) only; the raw "
            "zone (trajpriv_raw) holds personal data and the trusted zone (trajpriv_trusted) "
            "figures computed from it. A data steward may pass --trusted.")

"""Run one analyst statement in a Spark session and return its rows as plain values.

The one path of a query, whether the warm server (`jobs.sql.server`) or this process
(`trajpriv sql --no-server`) runs it: the read-only check (any zone, `--trusted` included), the
zone check of the analyzed plan unless `trusted`, then at most `limit` rows collected. Values
are made JSON-safe here (dates, timestamps and decimals as text, structs as objects), so the
server can send them and `jobs.sql.render` prints them the same way on either path.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

from pyspark.sql import Row, SparkSession

from jobs.spark.zones import check_analyst_query, check_read_only


def run_statement(spark: SparkSession, sql: str, *, trusted: bool, limit: int) -> dict[str, Any]:
    """{"columns", "types", "rows", "truncated", "total"} of `sql`: rows are lists of JSON-safe
    values; `truncated` says the result had more than `limit` rows (a negative `limit`: all
    rows), and then `total` counts them all, so the caller can say how many were left out.
    ZoneError for a refused query."""
    check_read_only(sql)
    if not trusted:
        check_analyst_query(spark, sql)
    df = spark.sql(sql)
    rows = df.limit(limit + 1).collect() if limit >= 0 else df.collect()
    truncated = 0 <= limit < len(rows)
    return {
        "columns": list(df.columns),
        "types": [f.dataType.simpleString() for f in df.schema.fields],
        "rows": [[plain(v) for v in row] for row in (rows[:limit] if limit >= 0 else rows)],
        "truncated": truncated,
        "total": df.count() if truncated else len(rows),
    }


def plain(value: Any) -> Any:
    """A JSON-safe copy of a Spark value (None, bool, int, float, str, list or dict)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Row):
        return {k: plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, (dt.date, decimal.Decimal, dt.timedelta)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return str(value)

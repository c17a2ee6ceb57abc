"""Rows of `trajpriv_trusted.evaluation`: one metric value of one method at one setting of a run.

Shared by every stage that measures something (collect: NE/PRQ/ACD/Kendall tau of each LDP
mechanism; evaluate: divergences of synthetic data; attacks: AUCs). Columns, types and
partitioning: `jobs.spark.tables.EVALUATION` (their one home; `EVALUATION_SCHEMA` is built
from it).

`setting` is the method's privacy parameter (epsilon for LDP mechanisms, the Laplace noise for
PateGAIL); `value` may be NaN where a metric is undefined (e.g. Kendall tau of a constant
ranking). Writes are idempotent: rewriting a run replaces that run's rows (all of its methods, or
only the methods written, with `scope="method"`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.spark.catalog import spark_schema, write_table
from jobs.spark.tables import EVALUATION

# the catalogue's columns in the order rows are built; only setting and value may be null
EVALUATION_SCHEMA = spark_schema(
    EVALUATION, order=("run_id", "dataset", "method", "setting", "metric", "value", "created_at"),
    required=("run_id", "dataset", "method", "metric", "created_at"))
METRIC_COLUMNS = ("method", "setting", "metric", "value")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)


def evaluation_frame(
    spark: SparkSession,
    rows: Iterable[Mapping[str, Any]] | DataFrame,
    *,
    run_id: str,
    dataset: str,
    created_at: dt.datetime | None = None,
) -> DataFrame:
    """Rows (method, setting, metric, value) as a DataFrame of the evaluation schema.

    `rows` is an iterable of mappings or a DataFrame with those four columns.
    """
    created = created_at or _now()
    if isinstance(rows, DataFrame):
        missing = set(METRIC_COLUMNS) - set(rows.columns)
        if missing:
            raise ValueError(f"evaluation rows lack columns {sorted(missing)}")
        return rows.select(
            F.lit(run_id).alias("run_id"),
            F.lit(dataset).alias("dataset"),
            F.col("method").cast("string"),
            F.col("setting").cast("double"),
            F.col("metric").cast("string"),
            F.col("value").cast("double"),
            F.lit(created).cast("timestamp").alias("created_at"),
        )
    return spark.createDataFrame(_records(rows, run_id, dataset, created), EVALUATION_SCHEMA)


def _records(rows: Iterable[Mapping[str, Any]], run_id: str, dataset: str,
             created: dt.datetime) -> list[tuple]:
    """Mappings (method, setting, metric, value) as tuples of EVALUATION_SCHEMA's order."""
    data = []
    for row in rows:
        missing = set(METRIC_COLUMNS) - set(row)
        if missing:
            raise ValueError(f"evaluation row {dict(row)} lacks {sorted(missing)}")
        setting = row["setting"]
        value = row["value"]
        data.append(
            (
                run_id,
                dataset,
                str(row["method"]),
                None if setting is None else float(setting),
                str(row["metric"]),
                math.nan if value is None else float(value),
                created,
            )
        )
    return data


def write_evaluation(
    spark: SparkSession,
    rows: Iterable[Mapping[str, Any]] | DataFrame,
    *,
    run_id: str,
    dataset: str,
    scope: Literal["run", "method"] = "run",
    created_at: dt.datetime | None = None,
) -> int:
    """Write metric rows of one run; returns how many were written.

    scope="run" replaces every row of (dataset, run_id); scope="method" replaces only the
    methods present in `rows` (for a stage that writes its methods one at a time). Metric rows
    are few: a DataFrame of them is materialised once on the driver, and rows given as
    mappings are written from the driver as they are (no Spark job to read them back).
    """
    if isinstance(rows, DataFrame):
        data = [tuple(r) for r in evaluation_frame(spark, rows, run_id=run_id, dataset=dataset,
                                                   created_at=created_at).collect()]
    else:
        data = _records(rows, run_id, dataset, created_at or _now())
    df = spark.createDataFrame(data, EVALUATION_SCHEMA)
    replace: dict[str, Any] | None = {"dataset": dataset, "run_id": run_id}
    methods = sorted({r[EVALUATION_SCHEMA.fieldNames().index("method")] for r in data})
    if scope == "method":
        if len(methods) == 1:
            replace = {**replace, "method": methods[0]}
        else:
            replace = None  # overwrite exactly the (dataset, run_id, method) partitions written
    elif scope != "run":
        raise ValueError(f"scope must be 'run' or 'method', got {scope!r}")
    if not data and replace is None:
        return 0
    # the partitions written are known here: finding the stale ones needs no pass over `df`
    write_table(df, EVALUATION, replace=replace,
                covers=[{"dataset": dataset, "run_id": run_id, "method": m} for m in methods])
    return len(data)

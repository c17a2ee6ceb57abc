"""The endpoints' guard (`jobs/sql/java/PublishedOnly.java`) in a local Spark session of its own:
no metastore, no endpoints, one JVM.

Why here and not only through the endpoints: a collected result is decoded to Java Rows by a
plan that `ExpressionEncoder.resolveAndBind` analyzes with the session's analyzer (the Thrift
server's collect, Connect's `show`), so the guard sees Spark's own decoder as well as the
user's query. It must let that decoder through, for every SQL type, and nothing else: the very
same plan sent as a query is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.config import load_config
from jobs.sql import endpoint
from jobs.sql.client import ServerError

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

#: Every SQL type a published table or a query over one may return.
QUERY = ("SELECT id, cast(id AS string) s, array(id) a, map('k', id) m, DATE'2024-01-02' d, "
         "TIMESTAMP'2024-01-02 03:04:05' ts, TIMESTAMP_NTZ'2024-01-02 03:04:05' tn, "
         "named_struct('x', id, 'y', array(named_struct('z', 1.5D))) st, "
         "cast(id AS decimal(10,2)) dec, cast('ab' AS binary) b, "
         "INTERVAL '1 2:03:04' DAY TO SECOND i, INTERVAL '1-2' YEAR TO MONTH ym, "
         "parse_json('{\"a\":1}') v, true bo, cast(1 AS float) f, cast(1 AS tinyint) ti, "
         "cast(1 AS smallint) si, 1 ii, map(array(1), map('a', array(cast(NULL AS date)))) mm, "
         "cast(NULL AS string) n, array(cast('a' AS binary)) ab FROM range(2)")

SESSION = """
import json, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.extraClassPath", sys.argv[1])
         .config("spark.sql.extensions", "trajpriv.PublishedOnly").getOrCreate())
query, jvm, out = sys.argv[2], spark._jvm, {}
def attempt(name, run):
    try:
        out[name] = "OK " + str(run())
    except Exception as exc:
        out[name] = "ERROR " + " ".join(str(exc).split())[:400]
attempt("collectAsList", lambda: spark.sql(query)._jdf.collectAsList().size())
attempt("showString", lambda: spark.sql(query)._jdf.showString(20, 0, False).count("|"))
attempt("toLocalIterator", lambda: spark.sql(query)._jdf.toLocalIterator().hasNext())
def decoder_as_a_query():
    df = spark.sql(query)._jdf
    logical = jvm.org.apache.spark.sql.catalyst.plans.logical
    nil = getattr(getattr(jvm.scala.collection.immutable, "Nil$"), "MODULE$")
    rows = logical.LocalRelation(df.queryExecution().analyzed().output(), nil, False,
                                 jvm.scala.Option.empty())
    encoders = jvm.org.apache.spark.sql.catalyst.encoders
    encoder = encoders.ExpressionEncoder.apply(encoders.RowEncoder.encoderFor(df.schema()))
    plan = logical.CatalystSerde.deserialize(rows, encoder)
    return jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, plan).count()
attempt("decoder as a query", decoder_as_a_query)
attempt("TRANSFORM, collected", lambda: spark.sql(
    "SELECT TRANSFORM(1) USING 'id' AS (x string)")._jdf.collectAsList().size())
spark.stop()
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def guard(tmp_path_factory) -> Path:
    """The guard's classes, compiled as `trajpriv serve` compiles them."""
    scratch = tmp_path_factory.mktemp("guard-scratch")
    cfg = load_config(None, [f"storage.root={scratch / 'data'}", f"serve.scratch={scratch}"])
    try:
        return endpoint.guard_classes(cfg)
    except ServerError as exc:  # no JDK: the endpoints cannot start either
        pytest.skip(str(exc))


def test_the_guard_decodes_results_and_refuses_the_same_decoder_as_a_query(guard):
    out = subprocess.run([sys.executable, "-c", SESSION, str(guard), QUERY], cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=600, check=False)
    assert "RESULT " in out.stdout, out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert result["collectAsList"] == "OK 2", result
    assert result["showString"].startswith("OK ") and int(result["showString"][3:]) > 0, result
    assert result["toLocalIterator"] == "OK True", result
    assert "refused: it is not a read of published tables by built-in SQL " \
           "(DeserializeToObject)" in result["decoder as a query"], result
    assert "refused: it runs a program on the server" in result["TRANSFORM, collected"], result

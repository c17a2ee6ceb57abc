"""The red-team catalogue of the analysts' endpoints: what a client may try to run, and the
error each must get. test_endpoints.py sends every SQL case through beeline, a DB-API client,
Spark Connect's `spark.sql` and `trajpriv sql`, and every DataFrame case through Spark Connect.

`{marker}` in a case is a file the attack would create on the server if it ran; the tests
assert it stays absent. `{probe_path}` is a readable folder of the data root.
"""

from __future__ import annotations

from dataclasses import dataclass

REFUSED = r"refused: "
#: What a file read gets with spark.sql.runSQLOnFiles off (Spark looks for a table of that
#: name in database `csv`); with it on (a SET the guard refuses), the guard's file refusal.
NO_FILE = r"refused: |TABLE_OR_VIEW_NOT_FOUND|UNSUPPORTED_DATASOURCE_FOR_DIRECT_QUERY"


@dataclass(frozen=True)
class Attack:
    name: str  # the construct, as docs/operations/analysts.md lists it
    code: str  # SQL, or for DataFrame cases the body of a Python function of `spark`, `m`
    error: str = REFUSED  # a regex the error must match


SQL_ATTACKS = [
    Attack("TRANSFORM (ScriptTransformation)",
           "SELECT TRANSFORM(1) USING 'touch {marker}' AS (x string)"),
    Attack("TRANSFORM over a published table",
           "SELECT TRANSFORM(loc_id) USING 'sh -c \"id > {marker}\"' AS (x string) "
           "FROM trajpriv_pub.locations"),
    Attack("reflect (CallMethodViaReflection)",
           "SELECT reflect('java.lang.System', 'getProperty', 'user.name')"),
    Attack("java_method", "SELECT java_method('java.util.UUID', 'randomUUID')"),
    Attack("try_reflect", "SELECT try_reflect('java.lang.System', 'getenv', 'HOME')"),
    Attack("reflect in a subquery",
           "SELECT * FROM trajpriv_pub.locations WHERE dataset IN "
           "(SELECT reflect('java.lang.System', 'getProperty', 'user.name'))"),
    Attack("Hive UDF (CREATE TEMPORARY FUNCTION ... AS a Hive class)",
           "CREATE TEMPORARY FUNCTION t_abs AS "
           "'org.apache.hadoop.hive.ql.udf.generic.GenericUDFAbs'"),
    Attack("CREATE TEMPORARY FUNCTION ... USING JAR",
           "CREATE TEMPORARY FUNCTION t_f AS 'x.Y' USING JAR '{marker}.jar'"),
    Attack("SQL UDF (CREATE FUNCTION ... RETURN)",
           "CREATE TEMPORARY FUNCTION t_sql() RETURNS INT RETURN 1"),
    Attack("ADD JAR", "ADD JAR '{marker}.jar'"),
    Attack("ADD FILE", "ADD FILE '{probe_path}'"),
    Attack("ADD ARCHIVE", "ADD ARCHIVE '{marker}.zip'"),
    Attack("LIST FILE", "LIST FILE"),
    Attack("CREATE TEMPORARY VIEW", "CREATE TEMPORARY VIEW t_v AS SELECT 1 AS a"),
    Attack("SET spark.sql.runSQLOnFiles", "SET spark.sql.runSQLOnFiles=true"),
    Attack("SET spark.scheduler.pool", "SET spark.scheduler.pool=mine"),
    Attack("SET spark.sql.scripting.enabled", "SET spark.sql.scripting.enabled=true"),
    Attack("csv.`path`", "SELECT * FROM csv.`{probe_path}`", NO_FILE),
    Attack("json.`path`", "SELECT * FROM json.`{probe_path}`", NO_FILE),
    Attack("text.`path`", "SELECT * FROM text.`/etc/hostname`", NO_FILE),
]

#: Spark Connect DataFrame attacks: the body of `def attack(spark, m)` (`m`: the marker path).
CONNECT_ATTACKS = [
    Attack("Python UDF", """
from pyspark.sql.functions import udf
import subprocess
u = udf(lambda _: subprocess.run(["sh", "-c", "id > " + m], capture_output=True).stdout)
return spark.range(1).select(u("id")).collect()"""),
    Attack("Python UDF over a published table", """
from pyspark.sql.functions import udf
u = udf(lambda x: open(m, "w").write(str(x)))
return spark.table("trajpriv_pub.locations").select(u("loc_id")).collect()"""),
    Attack("Arrow Python UDF", """
from pyspark.sql.functions import udf
u = udf(lambda x: open(m, "w").write(str(x)), "long", useArrow=True)
return spark.range(1).select(u("id")).collect()"""),
    Attack("pandas UDF", """
from pyspark.sql.functions import pandas_udf
@pandas_udf("long")
def u(s):
    open(m, "w").write("x")
    return s
return spark.range(1).select(u("id")).collect()"""),
    Attack("pandas UDAF (grouped aggregate)", """
import pandas as pd
from pyspark.sql.functions import pandas_udf
@pandas_udf("double")
def u(s: pd.Series) -> float:
    open(m, "w").write("x")
    return 0.0
return spark.range(3).groupBy().agg(u("id")).collect()"""),
    Attack("Python UDF inside a subquery", """
from pyspark.sql.functions import udf, col
u = udf(lambda x: open(m, "w").write(str(x)), "long")
inner = spark.range(1).select(u("id").alias("v"))
return spark.range(3).where(col("id").isin(inner.select("v").scalar())).collect()"""),
    Attack("SELECT over a temporary view built from a Python UDF", """
from pyspark.sql.functions import udf
u = udf(lambda x: open(m, "w").write(str(x)), "long")
spark.range(1).select(u("id").alias("v")).createOrReplaceTempView("t_udf_view")
return spark.sql("SELECT * FROM t_udf_view").collect()"""),
    Attack("spark.udf.register and SQL", """
spark.udf.register("t_touch", lambda x: open(m, "w").write(str(x)), "long")
return spark.sql("SELECT t_touch(1)").collect()"""),
    Attack("Python UDTF (its analyze runs at analysis)", """
from pyspark.sql.functions import udtf, lit
from pyspark.sql.udtf import AnalyzeResult
from pyspark.sql.types import StructType
@udtf
class T:
    @staticmethod
    def analyze(x):
        open(m, "w").write("analyze")
        return AnalyzeResult(StructType().add("a", "int"))
    def eval(self, x):
        yield (1,)
return T(lit(1)).collect()"""),
    Attack("mapInPandas", """
def f(batches):
    import os
    open(m, "w").write(" ".join(os.listdir("/tmp")))
    yield from batches
return spark.range(1).mapInPandas(f, "id long").collect()"""),
    Attack("mapInArrow", """
def f(batches):
    open(m, "w").write("x")
    yield from batches
return spark.range(1).mapInArrow(f, "id long").collect()"""),
    Attack("applyInPandas (FlatMapGroupsInPandas)", """
def f(pdf):
    open(m, "w").write("x")
    return pdf
return spark.range(2).groupBy("id").applyInPandas(f, "id long").collect()"""),
    Attack("applyInArrow", """
def f(table):
    open(m, "w").write("x")
    return table
return spark.range(2).groupBy("id").applyInArrow(f, "id long").collect()"""),
    Attack("cogrouped applyInPandas (FlatMapCoGroupsInPandas)", """
def f(a, b):
    open(m, "w").write("x")
    return a
g = spark.range(2).groupBy("id")
return g.cogroup(spark.range(2).groupBy("id")).applyInPandas(f, "id long").collect()"""),
    Attack("foreachBatch of a stream", """
def f(df, i):
    open(m, "w").write("x")
q = spark.readStream.format("rate").load().writeStream.foreachBatch(f).start()
q.awaitTermination(5)
return q.stop()"""),
    Attack("addArtifact (Python file)", """
src = upload("a.py", "x = 1\\n")
return spark.addArtifacts(src, pyfile=True)"""),
    Attack("addArtifact (jar)", """
return spark.addArtifacts(upload("a.jar"))"""),
    Attack("addArtifact (archive)", """
return spark.addArtifacts(upload("a.zip"), archive=True)"""),
    Attack("addArtifact (file)", """
return spark.addArtifacts(upload("a.txt", "x"), file=True)"""),
    Attack("spark.read.text (a path)", """
return spark.read.text("/etc/hostname").collect()"""),
    Attack("spark.read.format('jdbc')", """
return spark.read.format("jdbc").option("url", "jdbc:postgresql://127.0.0.1:1/x").option(
    "dbtable", "t").load().collect()"""),
    Attack("spark.conf.set of a protected setting", """
return spark.conf.set("spark.sql.runSQLOnFiles", "true")"""),
    Attack("DataFrame cache", """
return spark.table("trajpriv_pub.locations").cache().count()"""),
    Attack("saveAsTable", """
return spark.range(1).write.saveAsTable("trajpriv_pub.t_mine")"""),
]


def slug(name: str) -> str:
    """A file-name-safe form of a case's name (its marker file, its test id)."""
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")[:60]


#: One Spark Connect client process for the whole catalogue: argv[1] the URL, argv[2] a JSON
#: list of [kind, name, code, marker]; prints one JSON line: {name: {"error", "probe"}}.
CONNECT_RUNNER = """
import json, os, sys, tempfile, textwrap, zipfile
from pyspark.sql import SparkSession
CLIENT_FILES = tempfile.mkdtemp()  # what an addArtifacts call uploads: the client's own file
def upload(name, text=None):
    path = os.path.join(CLIENT_FILES, name)
    if text is None:
        zipfile.ZipFile(path, "w").close()
    else:
        open(path, "w").write(text)
    return path
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
out = {}
for kind, name, code, marker in json.loads(sys.argv[2]):
    result = {}
    try:
        if kind == "sql":
            spark.sql(code).collect()
        else:
            scope = {"upload": upload}
            exec("def attack(spark, m):\\n" + textwrap.indent(code.strip(), "    "), scope)
            scope["attack"](spark, marker)
        result["error"] = None
    except Exception as exc:
        result["error"] = " ".join(str(exc).split())[:600]
    try:  # the endpoints still answer, in the same session
        result["probe"] = spark.table("trajpriv_pub.locations").count()
    except Exception as exc:
        result["probe"] = "ERROR " + " ".join(str(exc).split())[:300]
    out[name] = result
print("RESULT " + json.dumps(out))
"""

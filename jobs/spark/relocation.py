"""A data root that can be copied or moved: the embedded catalog re-pointed at its own root.

Why: the embedded Hive metastore (Derby, `<root>/metastore_db`) stores every database, table and
partition location as an absolute URI. A copy of a root (a restored backup, `cp -a data_A
data_B`, two experiments started from one prepared root) kept pointing at the original, so a
stage run on the copy wrote its tables and ledger into the original's folders.

How: after each session start the root records, in `<root>/catalog_root.json`, the root the
catalog's locations name (the URI prefix exactly as the metastore stores it). The next start
compares that with the root it is opened from; when they differ, before the Spark JVM starts,
one Derby transaction rewrites the prefix in `DBS.DB_LOCATION_URI`, `SDS.LOCATION` and the
`path` serde parameters (what Hive's `metatool -updateLocation` does), with Derby's own `ij`
tool from pyspark's jars in a short JVM of its own (about 2 s, only on the first open after a
copy or move; the Spark JVM must be the only one to boot the database afterwards, so the
rewrite cannot run inside it). Idempotent: a rewrite interrupted before the marker is
rewritten is found complete or redone by the next start. The original root is never opened,
so it stays as it was.

After the session opens, `check_catalog_in_root` verifies that each zone's database lies in
this root's warehouse; a catalog that does not match its folders is a RootError (exit 2) that
names both and the fix, before any table is read or written.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote, urlparse

from udfs.atomic import atomic_open
from udfs.errors import TrajprivError

log = logging.getLogger(__name__)

MARKER = "catalog_root.json"
DERBY_JARS = ("derby-*.jar", "derbyshared-*.jar", "derbytools-*.jar")
# (table, column, extra condition): every place the Hive 2.3 schema keeps a location
LOCATION_COLUMNS = (
    ("APP.DBS", "DB_LOCATION_URI", ""),
    ("APP.SDS", "LOCATION", ""),
    ("APP.SERDE_PARAMS", "PARAM_VALUE", "PARAM_KEY = 'path' AND "),
)


class RootError(TrajprivError):
    """The data root cannot be used as it is (one line naming the root and the fix)."""


def require_existing_root(root: Path) -> None:
    """RootError unless `root` exists. Readers (`trajpriv sql`, `budget`, the
    endpoints) open a root that stages made; a mistyped root must fail naming the path, not
    become a new empty root that answers "table or view not found"."""
    if not root.exists():  # a file where the root should be: check_root says so
        raise RootError(f"storage.root {root} does not exist: readers open a root a stage has "
                        "written and create nothing; check storage.root (--config, --set "
                        "storage.root=<folder>) or run a stage first")


def uri_prefix(root: Path) -> str:
    """`file:<root>/` as a Hadoop location: ASCII that is not legal in a URI path escaped.

    Reading decodes it back to the same path, so it need not equal Hadoop's own spelling; an
    old prefix is always taken from the marker, exactly as the metastore stored it."""
    return "file:" + quote(str(root), safe="/!$&'()*+,;=:@-._~") + "/"


def read_marker(root: Path) -> dict | None:
    try:
        return json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None


def write_marker(root: Path, prefix: str) -> None:
    """Record the root the catalog's locations name now (atomic replace, mode 0600:
    `udfs.atomic.atomic_open`)."""
    with atomic_open(root / MARKER) as fh:
        fh.write(json.dumps({"root": str(root), "uri_prefix": prefix}) + "\n")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _like_prefix(text: str) -> str:
    """A LIKE pattern (ESCAPE '!') matching strings that start with `text`."""
    escaped = text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return _sql_string(escaped + "%")


def rewrite_sql(metastore: Path, old: str, new: str) -> str:
    """The ij script: every location under `old` moved under `new`, in one transaction, then
    a count of what still names `old` (0 when the rewrite is complete)."""
    n = len(old)
    lines = [_connect(metastore).strip(), "autocommit off;"]
    remaining = []
    for table, column, extra in LOCATION_COLUMNS:
        match = f"{extra}{column} LIKE {_like_prefix(old)} ESCAPE '!'"
        lines.append(f"UPDATE {table} SET {column} = {_sql_string(new)} || "
                     f"SUBSTR({column}, {n + 1}) WHERE {match};")
        remaining.append(f"(SELECT COUNT(*) FROM {table} WHERE {match})")
    lines += ["commit;", f"SELECT {' + '.join(remaining)} AS LEFT_OVER FROM SYSIBM.SYSDUMMY1;"]
    return "\n".join(lines) + "\n" + _shutdown(metastore)


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RootError("cannot re-point the copied data root's catalog: no `java` on PATH "
                        "and no JAVA_HOME (Spark needs Java 17 as well); install it and rerun")
    return found


def _derby_classpath() -> str:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    found = [sorted(jars.glob(pattern)) for pattern in DERBY_JARS]
    if not all(found):
        raise RootError(f"cannot re-point the catalog: Derby's jars are missing from {jars}")
    return os.pathsep.join(str(f[-1]) for f in found)


def run_ij(metastore: Path, sql: str) -> list[str]:
    """Run an ij script in a JVM of its own; the output lines (RootError on any SQL error)."""
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(sql)
    try:
        out = subprocess.run(
            [_java(), f"-Dderby.system.home={metastore.parent}",
             "-Dderby.storage.useDefaultFilePermissions=false", "-cp", _derby_classpath(),
             "org.apache.derby.tools.ij", script.name],
            capture_output=True, text=True, timeout=300, check=False)
    finally:
        os.unlink(script.name)
    lines = (out.stdout + out.stderr).splitlines()
    errors = [line for line in lines if line.startswith("ERROR")
              and "08006" not in line and "XJ015" not in line]  # the shutdown's own notice
    if out.returncode != 0 or errors:
        raise RootError(f"re-pointing the catalog of {metastore.parent} failed: "
                        f"{(errors or lines[-1:] or ['no output'])[0]}; the catalog is "
                        "unchanged (one transaction): fix the cause and rerun")
    return lines


def _connect(metastore: Path) -> str:
    return f"connect 'jdbc:derby:{metastore}';\n"


def _shutdown(metastore: Path) -> str:
    return f"disconnect;\nconnect 'jdbc:derby:{metastore};shutdown=true';\nexit;\n"


def run_rewrite(metastore: Path, old: str, new: str) -> int:
    """Rewrite the locations with ij; returns how many still name `old` (0 on success)."""
    counts = [int(x) for x in run_ij(metastore, rewrite_sql(metastore, old, new))
              if x.strip().isdigit()]
    if not counts:
        raise RootError(f"re-pointing the catalog of {metastore.parent}: ij printed no count")
    return counts[-1]


def stored_prefix(metastore: Path, database: str) -> str | None:
    """The root prefix the metastore stores for `database` (`<prefix>warehouse/<db>.db`),
    read with ij: for a root made before the marker existed (once per such root)."""
    sql = (_connect(metastore) + "SELECT DB_LOCATION_URI FROM APP.DBS WHERE NAME = "
           f"{_sql_string(database)};\n" + _shutdown(metastore))
    suffix = f"warehouse/{database}.db"
    for line in run_ij(metastore, sql):
        value = line.strip()
        if value.startswith("file:") and value.endswith(suffix):
            return value[: len(value) - len(suffix)]
    return None


def relocate_catalog(root: Path, metastore: Path, database: str) -> bool:
    """Before the JVM starts: re-point a copied or moved root's catalog at `root`.

    Returns True when locations were rewritten. A root without a metastore has nothing to
    re-point; one without a marker (made before it existed) has its prefix read from the
    metastore once (`database` is the zone whose location names the root)."""
    if not (metastore / "service.properties").exists():
        return False
    marker = read_marker(root)
    if marker is None:
        prefix = stored_prefix(metastore, database)
        if prefix is None:  # no zone yet: the session creates them inside this root
            return False
        marker = {"root": unquote(urlparse(prefix).path), "uri_prefix": prefix}
    old, new = marker["uri_prefix"], uri_prefix(root)
    if _same_path(old, new):
        return False
    left = run_rewrite(metastore, old, new)
    if left:
        raise RootError(f"re-pointing the catalog of {root}: {left} location(s) still name "
                        f"{old}; the catalog is unchanged: rerun, or restore the root's copy")
    write_marker(root, new)
    log.warning("data root %s was copied or moved from %s: its catalog now points at %s "
                "(the original is untouched)", root, marker.get("root"), root)
    return True


def _same_path(a: str, b: str) -> bool:
    return Path(unquote(urlparse(a).path)) == Path(unquote(urlparse(b).path))


def stored_table_names(spark, db: str) -> list[str]:
    """Names of the tables (not views) the catalog lists in `db`.

    Why SHOW TABLES minus SHOW VIEWS and not `spark.catalog.listTables`: the latter fetches
    and decodes every table's full metadata (schema, storage, partition columns) at every
    session start, and every stage and
    every `trajpriv sql` opens a session; the names alone are one metastore call each.
    """
    names = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {db}").collect()
             if not r["isTemporary"]}
    views = {r["viewName"] for r in spark.sql(f"SHOW VIEWS IN {db}").collect()
             if not r["isTemporary"]}
    return sorted(names - views)


def check_catalog_in_root(spark, root: Path, databases: tuple[str, ...]) -> None:
    """After the session opens: every zone's database lies in `<root>/warehouse`, then the
    marker records the prefix as the metastore stores it. RootError otherwise."""
    warehouse = root / "warehouse"
    prefix = None
    for db in databases:
        uri = spark.catalog.getDatabase(db).locationUri
        parsed = urlparse(uri)
        path = Path(unquote(parsed.path))
        if parsed.scheme not in ("", "file") or path.parent != warehouse:
            raise RootError(
                f"the catalog of data root {root} does not match its folders: database {db} "
                f"lies at {uri}, not in {warehouse}; the metastore_db was copied without its "
                "root or from a root of another layout: copy the whole root (metastore_db, "
                "warehouse and catalog_root.json together) or start from an empty root")
        prefix = uri[: len(uri) - len(f"warehouse/{path.name}")]
        tables = stored_table_names(spark, db)
        if tables and not (path.is_dir() and any(path.iterdir())):
            raise RootError(
                f"the catalog of data root {root} does not match its folders: it lists "
                f"{len(tables)} table(s) of {db} ({', '.join(sorted(tables)[:3])}, ...) but "
                f"{path} is missing or empty: restore the warehouse from the same copy as "
                "metastore_db, or start from an empty root (the privacy ledger is one of "
                "these tables: budgets would restart)")
    if prefix is not None and (read_marker(root) or {}).get("uri_prefix") != prefix:
        write_marker(root, prefix)

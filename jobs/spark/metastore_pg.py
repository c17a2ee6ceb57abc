"""A local PostgreSQL server for the Hive metastore (`catalog.metastore: postgres`).

Why: the embedded Derby metastore admits one Spark process, so a data engineer could not query
the published tables while a stage ran. With the metastore in PostgreSQL, `trajpriv sql` and
other Spark sessions open the catalog while a stage writes. On a cluster, point
`catalog.postgres_url` at the metastore database you already run; on one machine,
`make postgres` (this module) starts Debian's PostgreSQL server on a folder of its own:

    python -m jobs.spark.metastore_pg start [--dir .postgres] [--port 5433]   # prints the JDBC URL
    python -m jobs.spark.metastore_pg stop  [--dir .postgres]

The server listens on 127.0.0.1 only, with `trust` authentication for local connections (a
laptop's loopback; a shared server uses passwords: `catalog.postgres_password_env`). As root
(our CI machines) the server runs as the `postgres` system user, which PostgreSQL requires.
Needs Debian's `postgresql` (initdb, pg_ctl) and `libpostgresql-jdbc-java` (the JDBC driver
Spark loads, /usr/share/java/postgresql.jar); `make postgres` installs both where apt works.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

DATABASE = "trajpriv_metastore"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's programs or its JDBC driver are not installed here."""


def binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
                                                   reverse=True)), None)
    if found is None:
        raise PostgresUnavailable(f"`{name}` not found: install Debian's postgresql "
                                  "(`make postgres` does where apt works)")
    return found


def _as_server_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, run as the `postgres` system user."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def jdbc_url(port: int, database: str = DATABASE) -> str:
    return f"jdbc:postgresql://127.0.0.1:{port}/{database}"


def start(folder: Path, port: int, database: str = DATABASE) -> str:
    """Initialise (first time) and start a server on `folder`; create `database`; its URL."""
    if not JDBC_JAR.exists():
        raise PostgresUnavailable(f"{JDBC_JAR} not found: install Debian's "
                                  "libpostgresql-jdbc-java (`make postgres` does)")
    folder = folder.resolve()
    data = folder / "data"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.geteuid() == 0:
        closed = [p for p in folder.parents if not os.stat(p).st_mode & 0o001]
        if closed:
            raise PostgresUnavailable(f"the server runs as the postgres user, which cannot "
                                      f"enter {closed[0]} (mode without o+x): choose a --dir "
                                      "it can reach, e.g. under /var/lib or /tmp")
        shutil.chown(folder, "postgres", "postgres")
    if not (data / "PG_VERSION").exists():
        subprocess.run(_as_server_user([binary("initdb"), "-D", str(data), "-U", "postgres",
                                        "--auth=trust", "-E", "UTF8"]),
                       check=True, capture_output=True, text=True)
    status = subprocess.run(_as_server_user([binary("pg_ctl"), "-D", str(data), "status"]),
                            capture_output=True, text=True)
    if status.returncode != 0:
        subprocess.run(_as_server_user([
            binary("pg_ctl"), "-D", str(data), "-l", str(folder / "server.log"), "-w",
            "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1", "start"]),
            check=True, capture_output=True, text=True)
    exists = subprocess.run([binary("psql"), "-h", "127.0.0.1", "-p", str(port), "-U",
                             "postgres", "-tAc",
                             f"SELECT 1 FROM pg_database WHERE datname = '{database}'"],
                            capture_output=True, text=True, check=True)
    if exists.stdout.strip() != "1":
        subprocess.run([binary("createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        database], check=True, capture_output=True, text=True)
    return jdbc_url(port, database)


def stop(folder: Path) -> None:
    data = folder.resolve() / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(_as_server_user([binary("pg_ctl"), "-D", str(data), "-m", "fast", "-w",
                                        "stop"]), check=False, capture_output=True)


# The settings Hive's ObjectStore uses, so the tables SchemaTool creates are the ones it reads.
_DN_PROPS = {
    "javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
    "datanucleus.identifierFactory": "datanucleus1",
    "datanucleus.storeManagerType": "rdbms",
    "datanucleus.rdbms.useLegacyNativeValueStrategy": "true",
    "datanucleus.schema.autoCreateAll": "true",
    "datanucleus.rdbms.initializeColumnInfo": "NONE",
    "datanucleus.plugin.pluginRegistryBundleCheck": "LOG",
}


def ensure_schema(url: str, user: str, password: str | None, jdbc_jar: Path) -> None:
    """Create the Hive metastore's tables in `url` before the first session (idempotent).

    Why: left to Hive (`datanucleus.schema.autoCreateAll`), DataNucleus creates a table the
    first time it is needed, inside a metastore call whose open transaction holds locks on the
    tables the new one references; on PostgreSQL that DDL waits on its own transaction forever
    (the first CREATE TABLE of a stage hung). DataNucleus's SchemaTool creates every table of
    the metastore's mapping (`package.jdo` in Spark's hive-metastore jar) in one go, in a JVM of
    its own, in about 2 s; tables that exist are left alone."""
    import tempfile
    import zipfile

    import pyspark

    from jobs.spark.relocation import RootError, _java

    jars = Path(pyspark.__file__).parent / "jars"
    metastore_jar = next(iter(sorted(jars.glob("hive-metastore-*.jar"))), None)
    if metastore_jar is None:
        raise RootError(f"no hive-metastore jar in {jars}: cannot create the metastore schema")
    with tempfile.TemporaryDirectory(prefix="trajpriv-schema-") as tmp:
        jdo = Path(tmp) / "package.jdo"
        jdo.write_bytes(zipfile.ZipFile(metastore_jar).read("package.jdo"))
        props = Path(tmp) / "datanucleus.properties"
        lines = {**_DN_PROPS, "javax.jdo.option.ConnectionURL": url,
                 "javax.jdo.option.ConnectionUserName": user,
                 "javax.jdo.option.ConnectionPassword": password or ""}
        props.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        os.chmod(props, 0o600)
        out = subprocess.run(
            [_java(), "-cp", f"{jars}/*{os.pathsep}{jdbc_jar}",
             "org.datanucleus.store.schema.SchemaTool", "-create", "-api", "JDO", "-props",
             str(props), str(jdo)], capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0 or "completed successfully" not in out.stdout + out.stderr:
        tail = (out.stdout + out.stderr).strip().splitlines()[-3:]
        raise RootError(f"creating the Hive metastore schema in {url} failed: "
                        f"{' | '.join(tail)}; check catalog.postgres_url and that the server runs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.spark.metastore_pg")
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument("--dir", type=Path, default=Path(".postgres"))
    ap.add_argument("--port", type=int, default=5433)
    args = ap.parse_args(argv)
    try:
        if args.action == "start":
            print(start(args.dir, args.port))
        else:
            stop(args.dir)
    except (PostgresUnavailable, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(f"metastore_pg: error: {exc} {detail.strip()[-300:]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

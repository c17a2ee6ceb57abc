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


# The analysts' role: row-level security shows it the published database and what hangs off
# it, nothing else. Each entry is a metastore table and the rows the role may see; the
# subqueries are themselves filtered for the role, so a raw table's storage, columns,
# partitions and statistics stay hidden too. Stages connect as the metastore's owner, which row
# security does not filter.
_BY_TABLE = '"TBL_ID" IN (SELECT "TBL_ID" FROM "TBLS")'
_BY_PARTITION = '"PART_ID" IN (SELECT "PART_ID" FROM "PARTITIONS")'
_BY_STORAGE = '"SD_ID" IN (SELECT "SD_ID" FROM "SDS")'
_ANALYST_ROWS = {
    "DBS": '"NAME" IN ({databases})',
    "DATABASE_PARAMS": '"DB_ID" IN (SELECT "DB_ID" FROM "DBS")',
    "TBLS": '"DB_ID" IN (SELECT "DB_ID" FROM "DBS")',
    **dict.fromkeys(("TABLE_PARAMS", "PARTITION_KEYS", "TAB_COL_STATS", "PARTITIONS",
                     "TBL_PRIVS", "TBL_COL_PRIVS"), _BY_TABLE),
    **dict.fromkeys(("PARTITION_KEY_VALS", "PARTITION_PARAMS", "PART_COL_STATS", "PART_PRIVS",
                     "PART_COL_PRIVS"), _BY_PARTITION),
    "SDS": '"SD_ID" IN (SELECT "SD_ID" FROM "TBLS" UNION SELECT "SD_ID" FROM "PARTITIONS")',
    **dict.fromkeys(("SD_PARAMS", "BUCKETING_COLS", "SORT_COLS"), _BY_STORAGE),
    "CDS": '"CD_ID" IN (SELECT "CD_ID" FROM "SDS")',
    "COLUMNS_V2": '"CD_ID" IN (SELECT "CD_ID" FROM "SDS")',
    "SERDES": '"SERDE_ID" IN (SELECT "SERDE_ID" FROM "SDS")',
    "SERDE_PARAMS": '"SERDE_ID" IN (SELECT "SERDE_ID" FROM "SDS")',
}
POLICY = "trajpriv_published_only"


def analyst_sql(role: str, database: str, password: str | None = None) -> str:
    """The SQL (run as the metastore's owner) that makes `role` a login that reads the
    metastore of `database`, cannot change it, and sees only the published databases."""
    from jobs.spark.tables import PUBLISHED_DATABASES

    if not role.isidentifier():
        raise ValueError(f"analyst role {role!r}: use letters, digits and _")
    databases = ", ".join(f"'{db}'" for db in ("default", *PUBLISHED_DATABASES))
    secret = "NULL" if password is None else "'" + password.replace("'", "''") + "'"
    lines = [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN "
        f"CREATE ROLE {role} LOGIN; END IF; END $$;",
        f"ALTER ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {secret};",
        f'GRANT CONNECT ON DATABASE "{database}" TO {role};',
        f"GRANT USAGE ON SCHEMA public TO {role};",
        f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role};",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role};",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role};",
    ]
    for table, rows in _ANALYST_ROWS.items():
        lines += [f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY;',
                  f'DROP POLICY IF EXISTS {POLICY} ON "{table}";',
                  f'CREATE POLICY {POLICY} ON "{table}" FOR SELECT TO {role} '
                  f"USING ({rows.format(databases=databases)});"]
    return "\n".join(lines) + "\n"


def grant_analyst(url: str, owner: str, owner_password: str | None, role: str,
                  role_password: str | None = None) -> None:
    """Create the metastore's schema if needed, then run `analyst_sql` through psql as `owner`."""
    import re

    match = re.fullmatch(r"jdbc:postgresql://([^:/]+)(?::(\d+))?/([^?]+)(?:\?.*)?", url)
    if match is None:
        raise PostgresUnavailable(f"cannot read host, port and database from {url}")
    host, port, database = match.group(1), match.group(2) or "5432", match.group(3)
    env = dict(os.environ)
    if owner_password is not None:
        env["PGPASSWORD"] = owner_password
    psql = [binary("psql"), "-h", host, "-p", port, "-U", owner, "-d", database, "-v",
            "ON_ERROR_STOP=1", "-q"]
    found = subprocess.run([*psql, "-tAc", """SELECT to_regclass('public."DBS"')"""],
                           check=True, capture_output=True, text=True, env=env)
    if not found.stdout.strip():  # no stage has opened this metastore yet
        ensure_schema(url, owner, owner_password, JDBC_JAR)
    subprocess.run(psql, input=analyst_sql(role, database, role_password), check=True,
                   capture_output=True, text=True, env=env)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.spark.metastore_pg")
    ap.add_argument("action", choices=["start", "stop", "analyst"])
    ap.add_argument("--dir", type=Path, default=Path(".postgres"))
    ap.add_argument("--port", type=int, default=5433)
    ap.add_argument("--url", default=None, help="analyst: the metastore's JDBC URL")
    ap.add_argument("--user", default="postgres", help="analyst: the metastore's owner")
    ap.add_argument("--role", default="trajpriv_analyst", help="analyst: the role to create")
    ap.add_argument("--password-env", default=None,
                    help="analyst: environment variable holding the role's password")
    args = ap.parse_args(argv)
    try:
        if args.action == "start":
            print(start(args.dir, args.port))
        elif args.action == "analyst":
            url = args.url or jdbc_url(args.port)
            password = os.environ.get(args.password_env) if args.password_env else None
            grant_analyst(url, args.user, os.environ.get("PGPASSWORD"), args.role, password)
            print(f"role {args.role} reads the published databases of {url} only")
        else:
            stop(args.dir)
    except (PostgresUnavailable, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(f"metastore_pg: error: {exc} {detail.strip()[-300:]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

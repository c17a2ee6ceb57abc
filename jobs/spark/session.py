"""The SparkSession and the three databases (zones) every stage reads and writes.

One place builds the session so that every stage, test and `trajpriv sql` sees the same catalog:
a Hive metastore (embedded Derby, one Spark process at a time) and a Parquet warehouse, both under
`storage.root`. Zones: `trajpriv_raw` (personal data, the ledger), `trajpriv_trusted` (figures
and study output computed from raw data, not released) and `trajpriv_pub` (what analysts
query). Every file a trajpriv process creates is private to its owner (umask 077 in Python and
`fs.permissions.umask-mode` 077 in Spark's file system): the data root holds raw data, keys and
reports with raw points; analysts reach the published zone through `trajpriv sql`.

One process per root: `acquire_root` takes an exclusive, non-blocking lock on
`<root>/.trajpriv.lock` before any JVM starts, so of two stages started in the same second
exactly one runs and the other exits 2 saying which process holds the root.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.config import Config
from jobs.spark.metastore_lock import check_metastore_free
from jobs.spark.relocation import (
    RootError,
    check_catalog_in_root,
    relocate_catalog,
    require_existing_root,
)
from jobs.spark.tables import PUB_DB, RAW_DB, TRUSTED_DB

log = logging.getLogger(__name__)

PRIVATE_UMASK = 0o077
ROOT_LOCK = ".trajpriv.lock"
_held_locks: dict[Path, int] = {}

# Settings every trajpriv session needs; config `spark.conf` may override any of them.
_BASE_CONF = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    # Plain log lines, not Spark 4's JSON records (a missing table logged ~10 KB of JSON).
    "spark.log.structuredLogging.enabled": "false",
    "spark.ui.enabled": "false",
    # Files Spark writes (tables, staging, the metastore) are private: 0600 files, 0700 folders.
    "spark.hadoop.fs.permissions.umask-mode": "077",
    "spark.driver.memory": "6g",
    "spark.sql.adaptive.enabled": "true",
    # List a table's partition folders on the driver up to this many (a parallel listing is a
    # Spark job of one task per folder: seconds for a 182-day table on a local disk). Clusters
    # with remote storage and huge tables may lower it again through `spark.conf`.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
    # A barrier stage (TorchDistributor) that cannot get its slots fails fast, not after 10 min.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
}


def catalog_conf(cfg: Config) -> dict[str, str]:
    """The settings that point a Spark session at this project's catalog.

    Data engineers pass the same settings to `pyspark` or `spark-sql` (README, "Query the
    published tables") to open the catalog without trajpriv.
    """
    storage = cfg.storage
    if cfg.catalog.metastore == "postgres":
        return postgres_conf(cfg)
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(storage.warehouse),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={storage.metastore};create=true"
        ),
        # Derby's own files (the metastore, derby.log) private to the owner, also when the JVM
        # is spark-submit's and did not inherit the Python driver's umask.
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={storage.root.resolve()} "
        "-Dderby.storage.useDefaultFilePermissions=false",
    }


def postgres_conf(cfg: Config, analyst: bool = False) -> dict[str, str]:
    """The Hive metastore in PostgreSQL (`catalog.metastore: postgres`): tables created by
    DataNucleus on first use; the JDBC driver on the driver's class path (Spark shares the
    `org.postgresql` classes with its Hive client). `analyst`: as `catalog.analyst_user`, the
    role that reads the published databases only and changes nothing (`analyst_conf`)."""
    cat = cfg.catalog
    if not cat.jdbc_jar.exists():
        raise RootError(f"catalog.metastore=postgres needs the PostgreSQL JDBC driver at "
                        f"{cat.jdbc_jar}: install Debian's libpostgresql-jdbc-java (`make "
                        "postgres`) or set catalog.jdbc_jar")
    conf = {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(cfg.storage.warehouse),
        "spark.hadoop.javax.jdo.option.ConnectionURL": cat.postgres_url,
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
        "spark.hadoop.javax.jdo.option.ConnectionUserName": (
            cat.analyst_user if analyst else cat.postgres_user),
        # the schema is created before the first session (ensure_postgres_schema); a table
        # Hive still finds missing is created on use
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.driver.extraClassPath": str(cat.jdbc_jar),
    }
    password = postgres_password(cfg, analyst)
    if password is not None:
        conf["spark.hadoop.javax.jdo.option.ConnectionPassword"] = password
    return conf


def analyst_conf(cfg: Config) -> dict[str, str]:
    """The catalog settings of an analysts' session (the endpoints of `trajpriv serve`): the
    PostgreSQL metastore as `catalog.analyst_user`, so raw and trusted tables are not in its
    catalog at all and it cannot change the metastore; no tables created on use (the role may
    not); SQL on file paths off. Reading files is then left to the OS: the endpoints run as an
    account of `publish.group`, which the raw and trusted folders do not admit."""
    if cfg.catalog.metastore != "postgres":
        raise RootError("the analysts' endpoints need catalog.metastore=postgres: the embedded "
                        "Derby metastore admits one process (use `trajpriv sql` there)")
    return {**postgres_conf(cfg, analyst=True),
            "spark.hadoop.datanucleus.schema.autoCreateAll": "false",
            "spark.sql.runSQLOnFiles": "false"}


def ensure_postgres_schema(root: Path, cfg: Config) -> None:
    """The metastore's tables exist in `catalog.postgres_url` before Hive opens it (once per
    URL and root: recorded in `<root>/metastore_schema.json`); see jobs.spark.metastore_pg."""
    import json

    from jobs.spark.metastore_pg import ensure_schema

    cat = cfg.catalog
    record = root / "metastore_schema.json"
    if _recorded_url(record) == cat.postgres_url:
        return
    ensure_schema(cat.postgres_url, cat.postgres_user, postgres_password(cfg), cat.jdbc_jar)
    record.write_text(json.dumps({"url": cat.postgres_url}) + "\n")


def _recorded_url(record: Path) -> str | None:
    """The URL whose schema `record` says was created (None: none yet, or unreadable)."""
    import json

    try:
        return json.loads(record.read_text()).get("url")
    except (OSError, ValueError):
        return None


def postgres_password(cfg: Config, analyst: bool = False) -> str | None:
    """The metastore password (the analysts' role's with `analyst`) from the environment
    variable the config names (never from the config itself); RootError when it names one that
    is not set."""
    cat = cfg.catalog
    name = cat.analyst_password_env if analyst else cat.postgres_password_env
    if not name:
        return None
    password = os.environ.get(name)
    if password is None:
        key = "analyst_password_env" if analyst else "postgres_password_env"
        raise RootError(f"catalog.{key} names {name}, which is not set in this "
                        "environment: export it and rerun")
    return password


def get_spark(cfg: Config, readonly: bool = False, serving: bool = False) -> SparkSession:
    """Build (or return the active) session for `cfg` and make sure the three databases exist.

    `readonly` (trajpriv sql, trajpriv budget): with a shared metastore (postgres) the session
    does not take the root's writer lock and leaves staging alone, so it runs beside a stage;
    with the embedded one it waits like any process (Derby admits one JVM).
    PYSPARK_PYTHON is set to this interpreter so Python workers find pandas and the project.
    `serving`: the warm `trajpriv sql` server's own session (it never asks itself to stop).
    """
    os.umask(PRIVATE_UMASK)
    root = cfg.storage.root.resolve()
    if readonly:
        require_existing_root(root)
        check_owner(root)
    check_root(root, cfg.storage.min_free_mb)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(root, 0o700)  # the data root holds raw data and keys: its owner's only
    shared = cfg.catalog.metastore == "postgres"
    writer = not (readonly and shared)
    if writer:
        acquire_root(root, evict_sql_server=not serving)
        _published_group[root] = cfg.publish.group
        harden_tree(root, cfg.publish.group)
    if not shared:
        check_metastore_free(cfg.storage.metastore, cfg.storage.metastore_wait_s)  # 1 JVM
        relocate_catalog(root, cfg.storage.metastore, RAW_DB)  # a copied or moved root
    else:
        ensure_postgres_schema(root, cfg)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {**_BASE_CONF, **catalog_conf(cfg), **{k: str(v) for k, v in cfg.spark.conf.items()}}
    quiet_jvm_logs({"spark.master": cfg.spark.master, "spark.app.name": cfg.spark.app_name,
                    **settings}, jvm_log_path(root))
    if shared:
        jdbc_driver_in_running_jvm(cfg)
    builder = SparkSession.builder.master(cfg.spark.master).appName(cfg.spark.app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("INFO" if verbose() else "ERROR")
    ensure_databases(spark, cfg, clean_staging=writer)
    check_catalog_in_root(spark, root, (RAW_DB, TRUSTED_DB, PUB_DB))
    return spark


def jdbc_driver_in_running_jvm(cfg: Config) -> None:
    """Under spark-submit, the PostgreSQL JDBC driver for the Hive client, from
    `catalog.jdbc_jar`.

    Why: spark-submit starts the driver JVM before this process reads its config, so the
    `spark.driver.extraClassPath` of `postgres_conf` comes too late for its class path, and
    Hive failed ("org.postgresql.Driver was not found in the CLASSPATH"; the DAG's stages with
    the PostgreSQL metastore on a standalone cluster). The jar is added to the class loader
    spark-submit gives the application (which Hive's client resolves classes through) and the
    driver registered through Spark's JDBC DriverRegistry: java.sql.DriverManager refuses a
    driver its caller's class loader cannot see, and Spark's wrapper is one it can. A JVM this
    process launched has the jar on its class path already; a jar also on the command line
    (`--driver-class-path`) is harmless twice."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # the JVM is not spark-submit's
        return
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    jvm = SparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    mutable = jvm.java.lang.Class.forName("org.apache.spark.util.MutableURLClassLoader")
    if loader is None or not mutable.isInstance(loader):
        log.debug("no mutable class loader to add %s to", cfg.catalog.jdbc_jar)
        return
    loader.addURL(jvm.java.io.File(str(cfg.catalog.jdbc_jar)).toURI().toURL())
    jvm.org.apache.spark.sql.execution.datasources.jdbc.DriverRegistry.register(
        "org.postgresql.Driver")


def check_root(root: Path, min_free_mb: float) -> None:
    """One line (RootError, exit 2) for a root that cannot hold a run: a file, a folder this
    user cannot write, or a disk with less than `min_free_mb` free (a stage that runs out of
    space midway leaves half-written staging behind)."""
    import shutil

    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    if root.exists() and not root.is_dir():
        raise RootError(f"storage.root {root} is a file, not a folder: point storage.root at a "
                        "folder (--set storage.root=<folder>) or move the file away")
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        raise RootError(f"storage.root {root}: {existing} is not writable by this user: "
                        "choose a root you own (--set storage.root=<folder>) or fix its mode")
    if existing is not None:
        free_mb = shutil.disk_usage(existing).free / 2**20
        if free_mb < min_free_mb:
            raise RootError(f"storage.root {root}: only {free_mb:.0f} MiB free on its disk, "
                            f"below storage.min_free_mb={min_free_mb:g}: free space or move "
                            "the root to a larger disk")


def acquire_root(root: Path, evict_sql_server: bool = True) -> None:
    """Hold `<root>/.trajpriv.lock` (flock, exclusive, non-blocking) for this process's life.

    Why a lock of our own before Derby's: two processes started in the same second both found
    Derby's lock free and the loser died inside Hive. flock is atomic, released by the kernel
    when the process ends (a killed stage never leaves it held), and not inherited by the JVM.
    When the holder is the warm `trajpriv sql` server of this root (`evict_sql_server`), it is
    asked to stop, waited for, and the lock taken: queries must never keep a stage from its
    root.
    """
    import fcntl

    if root in _held_locks:
        return
    path = root / ROOT_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not (evict_sql_server and _stop_sql_server(root)):
                raise
            _take_released_lock(fd, EVICTED_LOCK_WAIT_S)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        from jobs.spark.metastore_lock import MetastoreBusyError

        raise MetastoreBusyError(
            f"data root {root} is in use by another trajpriv process ({holder}); one process "
            "at a time may open a root (the embedded metastore admits one): wait until it ends "
            "and rerun, or give this job its own storage.root. This process wrote nothing."
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}\n".encode())
    _held_locks[root] = fd


#: How long a stage waits for the lock of a sql server it has just stopped. Its pid can read as
#: gone (the thread-group leader a zombie) while its other threads still hold the open files:
#: the kernel drops the flock only when the last thread has exited (seen at load 8).
EVICTED_LOCK_WAIT_S = 60.0


def _take_released_lock(fd: int, wait_s: float) -> None:
    """flock(fd) as soon as the stopped holder's last thread lets it go; BlockingIOError if it
    is still held after `wait_s` (then held by someone else, which the caller reports)."""
    import fcntl

    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _stop_sql_server(root: Path) -> bool:
    """Stop the warm `trajpriv sql` server of `root`, if one runs; whether one was stopped."""
    from jobs.sql.client import ServerError, stop_server

    try:
        pid = stop_server(root)
    except ServerError as exc:
        log.warning("%s", exc)
        return False
    if pid is not None:
        log.info("stopped the trajpriv sql server of %s (pid %d): this stage needs the root",
                 root, pid)
    return pid is not None


def verbose() -> bool:
    """Whether Spark's and the JVM's INFO lines are wanted (`--verbose` sets TRAJPRIV_VERBOSE)."""
    return os.environ.get("TRAJPRIV_VERBOSE", "") not in ("", "0")


def jvm_log_path(root: Path) -> Path:
    """The stage log that a JVM started here writes its stderr to (Spark's log4j lines, the
    launcher's hostname and module warnings): `<root>/logs/spark.log`."""
    return root / "logs" / "spark.log"


def quiet_jvm_logs(settings: dict[str, str], log_path: Path | None = None) -> None:
    """Spark's log level WARN before the SparkContext starts, INFO with `--verbose`; the JVM's
    stderr goes to `log_path` unless `--verbose`.

    Why before: `setLogLevel` on the session comes after the context's ~40 INFO lines of
    start-up. The JVM (launched here, or spark-submit's, already running) is reached through
    py4j before any context exists; a JVM launched here gets the session's `settings` (memory,
    class path, Java options) as it would from the builder. Why its stderr goes to the log:
    the launcher scripts and the JVM print start-up warnings (loopback hostname, incubator
    modules, log4j profile, native Hadoop library) before any log level applies; trajpriv's own
    errors reach the terminal as one line from the harness, the JVM's detail stays in the log.
    """
    from pyspark import SparkConf, SparkContext

    if SparkContext._active_spark_context is not None:
        return
    try:
        conf = SparkConf(loadDefaults=False).setAll(settings.items())
        gateway = None
        if log_path is not None and not verbose() and SparkContext._gateway is None \
                and "PYSPARK_GATEWAY_PORT" not in os.environ:
            gateway = _launch_gateway_logged(conf, log_path)
        SparkContext._ensure_initialized(gateway=gateway, conf=conf)
        jvm = SparkContext._jvm
        level = jvm.org.apache.logging.log4j.Level.toLevel("INFO" if verbose() else "WARN")
        jvm.org.apache.logging.log4j.core.config.Configurator.setRootLevel(level)
    except Exception as exc:  # a JVM without log4j2 core: Spark's own defaults stand
        log.debug("could not set the JVM's log level: %s", exc)


def _launch_gateway_logged(conf, log_path: Path):
    """Start the JVM with its stderr appended to `log_path` (the file stays open in the JVM)."""
    from pyspark.java_gateway import launch_gateway

    log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(log_path, "ab") as stream:
        stream.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} JVM started by pid "
                     f"{os.getpid()}: {' '.join(sys.argv)}\n".encode())
        stream.flush()
        return launch_gateway(conf, popen_kwargs={"stderr": stream})


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 300, 0).decode(errors="replace").strip() or "pid unknown"
    except OSError:
        return "pid unknown"


def ensure_databases(spark: SparkSession, cfg: Config, clean_staging: bool = True) -> None:
    """Create the three zones' databases when missing (raw and trusted folders mode 0700);
    a writer (the holder of the root's lock) also removes staging that killed runs left."""
    warehouse = cfg.storage.warehouse
    warehouse.mkdir(parents=True, exist_ok=True, mode=0o700)
    for db in (RAW_DB, TRUSTED_DB, PUB_DB):
        location = warehouse / f"{db}.db"
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{location}'")
    for db in (RAW_DB, TRUSTED_DB):
        folder = warehouse / f"{db}.db"
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    secrets = cfg.storage.secrets
    secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets, 0o700)
    if clean_staging:
        remove_stale_staging(cfg)


def remove_stale_staging(cfg: Config) -> list[str]:
    """Remove staging folders a killed stage left (raw copies nothing else cleans).

    Only folders of runs that are not live: this process holds the root's lock, so no other
    trajpriv process is writing staging under it now.
    """
    import shutil

    staging = cfg.storage.root.resolve() / "staging"
    removed = []
    if staging.is_dir():
        for child in staging.iterdir():
            if (child / "READY.json").exists():  # an ingest owed its writes: finished, not lost
                continue
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
            removed.append(child.name)
    if removed:
        log.warning("removed staging left by interrupted runs: %s", ", ".join(sorted(removed)))
    return removed


def stop_spark(spark: SparkSession | None) -> None:
    """Stop the session so the embedded Derby metastore is released for the next process."""
    if spark is not None:
        spark.stop()
    for root in list(_held_locks):
        harden_tree(root, _published_group.get(root))


#: The `publish.group` of each root this process writes (its published zone opened to it).
_published_group: dict[Path, str | None] = {}


def check_owner(root: Path) -> None:
    """RootError unless this account owns `root`: a Spark session opens the whole catalog and
    its files, which are the owner's alone; another account (an analyst) reads the published
    zone through the endpoints of `trajpriv serve`."""
    owner = root.stat().st_uid
    if owner != os.geteuid():
        raise RootError(f"storage.root {root} belongs to uid {owner}, not this account (uid "
                        f"{os.geteuid()}): its raw and trusted zones are its owner's only; "
                        "analysts query the published zone through `trajpriv serve` (JDBC/ODBC, "
                        "Spark Connect, or `trajpriv sql` while it runs)")


def harden_tree(root: Path, group: str | None = None) -> int:
    """Take group and other bits off everything under `root`, except, with a `group`
    (`publish.group`), the published zone: its folders 0750 and files 0640 of that group, and
    the root and warehouse folders 0710 so the group can pass through to it (not list them).
    Returns how many paths it changed.

    Why, beside the umask: under `spark-submit` the JVM is the parent process and keeps the
    submitting shell's umask (Derby's metastore files, derby.log), so files it creates can be
    0644 until a trajpriv process tightens them; and Spark writes the published zone's new files
    0600 too. Runs at every session start and stop.
    """
    from jobs.spark.tables import PUBLISHED_DATABASES

    gid = _group_id(group) if group else None
    shared = ({root / "warehouse" / f"{db}.db" for db in PUBLISHED_DATABASES}
              if gid is not None else set())
    passage = {root, root / "warehouse"} if gid is not None else set()
    changed = 0
    for folder, _dirs, files in os.walk(root):
        here = Path(folder)
        if here in shared or shared & set(here.parents):
            changed += _share(here, files, gid)
            continue
        if here in passage:  # the group may enter it, not list what else it holds
            changed += _chmod(folder, 0o7700, 0o010, gid)
        else:
            changed += _chmod(folder, 0o7700, 0)
        for name in files:
            changed += _chmod(os.path.join(folder, name), 0o7700, 0)
    return changed


def _group_id(group: str) -> int:
    import grp

    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise RootError(f"publish.group {group!r} is not a group of this system: create it "
                        f"(groupadd {group}) or unset publish.group") from None


def _share(folder: Path, files: list[str], gid: int) -> int:
    """The published folder `folder` 0750 and its files 0640, of group `gid`."""
    changed = _chmod(str(folder), 0o7700, 0o050, gid)
    for name in files:
        changed += _chmod(str(folder / name), 0o7700, 0o040, gid)
    return changed


def _chmod(path: str, keep: int, add: int, gid: int | None = None) -> int:
    """`path`'s mode to (mode & keep) | add (and its group to `gid`); 1 if it changed."""
    try:
        st = os.lstat(path)
        if os.path.islink(path):
            return 0
        mode = (st.st_mode & keep) | add
        changed = 0
        if gid is not None and st.st_gid != gid:
            os.chown(path, -1, gid)
            changed = 1
        if st.st_mode & 0o7777 != mode:
            os.chmod(path, mode)
            changed = 1
        return changed
    except OSError:  # vanished meanwhile (a task's temporary file)
        return 0

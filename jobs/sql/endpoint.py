"""`trajpriv serve`: the analysts' endpoints over the published zone, in one Spark driver.

Spark's own Thrift JDBC/ODBC server (HiveServer2 protocol: beeline, DBeaver, Superset, Tableau,
JDBC and ODBC drivers, PyHive and impyla) on `serve.host:serve.port`, and Spark Connect
(`sc://serve.host:serve.connect_port`, pyspark's `SparkSession.builder.remote`) as a plugin of
the same driver, so both share one catalog and one warm JVM. It is started the way Spark's
`sbin/start-thriftserver.sh` starts it (`spark-submit --class HiveThriftServer2 spark-internal`,
detached, a pid file and a log), ready when both ports accept connections, and stopped like
`stop-thriftserver.sh` (SIGTERM to the pid of the pid file, after checking that pid is still
that server).

What it may read: the session is an analysts' session (`jobs.spark.session.analyst_conf`): the
PostgreSQL metastore as the analysts' role, whose rows show the published databases only, and
no SQL on file paths. With `publish.group` set, it must run as an account of that group, not as
the data root's owner: then the operating system, not only the catalog, keeps raw and trusted
files from any query it runs (a Connect client can call `spark.read.parquet(path)`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from jobs.sql.client import ServerError, runtime_dir

THRIFT_CLASS = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
START_TIMEOUT_S = 600.0  # a JVM, the metastore and two listeners on a loaded machine
STOP_TIMEOUT_S = 120.0


def spark_home() -> Path:
    """pyspark's own distribution: bin/spark-submit, bin/beeline and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def scratch_dir(cfg) -> Path:
    """The endpoints' own folder (pid file, log, Hive scratch, compiled guard): `serve.scratch`,
    else `/tmp/trajpriv-<uid>`; 0700, this account's own."""
    if cfg.serve.scratch is None:
        return runtime_dir()
    folder = Path(cfg.serve.scratch).resolve()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid():
        raise ServerError(f"serve.scratch {folder} is not this account's own folder")
    os.chmod(folder, 0o700)
    return folder


def pid_path(cfg) -> Path:
    return scratch_dir(cfg) / f"serve-{cfg.serve.port}.pid"


def log_path(cfg) -> Path:
    return scratch_dir(cfg) / f"serve-{cfg.serve.port}.log"


GUARD_SOURCES = Path(__file__).resolve().parent / "java"
GUARD_CLASS = "trajpriv.PublishedOnly"
CONNECT_GATE_CLASS = "trajpriv.ConnectGate"
TIMEOUT_CONF = "spark.trajpriv.serve.queryTimeoutSeconds"  # read by QueryLimits.java


def guard_classes(cfg) -> Path:
    """The compiled guard (`PublishedOnly`, a Spark session extension; `QueryLimits`;
    `ConnectGate`, a Spark Connect interceptor), built with the JDK's javac against pyspark's
    jars once per version of the sources, in the endpoints' own folder."""
    import hashlib

    sources = sorted(GUARD_SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.name.encode() + p.read_bytes() for p in sources))
    folder = scratch_dir(cfg) / f"guard-{digest.hexdigest()[:16]}"
    if all((folder / "trajpriv" / f"{p.stem}.class").exists() for p in sources):
        return folder
    from jobs.spark.relocation import _java

    javac = Path(_java()).resolve().with_name("javac")
    if not javac.exists():
        raise ServerError(f"`trajpriv serve` compiles its read-only guard with javac, not found "
                          f"beside {_java()}: install the JDK (openjdk-17-jdk-headless)")
    tmp = folder.with_name(folder.name + f".{os.getpid()}")
    out = subprocess.run([str(javac), "-nowarn", "-d", str(tmp), "-cp",
                          str(spark_home() / "jars" / "*"), *map(str, sources)],
                         capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise ServerError(f"compiling the guard ({GUARD_SOURCES}) failed: "
                          f"{' | '.join(out.stderr.strip().splitlines()[:3])}")
    try:
        os.replace(tmp, folder)
    except OSError:  # another start compiled it meanwhile: theirs is the same source
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def settings(cfg) -> dict[str, str]:
    """The driver's Spark settings: trajpriv's base settings, the analysts' catalog, the
    config's `spark.conf`, then what no config may loosen: the guard, Spark Connect's plugin,
    address and gate, FAIR scheduling (PublishedOnly gives each session a pool), the limits,
    no SQL scripting and no Python worker reuse across queries."""
    from jobs.spark.session import _BASE_CONF, analyst_conf

    user = {k: str(v) for k, v in cfg.spark.conf.items()}
    catalog = analyst_conf(cfg)
    classpath = os.pathsep.join(p for p in (str(guard_classes(cfg)),
                                            catalog.get("spark.driver.extraClassPath")) if p)
    return {**_BASE_CONF, **catalog, **user,
            "spark.driver.extraClassPath": classpath,
            "spark.sql.extensions": GUARD_CLASS,
            "spark.app.name": "trajpriv endpoints",
            "spark.plugins": CONNECT_PLUGIN,
            "spark.connect.grpc.binding.address": cfg.serve.host,
            "spark.connect.grpc.binding.port": str(cfg.serve.connect_port),
            "spark.connect.grpc.interceptor.classes": CONNECT_GATE_CLASS,
            "spark.scheduler.mode": "FAIR",
            "spark.driver.maxResultSize": f"{cfg.serve.max_result_mb}m",
            TIMEOUT_CONF: str(cfg.serve.query_timeout_s),
            "spark.sql.scripting.enabled": "false",
            "spark.sql.runSQLOnFiles": "false",
            "spark.sql.legacy.setCommandRejectsSparkCoreConfs": "true"}


def hiveconf(cfg, scratch: Path) -> dict[str, str]:
    """HiveServer2's settings: address, authentication, no impersonation, a scratch folder of
    this account's own (the shared /tmp/hive may belong to another user)."""
    return {"hive.server2.thrift.bind.host": cfg.serve.host,
            "hive.server2.thrift.port": str(cfg.serve.port),
            "hive.server2.authentication": cfg.serve.auth,
            "hive.server2.enable.doAs": "false",
            "hive.exec.scratchdir": str(scratch / "hive"),
            "hive.exec.local.scratchdir": str(scratch / "hive-local"),
            "hive.downloaded.resources.dir": str(scratch / "resources"),
            **cfg.serve.hiveconf}


def command(cfg, scratch: Path) -> list[str]:
    """spark-submit of HiveThriftServer2, as `sbin/start-thriftserver.sh` runs it."""
    cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", THRIFT_CLASS,
           "--master", cfg.spark.master, "--name", "trajpriv endpoints"]
    for key, value in settings(cfg).items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    for key, value in hiveconf(cfg, scratch).items():
        cmd += ["--hiveconf", f"{key}={value}"]
    return cmd


def check_principal(cfg, root: Path) -> None:
    """With `publish.group` set, refuse to serve as the data root's owner: that account can
    read every raw file, and analysts' queries (or a Connect client's file read) run as it."""
    group = cfg.publish.group
    if group and root.stat().st_uid == os.geteuid():
        raise ServerError(f"publish.group is {group}: run `trajpriv serve` as an account of "
                          f"that group, not as the owner of {root} (e.g. `runuser -u "
                          "trajpriv-serve -- trajpriv serve ...`), so the endpoints cannot read "
                          "raw files")


def running_pid(cfg) -> int | None:
    """The pid of this port's endpoints when its pid file names a live HiveThriftServer2."""
    try:
        pid = int(pid_path(cfg).read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if THRIFT_CLASS.encode() in cmdline else None


def start(cfg, wait: bool = False) -> int:
    """Start the endpoints detached and return the pid once both ports answer (`wait`: in the
    foreground, until it ends, for a service manager). ServerError with the log's last lines
    when it cannot start."""
    from jobs.spark.relocation import require_existing_root

    root = cfg.storage.root.resolve()
    require_existing_root(root)
    check_principal(cfg, root)
    pid = running_pid(cfg)
    if pid is not None:
        raise ServerError(f"the endpoints of port {cfg.serve.port} already run (pid {pid}); "
                          "`trajpriv serve --stop` first")
    scratch = scratch_dir(cfg) / f"serve-{cfg.serve.port}"
    scratch.mkdir(mode=0o700, exist_ok=True)
    os.umask(0o077)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_HOME": str(spark_home())}
    with open(log_path(cfg), "ab") as log:
        proc = subprocess.Popen(command(cfg, scratch), cwd=scratch, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=not wait)
    pid_path(cfg).write_text(f"{proc.pid}\n")
    if wait:
        return proc.wait()
    try:
        _wait_ready(cfg, proc)
    except BaseException:
        if proc.poll() is None:
            proc.terminate()
        proc.wait()
        pid_path(cfg).unlink(missing_ok=True)
        raise
    proc.returncode = 0  # it lives on, detached; not ours to wait for
    return proc.pid


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


def _wait_ready(cfg, proc: subprocess.Popen) -> None:
    ports = (cfg.serve.port, cfg.serve.connect_port)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all(_answers(cfg.serve.host, p) for p in ports):
        if proc.poll() is not None:
            raise ServerError(f"the endpoints stopped while starting (exit {proc.returncode}): "
                              f"{_last_error(log_path(cfg))}; see {log_path(cfg)}")
        if time.monotonic() > deadline:
            raise ServerError(f"the endpoints did not open ports {ports} within "
                              f"{START_TIMEOUT_S:.0f} s; see {log_path(cfg)}")
        time.sleep(0.5)


def _last_error(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    errors = [ln for ln in lines if "Exception" in ln or "ERROR" in ln]
    return (errors or lines or ["no output"])[-1].strip()[:400]


def stop(cfg) -> int | None:
    """SIGTERM to the running endpoints and wait until they are gone; their pid, or None.

    No SIGKILL: the driver's shutdown hooks release the metastore and the root's lock, so a
    driver that does not stop is the operator's to look at (the error names its pid and log)."""
    pid = running_pid(cfg)
    if pid is None:
        pid_path(cfg).unlink(missing_ok=True)
        return None
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while running_pid(cfg) == pid and _alive(pid):
        if time.monotonic() > deadline:
            raise ServerError(f"the endpoints (pid {pid}) did not stop within "
                              f"{STOP_TIMEOUT_S:.0f} s of SIGTERM; see {log_path(cfg)}")
        time.sleep(0.2)
    pid_path(cfg).unlink(missing_ok=True)
    return pid


def _alive(pid: int) -> bool:
    from jobs.sql.client import _alive as alive

    return alive(pid)


def serving(cfg) -> bool:
    """Whether the endpoints of `cfg` run: then `trajpriv sql` is their client (PostgreSQL
    metastore only; with embedded Derby no endpoint can run beside the warm server)."""
    return cfg.catalog.metastore == "postgres" and _answers(cfg.serve.host,
                                                            cfg.serve.connect_port)


def connect_url(cfg) -> str:
    return f"sc://{cfg.serve.host}:{cfg.serve.connect_port}"


def jdbc_url(cfg) -> str:
    return f"jdbc:hive2://{cfg.serve.host}:{cfg.serve.port}/trajpriv_pub"

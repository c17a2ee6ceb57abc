"""The analysts' endpoints of `trajpriv serve` and the two principals (service user, analyst).

One PostgreSQL metastore, one data root (a published table and view, a raw and a trusted table)
and one endpoint driver for the whole module. As root, the module works as an operator would:
it creates an analyst OS account and group (`publish.group`), gives the metastore's owner role
a password (only the analysts' role may log in without one), and runs `trajpriv serve` as the
analyst; elsewhere the endpoints run as this user and the two-principal test skips, saying why.
Each client (beeline, impyla's DB-API, Spark Connect, `trajpriv sql`) reads a published table
and is refused a raw one; the analyst account reads every published table and view and no raw
or trusted row by any path. The red-team catalogue (tests/jobs/endpoint_attacks.py) sends
every construct that would run user code or reach past the published tables through each
client, and the fairness test runs short queries beside a runaway one.
"""

from __future__ import annotations

import functools
import gc
import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from jobs.config import load_config
from jobs.spark import metastore_pg
from jobs.sql import client, endpoint
from tests.conftest import JVM_OPTS
from tests.jobs.endpoint_attacks import CONNECT_ATTACKS, CONNECT_RUNNER, SQL_ATTACKS, slug
from tests.reliability.test_postgres_metastore import (
    _free_ports,
    _needs_postgres,
    _server_folder,
    start_on_a_free_port,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: The endpoints' per-query limit in this module: long enough for every other query here on a
#: loaded machine, short enough for the fairness test to see the runaway query cancelled.
QUERY_TIMEOUT_S = 40

ROOT = Path(__file__).resolve().parents[2]
ANALYST, GROUP = "trajpriv_t_analyst", "trajpriv_t_analysts"
OWNER_PASSWORD = "owner-only-secret"
PUBLISHED = {"trajpriv_pub.locations": 3, "trajpriv_pub.location_names": 3}
RAW = "trajpriv_raw.t_points"
TRUSTED = "trajpriv_trusted.t_figures"
BUILD = """
import sys
from jobs.config import load_config
from jobs.spark.session import get_spark, stop_spark
from jobs.spark.catalog import write_table
from jobs.spark.tables import LOCATIONS
cfg = load_config(None, sys.argv[1:])
spark = get_spark(cfg)
df = spark.createDataFrame([(1, 31.0, 121.0, "a"), (2, 31.5, 121.5, "a"), (3, 30.0, 120.0, "b")],
                           "loc_id int, lat double, lon double, dataset string")
write_table(df, LOCATIONS)
spark.sql("CREATE OR REPLACE VIEW trajpriv_pub.location_names AS "
          "SELECT loc_id, dataset FROM trajpriv_pub.locations")
write_table(spark.createDataFrame([("u1", "secret", "a")], "user_id string, note string, "
            "dataset string"), "RAW", partition_by=["dataset"])
write_table(spark.createDataFrame([(1.5, "a")], "value double, dataset string"), "TRUSTED",
            partition_by=["dataset"])
stop_spark(spark)
""".replace('"RAW"', repr(RAW)).replace('"TRUSTED"', repr(TRUSTED))


def _as_root() -> bool:
    return os.geteuid() == 0 and shutil.which("runuser") is not None


def _analyst_account() -> None:
    """The analyst OS user and its group, created once (left for the next run: harmless)."""
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", GROUP], check=True)
    try:
        pwd.getpwnam(ANALYST)
    except KeyError:
        subprocess.run(["useradd", "-M", "-N", "-g", GROUP, "-s", "/usr/sbin/nologin", ANALYST],
                       check=True)


#: The system's Python of the venv's version: the venv's own interpreter may live in the
#: owner's home (pyenv under /root, 0700), which another account cannot enter.
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


def _analyst_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("XDG_", "TRAJPRIV_")) and k not in CONNECT_ENV}
    # the analyst's Python finds the venv's packages and the project; the suite's class-data
    # archive is the owner's file, so the analyst's JVMs go without it
    path = os.pathsep.join([str(ROOT), sysconfig.get_paths()["purelib"]])
    return {**env, "HOME": str(home), "PYTHONPATH": path, "SPARK_SUBMIT_OPTS": JVM_OPTS}


@functools.cache
def _analyst_python(home: Path) -> str | None:
    """An interpreter the analyst can run with the venv's packages, or None."""
    for python in (sys.executable, str(SYSTEM_PYTHON)):
        out = subprocess.run(["runuser", "-u", ANALYST, "--", python, "-c",
                              "import pyspark, impala, jobs.cli"], cwd=home,
                             env=_analyst_env(home), capture_output=True, timeout=120)
        if out.returncode == 0:
            return python
    return None


def _run(args: list[str], as_analyst: bool, home: Path) -> subprocess.CompletedProcess:
    """`python *args` as this user, or as the analyst (`runuser`) with its own environment."""
    if as_analyst:
        cmd = ["runuser", "-u", ANALYST, "--", _analyst_python(home) or sys.executable, *args]
        env = _analyst_env(home)
    else:
        cmd, env = [sys.executable, *args], {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=home if as_analyst else ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def _lock_owner_role(folder: Path, url: str) -> None:
    """The metastore's owner role needs a password from now on; the analysts' role logs in
    without one (pg_hba), as an operator sets it up."""
    port = url.split(":")[3].split("/")[0]
    subprocess.run([metastore_pg.binary("psql"), "-h", "127.0.0.1", "-p", port, "-U", "postgres",
                    "-c", f"ALTER ROLE postgres PASSWORD '{OWNER_PASSWORD}'"], check=True,
                   capture_output=True)
    hba = folder / "data" / "pg_hba.conf"
    hba.write_text("local all all trust\n"
                   "host all trajpriv_analyst 127.0.0.1/32 trust\n"
                   "host all all 127.0.0.1/32 scram-sha-256\n")
    subprocess.run(metastore_pg._as_server_user([metastore_pg.binary("pg_ctl"), "-D",
                                                 str(folder / "data"), "reload"]),
                   check=True, capture_output=True)


@pytest.fixture(scope="module")
def served():
    """(settings, their --set list, the analyst's home or None, why there is no analyst) with
    the endpoints running until the module ends."""
    _needs_postgres()
    base = Path(tempfile.mkdtemp(prefix="trajpriv-endpoints-", dir="/tmp"))
    os.chmod(base, 0o711)  # the analyst may pass through to the root, nothing more
    home = base / "analyst-home"
    two = _as_root()
    why_not = "not root (or no runuser): cannot create the analyst OS account"
    with _server_folder() as pg:
        url = start_on_a_free_port(pg, _free_ports())
        ports = _free_ports()
        sets = [f"storage.root={base / 'data'}", "spark.master=local[2]",
                "spark.conf.spark.sql.shuffle.partitions=1", "spark.conf.spark.driver.memory=1g",
                "catalog.metastore=postgres", f"catalog.postgres_url={url}",
                f"serve.port={next(ports)}", f"serve.connect_port={next(ports)}",
                f"serve.query_timeout_s={QUERY_TIMEOUT_S}"]
        if two:
            _analyst_account()
            sets.append(f"publish.group={GROUP}")
            home.mkdir(mode=0o700)
            shutil.chown(home, ANALYST, GROUP)
            if _analyst_python(home) is None:
                two = False  # the endpoints then run as this user; the OS test skips, saying why
                why_not = (f"the analyst account cannot run {sys.executable} nor "
                           f"{SYSTEM_PYTHON} with the venv's packages")
                sets.remove(f"publish.group={GROUP}")
        subprocess.run([sys.executable, "-c", BUILD, *sets], cwd=ROOT, check=True, timeout=600)
        metastore_pg.grant_analyst(url, "postgres", None, "trajpriv_analyst")
        _lock_owner_role(pg, url)
        serve = ["-m", "jobs.cli", "serve", *(f"--set={s}" for s in sets)]
        out = _run(serve, two, home if two else ROOT)
        try:
            assert out.returncode == 0, out.stderr[-3000:]
            yield load_config(None, sets), sets, (home if two else None), why_not
        finally:
            stopped = _run([*serve, "--stop"], two, home if two else ROOT)
            assert stopped.returncode == 0, stopped.stderr
            shutil.rmtree(base, ignore_errors=True)


def test_beeline_reads_published_tables_and_is_refused_raw_ones(served, tmp_path):
    """One beeline run (one JVM) of a script: the published query answers, the raw one fails
    and beeline stops there with a non-zero exit."""
    cfg, *_ = served
    script = tmp_path / "two.sql"
    script.write_text("SELECT dataset, count(*) AS n FROM trajpriv_pub.locations GROUP BY "
                      f"dataset ORDER BY dataset;\nSELECT * FROM {RAW};\n")
    out = subprocess.run([str(endpoint.spark_home() / "bin" / "beeline"), "-u",
                          endpoint.jdbc_url(cfg), "-n", "analyst", "--silent=true",
                          "--outputformat=csv2", "-f", str(script)],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "SPARK_HOME": str(endpoint.spark_home())})
    assert "dataset,n\na,2\nb,1\n" in out.stdout, out.stdout + out.stderr[-3000:]
    assert out.returncode != 0 and "TABLE_OR_VIEW_NOT_FOUND" in out.stdout + out.stderr
    assert "secret" not in out.stdout


# impyla's Thrift transport leaves a refused query's socket to the garbage collector
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_dbapi_client_reads_published_and_changes_nothing(served):
    from impala.dbapi import connect

    cfg, *_ = served
    conn = connect(host=cfg.serve.host, port=cfg.serve.port, auth_mechanism="PLAIN",
                   user="analyst", database="trajpriv_pub", timeout=300)
    try:
        cur = conn.cursor()
        cur.execute("SELECT loc_id, dataset FROM trajpriv_pub.location_names ORDER BY loc_id")
        assert cur.fetchall() == [(1, "a"), (2, "a"), (3, "b")]
        refusals = {f"SELECT * FROM {RAW}": "TABLE_OR_VIEW_NOT_FOUND",
                    f"SELECT * FROM {TRUSTED}": "TABLE_OR_VIEW_NOT_FOUND",
                    "INSERT INTO trajpriv_pub.locations VALUES (9, 1.0, 1.0, 'a')":
                        "the endpoints are read-only",
                    "CREATE TABLE trajpriv_pub.mine AS SELECT 1 AS a": "read-only",
                    # SQL on files is off, so Spark looks for a table in database `parquet`;
                    # were it on, the guard refuses the file read (and the analysts' account
                    # may not list the warehouse)
                    "SELECT * FROM parquet.`" + str(cfg.storage.warehouse) + "`":
                        "TABLE_OR_VIEW_NOT_FOUND|refused: it reads files directly|"
                        "Permission denied"}
        with pytest.raises(Exception, match="refused: SET spark.sql.runSQLOnFiles"):
            cur.execute("SET spark.sql.runSQLOnFiles=true")
        for query, why in refusals.items():
            with pytest.raises(Exception, match=why):
                cur.execute(query)
        cur.execute("SELECT count(*) FROM trajpriv_pub.locations")
        assert cur.fetchall() == [(3,)]
    finally:
        conn.close()
        gc.collect()  # here, under this test's filter, not in a later test


#: What pyspark's `remote()` leaves in os.environ: it would make every later local session of
#: this test process (and its subprocesses) ask for a Connect URL.
CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


CONNECT_CLIENT = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
out = {"locations": [r.loc_id for r in spark.table("trajpriv_pub.locations").orderBy("loc_id")
                     .collect()]}
for name, read in (("raw table", lambda: spark.table(sys.argv[2]).collect()),
                   ("raw parquet", lambda: spark.read.parquet(sys.argv[3]).collect())):
    try:
        out[name] = "ROWS " + repr(read())
    except Exception as exc:
        out[name] = "ERROR " + " ".join(str(exc).split())[:400]
print("RESULT " + json.dumps(out))
"""


def test_spark_connect_reads_published_and_no_file(served):
    """A Spark Connect client in its own process (a notebook's, a BI tool's): a process that
    already holds a classic session cannot open a remote one, so this is how users connect."""
    cfg, *_ = served
    raw_path = cfg.storage.warehouse / "trajpriv_raw.db" / RAW.split(".")[1]
    out = _run(["-c", CONNECT_CLIENT, endpoint.connect_url(cfg), RAW, str(raw_path)], False,
               ROOT)
    assert "RESULT " in out.stdout, out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert result["locations"] == [1, 2, 3]
    assert result["raw table"].startswith("ERROR") and "TABLE_OR_VIEW_NOT_FOUND" in \
        result["raw table"], result
    # spark.read.parquet(path) is a data-source read: the Connect gate refuses it before Spark
    # resolves the path (and the analysts' account could not list it anyway)
    assert re.search("refused: it reads a data source or files", result["raw parquet"]), result


def test_trajpriv_sql_is_a_client_of_the_running_endpoints(served):
    """One zone rule: where the endpoints run, `trajpriv sql` asks them (no session of its own,
    no warm server) and its plan check still refuses a raw table."""
    cfg, sets, *_ = served
    cmd = [sys.executable, "-m", "jobs.cli", "sql", "--format", "json",
           *(f"--set={s}" for s in sets)]
    out = subprocess.run([*cmd, "SELECT count(*) AS n FROM trajpriv_pub.location_names"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and json.loads(out.stdout) == [{"n": 3}], out.stderr
    assert client.request(cfg.storage.root.resolve(), {"op": "ping"}) is None
    out = subprocess.run([*cmd, f"SELECT * FROM {RAW}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 2 and "refused:" in out.stderr and out.stdout == ""


ANALYST_SESSION = """
import json, sys
from pyspark.sql import SparkSession
from jobs.config import load_config
from jobs.spark.session import catalog_conf
cfg = load_config(None, sys.argv[1:])
builder = SparkSession.builder.master("local[1]").enableHiveSupport()
for key, value in catalog_conf(cfg).items():  # the README's settings, as the analyst has them
    builder = builder.config(key, value)
spark = builder.getOrCreate()
out = {}
def attempt(name, read):
    try:
        out[name] = "ROWS " + repr(read())
    except Exception as exc:  # its message and the JVM's root cause
        causes = [ln for ln in str(getattr(exc, "_stackTrace", "")).splitlines()
                  if ln.startswith("Caused by")]
        out[name] = "ERROR " + " ".join(str(exc).split())[:300] + " | " + " | ".join(causes[-1:])
wh = cfg.storage.warehouse
attempt("own session, raw table", lambda: spark.table("RAW").collect())
attempt("raw parquet", lambda: spark.read.parquet(str(wh / "trajpriv_raw.db")).collect())
attempt("trusted parquet", lambda: spark.read.parquet(str(wh / "trajpriv_trusted.db")).collect())
attempt("published parquet", lambda: spark.read.parquet(str(wh / "trajpriv_pub.db" /
                                                            "locations")).count())
print("RESULT " + json.dumps(out))
""".replace('"RAW"', repr(RAW))


def test_an_analyst_account_reads_the_published_zone_and_no_raw_row(served):
    cfg, sets, home, why_not = served
    if home is None:
        pytest.skip(why_not)
    root = cfg.storage.root.resolve()
    pub = cfg.storage.warehouse / "trajpriv_pub.db" / "locations"
    for path in [root, *(p for p in root.rglob("*") if not p.is_symlink())]:
        mode = path.stat().st_mode & 0o777
        if path in (root, cfg.storage.warehouse):
            assert mode == 0o710, f"{path} is {oct(mode)}"  # passed through, not listed
        elif pub in (path, *path.parents) or path == pub.parent:
            assert mode in (0o750, 0o640), f"{path} is {oct(mode)}"
            assert path.stat().st_gid == grp.getgrnam(GROUP).gr_gid, path
        else:
            assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
    # every published table and view through the endpoints, as the analyst
    reads = ("from pyspark.sql import SparkSession; import sys; s = SparkSession.builder.remote("
             "sys.argv[1]).getOrCreate(); print([s.table(t).count() for t in sys.argv[2:]])")
    out = _run(["-c", reads, endpoint.connect_url(cfg), *PUBLISHED], True, home)
    assert out.returncode == 0 and out.stdout.strip() == str(list(PUBLISHED.values())), \
        out.stderr[-2000:]
    for table in (RAW, TRUSTED):
        out = _run(["-c", reads, endpoint.connect_url(cfg), table], True, home)
        assert out.returncode != 0 and "TABLE_OR_VIEW_NOT_FOUND" in out.stderr
    # `trajpriv sql --trusted`: no endpoint answers it, and the root is not the analyst's
    out = _run(["-m", "jobs.cli", "sql", "--trusted", f"SELECT * FROM {RAW}",
                *(f"--set={s}" for s in sets)], True, home)
    assert out.returncode == 2 and out.stdout == ""
    assert f"belongs to uid {root.stat().st_uid}, not this account" in out.stderr, out.stderr
    # its own pyspark session with the README's settings
    out = _run(["-c", ANALYST_SESSION, *sets], True, home)
    assert "RESULT " in out.stdout, out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    assert result["published parquet"] == "ROWS 3", result
    assert "password authentication failed" in result["own session, raw table"], result
    for name in ("raw parquet", "trusted parquet"):
        assert result[name].startswith("ERROR") and "Permission denied" in result[name], result
    assert "secret" not in out.stdout and "1.5" not in out.stdout



# --- the red-team catalogue (tests/jobs/endpoint_attacks.py) --------------------------------


@pytest.fixture(scope="module")
def attack_dir():
    """Where the attacks' marker files would appear: a folder every account may write to, so
    an attack that ran as the endpoints' account would leave its file."""
    folder = Path(tempfile.mkdtemp(prefix="trajpriv-attacks-", dir="/tmp"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _sql_case(attack, via: str, folder: Path, cfg) -> tuple[str, Path]:
    marker = folder / f"{via}-{slug(attack.name)}"
    probe_path = cfg.storage.warehouse / "trajpriv_pub.db" / "locations"
    return attack.code.format(marker=marker, probe_path=probe_path), marker


def _left_nothing(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.parent.glob(marker.name + "*"))


@pytest.fixture(scope="module")
def beeline_attacks(served, attack_dir):
    """{name: what beeline printed for that statement} from ONE beeline run (one JVM) of every
    SQL attack, each followed by a probe of a published table (`--force`: go on after errors;
    stderr into stdout, so each error sits between its neighbours' probes)."""
    cfg, *_ = served
    lines = []
    for i, attack in enumerate(SQL_ATTACKS):
        lines.append(_sql_case(attack, "beeline", attack_dir, cfg)[0] + ";")
        lines.append(f"SELECT 'probe-{i}' AS probe, count(*) AS n FROM trajpriv_pub.locations;")
    script = attack_dir / "attacks.sql"
    script.write_text("\n".join(lines) + "\n")
    os.chmod(script, 0o644)
    out = subprocess.run([str(endpoint.spark_home() / "bin" / "beeline"), "-u",
                          endpoint.jdbc_url(cfg), "-n", "analyst", "--silent=true",
                          "--outputformat=csv2", "--force=true", "-f", str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=600, env={**os.environ, "SPARK_HOME": str(endpoint.spark_home())})
    segments, rest = {}, out.stdout
    for i, attack in enumerate(SQL_ATTACKS):
        before, sep, rest = rest.partition(f"probe-{i},3")
        segments[attack.name] = before if sep else "NO PROBE ANSWER: " + before
    return segments


@pytest.fixture(scope="module")
def connect_attacks(served, attack_dir):
    """{name: {"error", "probe"}} of every SQL attack (`spark.sql`) and every DataFrame attack
    from ONE Spark Connect client process."""
    cfg, *_ = served
    cases = []
    for attack in SQL_ATTACKS:
        sql, marker = _sql_case(attack, "connect", attack_dir, cfg)
        cases.append(["sql", attack.name, sql, str(marker)])
    for attack in CONNECT_ATTACKS:
        cases.append(["df", attack.name, attack.code, str(attack_dir / f"df-{slug(attack.name)}")])
    out = _run(["-c", CONNECT_RUNNER, endpoint.connect_url(cfg), json.dumps(cases)], False, ROOT)
    assert "RESULT " in out.stdout, out.stderr[-4000:]
    return json.loads(out.stdout.split("RESULT ", 1)[1])


@pytest.fixture(scope="module")
def sql_cli_attacks(served, attack_dir):
    """{name: (exit code, stdout, stderr)} of `trajpriv sql` per SQL attack, three at a time."""
    from concurrent.futures import ThreadPoolExecutor

    cfg, sets, *_ = served
    cmd = [sys.executable, "-m", "jobs.cli", "sql", "--format", "json",
           *(f"--set={s}" for s in sets)]

    def one(attack):
        sql, _ = _sql_case(attack, "trajpriv-sql", attack_dir, cfg)
        out = subprocess.run([*cmd, sql], cwd=ROOT, capture_output=True, text=True, timeout=600)
        return attack.name, (out.returncode, out.stdout, out.stderr)

    with ThreadPoolExecutor(3) as pool:
        return dict(pool.map(one, SQL_ATTACKS))


@pytest.fixture(scope="module")
def dbapi(served):
    from impala.dbapi import connect

    cfg, *_ = served
    conn = connect(host=cfg.serve.host, port=cfg.serve.port, auth_mechanism="PLAIN",
                   user="analyst", database="trajpriv_pub", timeout=300)
    yield conn
    conn.close()
    gc.collect()


def _dbapi_probe(conn) -> int:
    cur = conn.cursor()
    try:
        cur.execute("SELECT count(*) FROM trajpriv_pub.locations")
        return cur.fetchall()[0][0]
    finally:
        cur.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("attack", SQL_ATTACKS, ids=lambda a: slug(a.name))
@pytest.mark.parametrize("via", ["beeline", "dbapi", "connect", "trajpriv-sql"])
def test_sql_attack_is_refused(via, attack, served, attack_dir, request):
    """Each SQL construct of the catalogue, through each client: refused with its line, no
    marker file on the server, and the endpoints answer the next query."""
    cfg, *_ = served
    sql, marker = _sql_case(attack, via, attack_dir, cfg)
    if via == "beeline":
        error = request.getfixturevalue("beeline_attacks")[attack.name]
        assert not error.startswith("NO PROBE ANSWER"), error[-2000:]
    elif via == "dbapi":
        conn = request.getfixturevalue("dbapi")
        # each impyla cursor is a session on the connection's one socket: closed here, not by
        # the garbage collector, whose CloseSession would land in the middle of a later call
        cur = conn.cursor()
        try:
            with pytest.raises(Exception) as caught:
                cur.execute(sql)
        finally:
            cur.close()
        error = str(caught.value)
        assert _dbapi_probe(conn) == 3
    elif via == "connect":
        result = request.getfixturevalue("connect_attacks")[attack.name]
        error = result["error"] or "NO ERROR"
        assert result["probe"] == 3, result
    else:
        code, stdout, error = request.getfixturevalue("sql_cli_attacks")[attack.name]
        assert code == 2 and stdout == "", (code, stdout, error)
    assert re.search(attack.error, error), error[-2000:]
    assert _left_nothing(marker) == []


@pytest.mark.parametrize("attack", CONNECT_ATTACKS, ids=lambda a: slug(a.name))
def test_connect_attack_is_refused(attack, connect_attacks, attack_dir):
    """Each DataFrame construct of the catalogue over Spark Connect: refused, no marker file,
    and the same session answers the next query."""
    result = connect_attacks[attack.name]
    assert result["error"] is not None and re.search(attack.error, result["error"]), result
    assert result["probe"] == 3, result
    assert _left_nothing(attack_dir / f"df-{slug(attack.name)}") == []


FAIRNESS = """
import json, statistics, sys, threading, time
from pyspark.sql import SparkSession
url = sys.argv[1]
def short():
    s = SparkSession.builder.remote(url).create()  # a client of its own: its own pool
    t0 = time.monotonic()
    rows = s.table("trajpriv_pub.locations").groupBy("dataset").count().collect()
    took = time.monotonic() - t0
    assert len(rows) == 2
    s.stop()
    return took
short()  # the first query of a process warms the client
alone = [short() for _ in range(10)]
runaway = SparkSession.builder.remote(url).create()
running = threading.Event()
def progress(stages, inflight_tasks, operation_id, done):  # the server's progress reports
    if inflight_tasks > 0 or any(st.num_completed_tasks for st in stages or ()):
        running.set()
runaway.registerProgressHandler(progress)
result = {}
def run_away():
    t0 = time.monotonic()
    try:  # 200,000 tasks of milliseconds: FAIR hands each freed slot to the pool that waits
        runaway.range(0, 4 * 10**10, 1, 200000).selectExpr("sum(id * 7 % 13)").collect()
        result["error"] = None
    except Exception as exc:
        result["error"] = " ".join(str(exc).split())[:800]
    result["runaway_s"] = time.monotonic() - t0
    running.set()  # ended (its error says how): the main thread stops waiting
thread = threading.Thread(target=run_away)
thread.start()
running.wait(600)  # its tasks are running (a hang guard, not an expectation)
started_busy = thread.is_alive()
busy = [short() for _ in range(10)]
still_running = thread.is_alive()
thread.join()
print("RESULT " + json.dumps({"alone": alone, "busy": busy, "started_busy": started_busy,
                              "still_running": still_running,
                              **result}))
"""


def test_short_queries_share_the_cores_with_a_runaway_one(served):
    """With one runaway query running (FAIR pools, one per session), ten short published
    queries from other clients answer while it runs, each within a task or so per stage (not
    behind the runaway, as under FIFO), and the runaway query is cancelled at
    serve.query_timeout_s with a line naming it."""
    cfg, *_ = served
    out = _run(["-c", FAIRNESS, endpoint.connect_url(cfg)], False, ROOT)
    assert "RESULT " in out.stdout, out.stderr[-4000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1])
    print(json.dumps(result))  # the figures, for the record (-s)
    assert result["started_busy"] and result["still_running"], result  # busy throughout
    # Under FIFO each short query would wait for the runaway's end (its cancellation at
    # QUERY_TIMEOUT_S); with a pool per session it waits at most a task per stage. The
    # bound is far from both, so the suite's own load cannot tip it; the quiet-machine
    # ratio to the queries' time alone is the figure the issue asks for (printed above).
    assert max(result["busy"]) < QUERY_TIMEOUT_S / 8, result
    assert "serve.query_timeout_s" in (result["error"] or ""), result
    assert QUERY_TIMEOUT_S <= result["runaway_s"] <= QUERY_TIMEOUT_S + 60, result

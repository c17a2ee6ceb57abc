"""With the Hive metastore in PostgreSQL, `trajpriv sql` answers while `collect` writes
(issue 21), and sees either the old or the new release, never half of one.

A private PostgreSQL server is started for the module (`jobs.spark.metastore_pg`, on a folder under
/tmp, a free port); the tests skip, saying why, where Debian's postgresql or its JDBC driver is
not installed (`make postgres` installs both). The collection's release task stalls (test hook
`TRAJPRIV_FAULT_RELEASE_REACHED`) once its spend is in the ledger and before anything is
published; a query started then must succeed. Whatever the order in which the two finish, the
query's counts must equal either the state before the release or the state after it.
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.config import load_config
from jobs.spark import metastore_pg
from jobs.sql import client
from tests.reliability.test_collect_faults import LIMIT_S, _env, _sets

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
QUERY = ("SELECT mechanism, count(*) AS n FROM trajpriv_pub.perturbed_trajectories "
         "GROUP BY mechanism ORDER BY mechanism")


def _free_ports() -> Iterator[int]:
    """Ports free on 127.0.0.1 when probed (the probe's socket is closed before each is used)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        yield port


def start_on_a_free_port(folder: Path, ports: Iterator[int], tries: int = 5) -> str:
    """`metastore_pg.start` on the first port of `ports` that the server could bind.

    PostgreSQL cannot be told to choose its own port, so the port is probed free first and
    bound by the server seconds later (after initdb): another process may take it in between.
    The server then refuses to start ("Address already in use" in its log) and the next port
    is tried, so the outcome never depends on that race."""
    log = folder / "server.log"
    for _ in range(tries - 1):
        seen = log.stat().st_size if log.exists() else 0
        try:
            return metastore_pg.start(folder, next(ports))
        except subprocess.CalledProcessError:
            new = log.read_bytes()[seen:] if log.exists() else b""  # initdb failed: no log
            if b"Address already in use" not in new:
                raise
    return metastore_pg.start(folder, next(ports))


def _needs_postgres() -> None:
    try:
        metastore_pg.binary("initdb")
    except metastore_pg.PostgresUnavailable as exc:
        pytest.skip(f"PostgreSQL not installed here: {exc}")
    if not metastore_pg.JDBC_JAR.exists():
        pytest.skip(f"no PostgreSQL JDBC driver at {metastore_pg.JDBC_JAR}: `make postgres` "
                    "installs Debian's libpostgresql-jdbc-java")


@contextlib.contextmanager
def _server_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="trajpriv-pg-", dir="/tmp"))
    try:
        yield folder
    finally:
        metastore_pg.stop(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_url():
    _needs_postgres()
    with _server_folder() as folder:
        yield start_on_a_free_port(folder, _free_ports())


def test_a_port_taken_before_the_server_binds_it_is_skipped():
    """The race of `start_on_a_free_port`, met every time: the first port it is given is
    held by another listener."""
    _needs_postgres()
    with socket.socket() as taken, _server_folder() as folder:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        held = taken.getsockname()[1]
        url = start_on_a_free_port(folder, itertools.chain([held], _free_ports()))
        port = int(re.search(r":(\d+)/", url).group(1))
        assert port != held and url == metastore_pg.jdbc_url(port)
        assert b"Address already in use" in (folder / "server.log").read_bytes()


def _conf(root: Path, url: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "conf.yaml"
    conf.write_text(load_config(None, [*_sets(root, "local[2]"), "catalog.metastore=postgres",
                                       f"catalog.postgres_url={url}"]).to_yaml())
    return conf


def _spawn(conf: Path, steps: str, env: dict) -> subprocess.Popen:
    code = ("import sys; from tests.reliability.test_collect_faults import _session; "
            "_session(*sys.argv[1:])")
    with open(conf.parent / f"{steps.replace(',', '_')}.log", "w") as log:  # the child keeps it
        return subprocess.Popen([sys.executable, "-c", code, str(conf), steps,
                                 str(conf.parent / f"{steps}.pkl")], cwd=conf.parent, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _sql(conf: Path) -> tuple[dict[str, int], float]:
    """Counts per mechanism from `trajpriv sql`, and its wall time."""
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "sql", QUERY, "--config", str(conf)],
                         cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=LIMIT_S)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = re.findall(r"^\|(\w+)\s*\|(\d+)\s*\|$", out.stdout, flags=re.M)
    return {m: int(n) for m, n in rows}, time.perf_counter() - t0


def _wait(proc: subprocess.Popen, conf: Path, steps: str) -> None:
    try:
        rc = proc.wait(timeout=LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (conf.parent / f"{steps.replace(',', '_')}.log").read_text()
    assert rc == 0, log[-3000:]


def _mechanisms(snap: dict) -> dict[str, int]:
    return snap["pub"]["perturbed_trajectories"]["mechanism"].value_counts().to_dict()


def test_sql_answers_while_collect_writes_and_sees_a_whole_release(pg_url, tmp_path, capsys):
    conf = _conf(tmp_path / "data", pg_url)
    _wait(_spawn(conf, "raw,A,snapA", _env()), conf, "raw,A,snapA")
    before = _mechanisms(pickle.loads((conf.parent / "raw,A,snapA.pkl").read_bytes())["snapA"])
    assert set(before) == {"atp"}

    reached = tmp_path / "release_reached"
    t0 = time.perf_counter()
    collect = _spawn(conf, "B,snapB", _env(TRAJPRIV_FAULT_RELEASE_REACHED=str(reached),
                                           TRAJPRIV_FAULT_STALL_S="20"))
    while not reached.exists():  # the release task has started; nothing published yet
        assert collect.poll() is None, "collect ended before its release task started"
        time.sleep(0.5)
    during, sql_s = _sql(conf)  # a second Spark process on the same catalog, now
    client.stop_server(tmp_path / "data")  # else its warm server idles on to its timeout
    _wait(collect, conf, "B,snapB")
    collect_s = time.perf_counter() - t0
    after = _mechanisms(pickle.loads((conf.parent / "B,snapB.pkl").read_bytes())["snapB"])

    assert set(after) == {"atp", "exp"} and after["atp"] == before["atp"]
    assert during in (before, after), (before, during, after)  # never half a release
    with capsys.disabled():
        print(f"\n[postgres metastore] trajpriv sql during collect: {sql_s:.1f} s; collect "
              f"(with a 20 s stall in its release task): {collect_s:.1f} s")

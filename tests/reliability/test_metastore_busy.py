"""The metastore busy (issue 10): a second Spark process on the same storage.root.

The embedded Derby metastore (jobs/spark/session.py) admits one JVM at a time. A process holds a
session on a root and has written a table; a second `trajpriv` stage on the same root waits
`storage.metastore_wait_s`, then fails (never hangs) with a message naming the lock, the holder
and what to do, and exits non-zero without starting a JVM; afterwards, with the holder killed
hard (SIGKILL, no clean shutdown), a new process reads the holder's table intact: the refused
process and the crash left the catalog usable.
Without Spark: the wait ends as soon as a holder (a child process with a POSIX lock on the lock
file, as Derby's JVM takes it) lets go, and `lock_holders` parses /proc/locks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs.spark.metastore_lock import (
    LOCK_FILE,
    MetastoreBusyError,
    check_metastore_free,
    lock_holders,
)

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 600


def _hold(conf: str) -> None:
    """(subprocess) Open the catalog, write a table, print READY, hold until stdin closes."""
    from jobs.config import load_config
    from jobs.spark.session import get_spark

    spark = get_spark(load_config(conf))
    spark.range(5).selectExpr("id AS n").write.mode("overwrite").saveAsTable(
        "trajpriv_pub.busy_probe")
    print("READY", flush=True)
    sys.stdin.read()
    spark.stop()


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.spark
@pytest.mark.slow
def test_second_process_is_refused_clearly_and_the_catalog_survives(tmp_path):
    from jobs.config import load_config

    cfg = load_config(None, [f"storage.root={tmp_path / 'root'}", "spark.master=local[1]",
                             "spark.conf.spark.driver.memory=1g", "storage.metastore_wait_s=3",
                             "spark.conf.spark.sql.shuffle.partitions=1"])
    conf = tmp_path / "conf.yaml"
    conf.write_text(cfg.to_yaml())
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tests.reliability.test_metastore_busy import "
         "_hold; _hold(sys.argv[1])", str(conf)], cwd=ROOT, env=_env(), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "READY", "the holder did not start"
        lock = cfg.storage.metastore / LOCK_FILE
        assert lock_holders(lock), f"no process holds {lock} while the holder runs"
        second = subprocess.run([sys.executable, "-m", "jobs.cli", "synthesize", "--config",
                                 str(conf)], cwd=ROOT, env=_env(), capture_output=True,
                                text=True, timeout=LIMIT_S)  # a hang fails here
        assert second.returncode == 2, second.stderr[-3000:]
        err = second.stderr
        # Refused at the root's own lock, before Derby's: it names the holding process.
        assert "trajpriv synthesize: error: data root" in err, err[-3000:]
        named = re.search(r"in use by another trajpriv process \(pid (\d+): ", err)
        assert named and int(named.group(1)) == holder.pid, err[-3000:]
        assert "wait until it ends" in err and "its own storage.root" in err
        assert not (cfg.storage.root / "runs").exists()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # a crash: no spark.stop(), Derby not shut down
        holder.wait(timeout=60)
        holder.stdin.close()
        holder.stdout.close()
    query = "SELECT sum(n) AS total, count(*) AS rows FROM trajpriv_pub.busy_probe"
    reader = subprocess.run([sys.executable, "-m", "jobs.cli", "sql", query, "--config",
                             str(conf), "--no-server"],  # the reader itself, no server left
                            cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=LIMIT_S)
    assert reader.returncode == 0, reader.stderr[-3000:]
    assert "|10   |5   |" in reader.stdout, reader.stdout


RACE = ("import sys, time; from jobs.spark.session import acquire_root; from pathlib import Path\n"
        "start = float(sys.argv[2])\n"
        "while time.time() < start: pass\n"
        "try:\n    acquire_root(Path(sys.argv[1]))\nexcept Exception as exc:\n"
        "    print('refused', type(exc).__name__, exc, flush=True); sys.exit(2)\n"
        "print('running', flush=True); sys.stdin.read()")  # holds until the test lets go


def test_two_stages_started_in_the_same_instant_exactly_one_runs(tmp_path):
    """Defect: both passed the Derby pre-check and the loser died inside Hive (exit 1)."""
    root = tmp_path / "root"
    root.mkdir()
    start = f"{time.time() + 2.0:.3f}"  # both spin until the same instant, then race
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(root), start], cwd=ROOT,
                              env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(2)]
    # Each says whether it got the root; the winner holds it until both have said so, so
    # the outcome does not depend on how fast either starts.
    firsts = [p.stdout.readline() for p in procs]
    outs = [(first + p.communicate(input="", timeout=60)[0], p.returncode)
            for first, p in zip(firsts, procs, strict=True)]
    codes = sorted(rc for _, rc in outs)
    assert codes == [0, 2], outs
    refused = next(out for out, rc in outs if rc == 2)
    assert "MetastoreBusyError" in refused and "in use by another trajpriv process" in refused


def test_lock_holders_reads_proc_locks(tmp_path):
    path = tmp_path / LOCK_FILE
    path.write_text("")
    ino = path.stat().st_ino
    me = os.getpid()
    with open(path) as fh:  # this process has it open: the inode match is confirmed by /proc
        text = (f"1: FLOCK  ADVISORY  WRITE {me} fe:00:{ino} 0 EOF\n"
                f"2: POSIX  ADVISORY  WRITE {me} fe:00:{ino} 0 EOF\n"
                f"2: -> POSIX  ADVISORY  WRITE 1 fe:00:{ino} 0 EOF\n"
                f"3: POSIX  ADVISORY  WRITE 1 fe:00:{ino + 1} 0 EOF\n")
        assert lock_holders(path, text) == {me}
        assert fh.readable()
    assert lock_holders(tmp_path / "missing.lck", text) == set()
    assert lock_holders(path, "") == set()


HOLD = ("import fcntl, sys, time; fh = open(sys.argv[1], 'a'); "
        "fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB); print('locked', flush=True); "
        "time.sleep(float(sys.argv[2]))")


def _locker(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    proc.stdout.close()
    return proc


def test_waits_for_the_holder_then_proceeds(tmp_path):
    metastore = tmp_path / "metastore_db"
    metastore.mkdir()
    proc = _locker(metastore / LOCK_FILE, 2.0)
    try:
        assert lock_holders(metastore / LOCK_FILE) == {proc.pid}
        check_metastore_free(metastore, wait_s=600, poll_s=0.1)  # returns once it lets go
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_fails_naming_the_holder_after_the_wait(tmp_path):
    metastore = tmp_path / "metastore_db"
    metastore.mkdir()
    proc = _locker(metastore / LOCK_FILE, 60.0)
    try:
        with pytest.raises(MetastoreBusyError, match=rf"in use by another process \(pid "
                                                     rf"{proc.pid}: .*python.*still after "
                                                     r"waiting 0.3 s"):
            check_metastore_free(metastore, wait_s=0.3, poll_s=0.1)
    finally:
        proc.kill()
        proc.wait()
    check_metastore_free(metastore)  # a killed holder's lock is gone with it (no stale lock)
    check_metastore_free(tmp_path / "never_created")  # a new root: nothing to wait for

"""The metastore busy (issue 10): a second Spark process on the same storage.root.

The embedded Derby metastore (jobs/session.py) admits one JVM at a time. A process holds a
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

from jobs.metastore_lock import LOCK_FILE, MetastoreBusyError, check_metastore_free, lock_holders

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 600


def _hold(conf: str) -> None:
    """(subprocess) Open the catalog, write a table, print READY, hold until stdin closes."""
    from jobs.config import load_config
    from jobs.session import get_spark

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
        t0 = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "jobs.cli", "synthesize", "--config",
                                 str(conf)], cwd=ROOT, env=_env(), capture_output=True,
                                text=True, timeout=LIMIT_S)
        waited = time.monotonic() - t0
        assert second.returncode == 2, second.stderr[-3000:]
        err = second.stderr
        assert "trajpriv synthesize: error: the Hive metastore" in err, err[-3000:]
        named = re.search(r"in use by another process \(pid (\d+): (\S+)", err)
        assert named and named.group(2).endswith("java"), err[-3000:]  # the holder's JVM
        ppid = Path(f"/proc/{named.group(1)}/stat").read_text().rsplit(")", 1)[1].split()[1]
        assert int(ppid) == holder.pid and str(lock) in err
        assert "still after waiting 3 s (storage.metastore_wait_s)" in err
        assert "wait until that process ends" in err and "its own storage.root" in err
        assert waited < 120  # 3 s of waiting, no JVM started: seconds, not a hang
        assert not (cfg.storage.root / "runs").exists()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)  # a crash: no spark.stop(), Derby not shut down
        holder.wait(timeout=60)
        holder.stdin.close()
        holder.stdout.close()
    query = "SELECT sum(n) AS total, count(*) AS rows FROM trajpriv_pub.busy_probe"
    reader = subprocess.run([sys.executable, "-m", "jobs.cli", "sql", query, "--config",
                             str(conf)], cwd=ROOT, env=_env(), capture_output=True, text=True,
                            timeout=LIMIT_S)
    assert reader.returncode == 0, reader.stderr[-3000:]
    assert "|10   |5   |" in reader.stdout, reader.stdout


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
        t0 = time.monotonic()
        check_metastore_free(metastore, wait_s=60, poll_s=0.1)  # returns once it lets go
        assert time.monotonic() - t0 < 30
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

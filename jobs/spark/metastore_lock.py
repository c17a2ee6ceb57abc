"""Who holds this storage.root's embedded Derby metastore (one JVM at a time).

While a JVM has the metastore booted, Derby holds an exclusive java.nio FileLock on
`<storage.root>/metastore_db/dbex.lck` (a POSIX record lock on Linux). A second Spark process on
the same root fails deep inside Hive (Derby XSDB6, "Another instance of Derby may have already
booted the database") and Spark shows only a long "Unable to instantiate
SessionHiveMetaStoreClient" trace. `check_metastore_free` finds the holder in /proc/locks before
the session starts and says which process holds which lock and what to do. The refused process
starts no JVM and writes nothing, so the catalog is untouched
(tests/reliability/test_metastore_busy.py).

Where /proc/locks does not exist (not Linux) the check finds no holder and Spark's own error
stands.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from udfs.errors import TrajprivError

log = logging.getLogger(__name__)

LOCK_FILE = "dbex.lck"


class MetastoreBusyError(TrajprivError):
    """Another process holds the embedded Derby metastore of this storage.root."""


def lock_holders(path: Path, locks: str | None = None) -> set[int]:
    """PIDs holding a POSIX lock on `path`, from /proc/locks (or `locks`, its text); empty when
    nobody does, the file does not exist, or the system has no /proc/locks."""
    try:
        inode = path.stat().st_ino
        text = Path("/proc/locks").read_text() if locks is None else locks
    except OSError:
        return set()
    pids = set()
    for line in text.splitlines():
        # "1: POSIX  ADVISORY  WRITE 4242 fe:00:2384300 0 EOF"; waiters read "1: -> POSIX ..."
        parts = line.split()
        if len(parts) < 6 or parts[1] != "POSIX":
            continue
        if parts[5].rsplit(":", 1)[-1] == str(inode) and _opened(int(parts[4]), path):
            pids.add(int(parts[4]))
    return pids


def _opened(pid: int, path: Path) -> bool:
    """Whether `pid` has `path` open (confirms an inode match); True when we may not look."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return True
    target = str(path.resolve())
    for fd in fds:
        try:
            if os.readlink(fd) == target:
                return True
        except OSError:
            continue
    return False


def _own_jvm() -> int | None:
    """The pid of this process's Spark JVM (it stays up after `spark.stop()`), if any."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "command unknown"
    words = raw.decode(errors="replace").split("\0")
    return " ".join(w for w in words if w)[:200] or "command unknown"


def check_metastore_free(metastore: Path, wait_s: float = 0.0, poll_s: float = 0.5) -> None:
    """Wait up to `wait_s` seconds for every process other than this one (and its own JVM) to
    release Derby's lock on `metastore`, then raise MetastoreBusyError naming the holder.

    The wait also covers the previous stage's JVM, which finishes its shutdown hooks, lock still
    held, for a few seconds after its Python driver has exited (a back-to-back `trajpriv` run
    would otherwise find the lock held).
    """
    lock = metastore / LOCK_FILE
    own = {os.getpid(), _own_jvm()}
    deadline = time.monotonic() + wait_s
    others = lock_holders(lock) - own
    if others:
        log.info("metastore %s held by pid %s; waiting up to %.0f s", metastore, min(others),
                 wait_s)
    while others and time.monotonic() < deadline:
        time.sleep(poll_s)
        others = lock_holders(lock) - own
    if others:
        pid = min(others)
        raise MetastoreBusyError(
            f"the Hive metastore {metastore} (embedded Derby) is in use by another process "
            f"(pid {pid}: {_command(pid)}), which holds its lock {lock}, still after waiting "
            f"{wait_s:g} s (storage.metastore_wait_s). Derby lets one Spark process at a time "
            "open a storage.root: wait until that process ends (a running stage, `trajpriv sql`, "
            "a notebook) and rerun, or stop it; to run in parallel, give this job its own "
            "storage.root. This process wrote nothing.")

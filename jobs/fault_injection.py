"""Test-only fault injection for the collect stage's Python workers. Never set in production.

Why it exists: `tests/reliability/test_collect_faults.py` must show that a collection survives a
Python worker dying mid-task (Spark retries the task and the retry redraws the same noise) and
that a driver killed mid-release leaves nothing half-published and no double spend. Killing a
process "partway" from outside is racy; these hooks make the fault happen at a known point.
Both are read from the environment inside the release task (the driver's environment reaches
Spark's Python workers), so nothing in a config or a table can switch them on.

- `TRAJPRIV_TEST_KILL_WORKER=<marker path>`: the release task attempt 0 whose worker first
  creates the marker file (atomically, so it fires once per marker) SIGKILLs its own Python
  worker after `KILL_AFTER_GROUPS` users, i.e. after it has already streamed rows back.
- `TRAJPRIV_TEST_RELEASE_REACHED=<path>`: the first release task to start creates the file and
  then stalls for `STALL_S` seconds (or `TRAJPRIV_TEST_STALL_S`), so a test can kill the driver
  (or query the catalog) while the perturbation stage
  is running (before anything is published).
- `TRAJPRIV_TEST_CRASH_AT=<point>[:raise]`: the collect driver dies at the named write
  boundary (`CRASH_POINTS`): SIGKILL of its own process (a real crash: nothing after it runs,
  no `finally`), or with `:raise` an `InjectedCrash` (a BaseException no handler catches), for
  in-process tests that then rerun in the same session. The durable state is the same either
  way: the writes before the point committed, none after it began.
- `TRAJPRIV_TEST_KILL_FIRST_WRITE=<folder>`: at the first write of each table (CTAS), the
  process writes the table's files into its location, as a CTAS does before it registers the
  table, then SIGKILLs itself; once per table (a marker per table in the folder), so reruns
  pass each table's first write in turn (tests/reliability/test_first_write_kill.py).
"""

from __future__ import annotations

import os
import signal
import time

KILL_WORKER = "TRAJPRIV_TEST_KILL_WORKER"
KILL_FIRST_WRITE = "TRAJPRIV_TEST_KILL_FIRST_WRITE"
RELEASE_REACHED = "TRAJPRIV_TEST_RELEASE_REACHED"
KILL_AFTER_GROUPS = 3
STALL_S = 120.0

_groups_seen: dict[tuple[int, int, int], int] = {}


def _create_once(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def on_release_group() -> None:
    """Called once per user group by the release UDF; a no-op unless a test set a variable."""
    kill, reached = os.environ.get(KILL_WORKER), os.environ.get(RELEASE_REACHED)
    if not kill and not reached:
        return
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # the kernel called outside Spark (unit tests): nothing to inject
        return
    if reached and _create_once(reached):
        time.sleep(float(os.environ.get("TRAJPRIV_TEST_STALL_S", STALL_S)))
    if kill and ctx.attemptNumber() == 0:
        key = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        _groups_seen[key] = _groups_seen.get(key, 0) + 1
        if _groups_seen[key] == KILL_AFTER_GROUPS and _create_once(kill):
            os.kill(os.getpid(), signal.SIGKILL)


CRASH_AT = "TRAJPRIV_TEST_CRASH_AT"
#: The write boundaries, in the order a release (then an ingest) passes them.
CRASH_POINTS = (
    "before_ledger",  # plan validated, nothing written
    "after_ledger",  # planned + spent rows appended
    "after_publish",  # perturbed rows written, `published` not yet marked
    "after_published_mark",
    "after_registry",  # trajpriv_pub.releases row written, `registered` not yet marked
    "after_registered_mark",
    "after_evaluation",  # trusted figures written, `evaluated` not yet marked
    # ingest: after each of its five table writes (all or none must end up written)
    "ingest_after_points",
    "ingest_after_trajectories",
    "ingest_after_slot_days",
    "ingest_after_quarantine",
    "ingest_after_locations",
)


#: The collect stage's own boundaries (the crash sweep's points).
COLLECT_CRASH_POINTS = tuple(p for p in CRASH_POINTS if not p.startswith("ingest_"))


class InjectedCrash(BaseException):
    """A test-only crash at a named point (BaseException: no `except Exception` swallows it)."""


def crash_point(name: str) -> None:
    """Die here when a test asked for it (TRAJPRIV_TEST_CRASH_AT); otherwise a no-op."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    wanted = os.environ.get(CRASH_AT)
    if not wanted:
        return
    point, _, how = wanted.partition(":")
    if point != name:
        return
    if how == "raise":
        raise InjectedCrash(name)
    os.kill(os.getpid(), signal.SIGKILL)


def ingest_written(table: str) -> None:
    """Called by ingest after each table write (`trajpriv_raw.points` -> ingest_after_points)."""
    crash_point(f"ingest_after_{table.split('.', 1)[1]}")


def on_first_write(table: str, write_files) -> None:
    """Called by `jobs.catalog.create_table` before its CTAS; a no-op unless a test set
    TRAJPRIV_TEST_KILL_FIRST_WRITE. `write_files()` writes what the CTAS would write."""
    folder = os.environ.get(KILL_FIRST_WRITE)
    if folder and _create_once(os.path.join(folder, table)):
        write_files()
        os.kill(os.getpid(), signal.SIGKILL)

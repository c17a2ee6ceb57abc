"""Fault injection: the one registry of test seams. Pure stdlib; off unless a test sets one.

Why it exists: the reliability tests (tests/reliability/, tests/jobs/test_ingest.py,
tests/jobs/test_train_spark.py) must show that a worker, a driver or a training rank dying at a
given point loses nothing and commits nothing twice. Killing a process "partway" from outside is
racy; these seams make the fault happen at a known point. Each is read from the environment of
the process where it fires (the driver's environment reaches Spark's Python workers and the
torchrun ranks), so nothing in a config file or a table can switch one on; with none of the
variables below set, every function here is a no-op.

One naming scheme, `TRAJPRIV_FAULT_<NAME>`; `SEAMS` lists them all (docs/development.md, "Fault
seams"):

- `TRAJPRIV_FAULT_KILL_WORKER=<marker path>` (collect's release UDF, per user group,
  `on_release_group`): attempt 0 of the release task whose worker first creates the marker
  (atomically: once per marker) SIGKILLs its Python worker after `KILL_AFTER_GROUPS` users,
  i.e. after it has already streamed rows back.
- `TRAJPRIV_FAULT_RELEASE_REACHED=<path>` (same place): the first release task creates the
  file, then stalls `TRAJPRIV_FAULT_STALL_S` seconds (default `STALL_S`), so a test can kill
  the driver (or query the catalog) while the perturbation stage runs, before anything is
  published.
- `TRAJPRIV_FAULT_STALL_S=<seconds>`: the stall of `RELEASE_REACHED`.
- `TRAJPRIV_FAULT_CRASH_AT=<point>[:raise]` (collect / ingest driver, `crash_point` at each
  write boundary of `CRASH_POINTS`): SIGKILL of its own process (a real crash: nothing after
  it runs, no `finally`), or with `:raise` an `InjectedCrash` (a BaseException no handler
  catches) for in-process tests that rerun in the same session. The durable state is the same
  either way: the writes before the point committed, none after it began.
- `TRAJPRIV_FAULT_KILL_FIRST_WRITE=<folder>[:raise]` (`jobs.spark.catalog.create_table` before
  its CTAS, `on_first_write`): writes the table's files into its location, as a CTAS does
  before it registers the table, then SIGKILLs the process (or with `:raise` an
  `InjectedCrash`, as for `CRASH_AT`); once per table (a marker per table in the folder), so
  reruns pass each table's first write in turn.
- `TRAJPRIV_FAULT_TRAIN=<rank>:<round>[:exit|:hold]` (a training rank before that round, i.e.
  after the previous round's checkpoint, `train_hook`): raises a RuntimeError (default), exits
  hard with status 3 (`exit`) or stalls `HOLD_S` seconds (`hold`: a test can then kill the run
  at a known round).
- `TRAJPRIV_FAULT_CHECKPOINT=<round>:<folder name>` (`models.checkpoint.save_checkpoint`, after
  the data is flushed and before the fsync, `checkpoint_write`): truncates the temporary file
  to half and SIGKILLs the writing process (a checkpoint write cut short).

The SIGKILL of the own process happens in one place, `_kill_self`; product code only calls the
named seam functions.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any, NamedTuple

PREFIX = "TRAJPRIV_FAULT_"


class Seam(NamedTuple):
    env: str
    fires: str
    does: str


SEAMS: dict[str, Seam] = {
    "kill_worker": Seam(
        "TRAJPRIV_FAULT_KILL_WORKER", "collect release UDF, per user group",
        "attempt 0 SIGKILLs its Python worker after KILL_AFTER_GROUPS users (once per marker)"),
    "release_reached": Seam(
        "TRAJPRIV_FAULT_RELEASE_REACHED", "collect release UDF, first group",
        "creates the file, then stalls TRAJPRIV_FAULT_STALL_S seconds"),
    "stall_s": Seam(
        "TRAJPRIV_FAULT_STALL_S", "with release_reached", "the stall in seconds (default 120)"),
    "crash_at": Seam(
        "TRAJPRIV_FAULT_CRASH_AT", "collect / ingest driver, named write boundary",
        "SIGKILL of the own process, or `:raise` an InjectedCrash"),
    "kill_first_write": Seam(
        "TRAJPRIV_FAULT_KILL_FIRST_WRITE", "catalog.create_table, before the CTAS",
        "writes the table's files, then SIGKILLs the process (`:raise` an InjectedCrash); "
        "once per table"),
    "train": Seam(
        "TRAJPRIV_FAULT_TRAIN", "training rank, before a round",
        "raise, `exit` hard (status 3) or `hold` HOLD_S seconds"),
    "checkpoint": Seam(
        "TRAJPRIV_FAULT_CHECKPOINT", "save_checkpoint, before fsync",
        "truncates the temp file to half, SIGKILLs the writer"),
}

KILL_WORKER = SEAMS["kill_worker"].env
RELEASE_REACHED = SEAMS["release_reached"].env
STALL_S_ENV = SEAMS["stall_s"].env
CRASH_AT = SEAMS["crash_at"].env
KILL_FIRST_WRITE = SEAMS["kill_first_write"].env
TRAIN = SEAMS["train"].env
CHECKPOINT = SEAMS["checkpoint"].env

KILL_AFTER_GROUPS = 3
STALL_S = 120.0
HOLD_S = 120.0  # how long the `hold` train fault stalls a rank


def active() -> dict[str, str]:
    """The seams switched on in this process's environment (name -> value)."""
    return {name: os.environ[s.env] for name, s in SEAMS.items() if os.environ.get(s.env)}


def _kill_self() -> None:
    """SIGKILL this process: a real crash, nothing after it runs (no `finally`, no atexit)."""
    os.kill(os.getpid(), signal.SIGKILL)


def _create_once(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


# -- collect: the release UDF ------------------------------------------------------------------
_groups_seen: dict[tuple[int, int, int], int] = {}


def release_seams_on() -> bool:
    """Whether a release seam (`KILL_WORKER`, `RELEASE_REACHED`) is set in this process: the
    release then runs user by user, calling `on_release_group` for each."""
    return bool(os.environ.get(KILL_WORKER) or os.environ.get(RELEASE_REACHED))


def on_release_group(task_context: Callable[[], Any]) -> None:
    """Called once per user group by the release UDF; a no-op unless a test set a variable.
    `task_context()` gives the running task (pyspark's `TaskContext.get`; None outside Spark),
    asked only when a seam is on."""
    kill, reached = os.environ.get(KILL_WORKER), os.environ.get(RELEASE_REACHED)
    if not kill and not reached:
        return
    ctx = task_context()
    if ctx is None:  # the kernel called outside Spark (unit tests): nothing to inject
        return
    if reached and _create_once(reached):
        time.sleep(float(os.environ.get(STALL_S_ENV, STALL_S)))
    if kill and ctx.attemptNumber() == 0:
        key = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        _groups_seen[key] = _groups_seen.get(key, 0) + 1
        if _groups_seen[key] == KILL_AFTER_GROUPS and _create_once(kill):
            _kill_self()


# -- collect / ingest: write boundaries --------------------------------------------------------
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
    """Die here when a test asked for it (TRAJPRIV_FAULT_CRASH_AT); otherwise a no-op."""
    if name not in CRASH_POINTS:
        raise ValueError(f"unknown crash point {name!r}")
    wanted = os.environ.get(CRASH_AT)
    if not wanted:
        return
    point, _, how = wanted.partition(":")
    if point == name:
        _crash(how == "raise", name)


def _crash(raises: bool, what: str) -> None:
    """The crash a seam asked for: an `InjectedCrash` (`:raise`, for in-process reruns) or a
    SIGKILL of this process; the durable state is the same either way."""
    if raises:
        raise InjectedCrash(what)
    _kill_self()


def ingest_written(table: str) -> None:
    """Called by ingest after each table write (`trajpriv_raw.points` -> ingest_after_points)."""
    crash_point(f"ingest_after_{table.split('.', 1)[1]}")


# -- catalog: first write of a table -----------------------------------------------------------
def on_first_write(table: str, write_files: Callable[[], Any]) -> None:
    """Called by `jobs.spark.catalog.create_table` before its CTAS; a no-op unless a test set
    TRAJPRIV_FAULT_KILL_FIRST_WRITE. `write_files()` writes what the CTAS would write."""
    wanted = os.environ.get(KILL_FIRST_WRITE)
    if not wanted:
        return
    if _create_once(os.path.join(wanted.removesuffix(":raise"), table)):
        write_files()
        _crash(wanted.endswith(":raise"), f"first write of {table}")


# -- training ----------------------------------------------------------------------------------
def train_hook(rank: int) -> Callable[[Any], None] | None:
    """The per-round hook of training rank `rank` (TRAJPRIV_FAULT_TRAIN="rank:round[:exit|:hold]",
    called before each round with the run, i.e. after the previous round's checkpoint), or None
    when the seam is off or names another rank."""
    spec = os.environ.get(TRAIN)
    if not spec:
        return None
    parts = spec.split(":")
    f_rank, f_round = int(parts[0]), int(parts[1])
    action = parts[2] if len(parts) > 2 else "raise"
    if rank != f_rank:
        return None

    def hook(run: Any) -> None:
        if run.round == f_round:
            if action == "exit":
                os._exit(3)
            if action == "hold":
                time.sleep(HOLD_S)
                return
            raise RuntimeError(f"injected fault on rank {rank} at round {f_round}")

    return hook


def checkpoint_write(fh: Any, round_: Any, folder_name: str) -> None:
    """Called by `models.checkpoint.save_checkpoint` after the data is flushed, before fsync;
    when TRAJPRIV_FAULT_CHECKPOINT is "<round>:<folder name>" of this write, truncate the
    temporary file to half and SIGKILL the process (a write cut short)."""
    if os.environ.get(CHECKPOINT) == f"{round_}:{folder_name}":
        fh.truncate(fh.tell() // 2)
        fh.flush()
        _kill_self()

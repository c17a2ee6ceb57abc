"""Progress lines for long stages: done/total, rate and ETA, at most one line every few seconds.

Why: a long stage would otherwise print nothing between "started" and "ok", and a data
engineer could not tell a slow run from a stuck one.

Two sources of progress:
- `Progress`: a driver loop counts its own units (`advance`), e.g. the membership attacks over
  trained runs and LiRA shadows.
- `spark_progress`: the work runs in Spark executors (mapInPandas, writes), so a driver thread
  polls Spark's status tracker for the tasks of the jobs started inside the block (they carry
  a job group of their own) and feeds a `Progress` with completed/total tasks.

Lines go to the `trajpriv.progress` logger (stderr with the other log lines, never stdout, which
carries the stage's result) and are rate-limited: a line only when `TRAJPRIV_PROGRESS_S`
seconds (default 10) have passed since the previous one, and a closing line only when the work
printed a line or lasted that long, so a small run prints nothing extra. `TRAJPRIV_PROGRESS_S=0`
prints every change (tests), `off` none. Progress never changes what a stage computes: the
poller only reads the tracker, stops with its block (also on an exception) and swallows its own
errors.

Only task counts and the stage's own public totals appear in a line: no raw-derived figure.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

log = logging.getLogger("trajpriv.progress")

ENV_INTERVAL = "TRAJPRIV_PROGRESS_S"
DEFAULT_INTERVAL_S = 10.0
POLL_S = 1.0  # how often the Spark poller reads the status tracker
JOB_GROUP = "spark.jobGroup.id"  # the local property Spark tags a thread's jobs with


def interval_s() -> float:
    """Seconds between two progress lines: `TRAJPRIV_PROGRESS_S`, 10 by default, `off` none."""
    raw = os.environ.get(ENV_INTERVAL, "").strip().lower()
    if raw in ("off", "none", "no"):
        return math.inf
    try:
        value = float(raw) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value >= 0 else math.inf


def format_duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min: short enough for a log line."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def format_rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.2g}" if rate < 1 else f"{rate:.1f}"


def progress_line(label: str, done: float, total: float | None, unit: str, elapsed: float,
                  work: tuple[float, str] | None = None, final: bool = False) -> str:
    """`collect release: 3/12 partitions (25%), 41,000 trajectories/s, ETA 12 s`.

    `work` = (total amount, its unit) turns the rate into that unit (the share of tasks done
    times the amount): points per second say more than tasks per second.
    """
    text = f"{label}: {done:,.0f}/{total:,.0f} {unit}" if total else f"{label}: {done:,.0f} {unit}"
    fraction = min(done / total, 1.0) if total else None
    if fraction is not None:
        text += f" ({100 * fraction:.0f}%)"
    if elapsed <= 0 or done <= 0:
        return text
    if work is not None and fraction is not None:
        text += f", {format_rate(work[0] * fraction / elapsed)} {work[1]}/s"
    else:
        text += f", {format_rate(done / elapsed)} {unit}/s"
    if final:
        return text + f", done in {format_duration(elapsed)}"
    if total and done < total:
        text += f", ETA {format_duration((total - done) * elapsed / done)}"
    return text


class Progress:
    """Done/total of one unit of work, logged at most once every `every_s` seconds.

    `clock` is injectable (tests use a fake one); `total` may grow (`update(done, total)`).
    """

    def __init__(self, label: str, total: float | None = None, unit: str = "items", *,
                 every_s: float | None = None, work: tuple[float, str] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 logger: logging.Logger | None = None) -> None:
        self.label, self.total, self.unit, self.work = label, total, unit, work
        self.every_s = interval_s() if every_s is None else every_s
        self.clock = clock
        self.logger = logger or log
        self.start = self.last_line = clock()
        self.done: float = 0
        self.lines = 0
        self._shown: float = 0
        self._closed = False

    def update(self, done: float, total: float | None = None) -> str | None:
        """Record progress; returns the line when one was logged."""
        self.done = done
        if total is not None:
            self.total = total
        now = self.clock()
        if self._closed or done == self._shown or now - self.last_line < self.every_s:
            return None
        if self.total and done >= self.total:
            return None  # the closing line says it
        return self._emit(now, final=False)

    def advance(self, n: float = 1) -> str | None:
        return self.update(self.done + n)

    def close(self) -> str | None:
        """The closing line, when lines were printed or the work lasted `every_s`."""
        if self._closed:
            return None
        self._closed = True
        now = self.clock()
        if self.done <= 0 or (not self.lines and now - self.start < self.every_s):
            return None
        return self._emit(now, final=True)

    def _emit(self, now: float, final: bool) -> str:
        line = progress_line(self.label, self.done, self.total, self.unit, now - self.start,
                             self.work, final=final)
        self.logger.info("%s", line)
        self.lines += 1
        self.last_line, self._shown = now, self.done
        return line


def track(items, label: str, unit: str = "items", **kwargs: Any) -> Iterator:
    """Iterate `items` (a sized collection) with a `Progress` line per rate-limited step."""
    items = list(items)
    progress = Progress(label, len(items), unit, **kwargs)
    for item in items:
        yield item
        progress.advance()
    progress.close()


def task_counts(tracker: Any, group: str) -> tuple[int, int]:
    """(completed, total) tasks of every job of `group` so far, from Spark's status tracker.

    A finished job counts all its tasks done (a stage skipped because its shuffle output was
    reused never completes a task)."""
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None:
            continue
        finished = str(job.status) == "SUCCEEDED"
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            done += stage.numTasks if finished else min(stage.numCompletedTasks, stage.numTasks)
    return done, total


@contextlib.contextmanager
def spark_progress(spark: Any, label: str, unit: str = "tasks", *,
                   work: tuple[float, str] | None = None, poll_s: float = POLL_S,
                   every_s: float | None = None) -> Iterator[Progress | None]:
    """Progress of the Spark jobs this thread starts inside the block, polled by a driver
    thread; the previous job group is restored on exit. Yields the `Progress` (None when the
    interval is `off`: no thread, no job group)."""
    every = interval_s() if every_s is None else every_s
    if math.isinf(every) or spark is None:
        yield None
        return
    sc = spark.sparkContext
    group = f"trajpriv-{uuid.uuid4().hex[:12]}"
    previous = sc.getLocalProperty(JOB_GROUP)
    sc.setLocalProperty(JOB_GROUP, group)
    progress = Progress(label, None, unit, every_s=every, work=work)
    stop = threading.Event()

    def poll() -> None:
        tracker = sc.statusTracker()
        while not stop.wait(poll_s):
            try:
                progress.update(*task_counts(tracker, group))
            except Exception as exc:  # never let progress disturb the stage
                log.debug("progress of %s stopped: %s", label, exc)
                return

    thread = threading.Thread(target=poll, name=f"progress-{label}", daemon=True)
    thread.start()
    ok = False
    try:
        yield progress
        ok = True
    finally:
        stop.set()
        thread.join(timeout=5 * poll_s + 5)
        sc.setLocalProperty(JOB_GROUP, previous)
        if ok:
            try:
                done, total = task_counts(sc.statusTracker(), group)
                progress.done, progress.total = done, total
                progress.close()
            except Exception as exc:
                log.debug("progress of %s: no closing line: %s", label, exc)

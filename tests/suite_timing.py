"""Where the suite's time goes: the seconds of each test file, printed at the end of a run.

Registered by tests/conftest.py in the process that reports (the controller under
pytest-xdist, which receives every worker's reports). A file's seconds are the sum of its
tests' setup, call and teardown times: under `--dist loadfile` one worker runs a file's tests
one after another, so that sum is the file's wall time on its worker. `--durations=25` (the
Makefile) lists the slowest single tests beside it.

On two cores the suite is CPU-bound, so a file's wall seconds depend on what ran beside it; its
CPU seconds do not. `CpuMeter` (registered in every process that runs tests) puts on each
report the CPU seconds used since the previous one by the test process and its descendants:
this process, the children it reaped (with their own reaped descendants), and the ones still
running (the shared Spark session's JVM). A daemon that detached itself (reparented to init:
PostgreSQL, a warm `trajpriv sql` server) is not counted; the table says so.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

CPU_KEY = "cpu_seconds"
_TICKS = os.sysconf("SC_CLK_TCK")


def _live_descendants_cpu(root: int) -> float:
    """utime + stime of the running descendants of `root`, from one pass over /proc."""
    parent, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while being read
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    total = 0.0
    for pid in cpu:
        p, seen = parent.get(pid), 0
        while p is not None and p > 1 and seen < 64:  # walk up to root, or to init
            if p == root:
                total += cpu[pid]
                break
            p, seen = parent.get(p), seen + 1
    return total


def process_tree_cpu() -> float:
    """CPU seconds this process and its (reaped or running) descendants have used."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + \
        _live_descendants_cpu(os.getpid())


class CpuMeter:
    """Adds the CPU seconds since the previous report to each report's user_properties
    (pytest-xdist sends them to the controller with the report)."""

    def __init__(self) -> None:
        self.last = process_tree_cpu()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        now = process_tree_cpu()
        outcome.get_result().user_properties.append((CPU_KEY, now - self.last))
        self.last = now


class FileTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.worker: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        self.cpu[path] += sum(v for k, v in report.user_properties if k == CPU_KEY)
        if report.when == "call":
            self.tests[path] += 1
        node = getattr(report, "node", None)  # pytest-xdist: the worker that ran it
        if node is not None:
            self.worker[path] = node.gateway.id

    def table(self) -> list[str]:
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        total = sum(self.seconds.values())
        cpu = sum(self.cpu.values())
        lines = [f"{'seconds':>8} {'share':>6} {'cpu-s':>7} {'tests':>5} {'worker':>6}  file"]
        for path, secs in rows:
            lines.append(f"{secs:8.1f} {100 * secs / max(total, 1e-9):5.1f}% "
                         f"{self.cpu[path]:7.1f} {self.tests[path]:5d} "
                         f"{self.worker.get(path, '-'):>6}  {path}")
        lines.append(f"{total:8.1f} 100.0% {cpu:7.1f} {sum(self.tests.values()):5d} {'':>6}  "
                     "(all files; wall time is about this over the workers; cpu-s: the test "
                     "process and its descendants, detached daemons not counted)")
        return lines

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int,
                                config: pytest.Config) -> None:
        if not self.seconds:
            return
        terminalreporter.write_sep("=", "seconds per test file")
        for line in self.table():
            terminalreporter.write_line(line)
        seed = config.getoption("shuffle_files", None)
        if seed is not None:
            terminalreporter.write_line(
                f"file order shuffled with seed {seed}: replay with make test SHUFFLE_SEED={seed}")

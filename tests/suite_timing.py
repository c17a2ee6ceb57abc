"""Where the suite's time goes: the seconds of each test file, printed at the end of a run.

Registered by tests/conftest.py in the process that reports (the controller under
pytest-xdist, which receives every worker's reports). A file's seconds are the sum of its
tests' setup, call and teardown times: under `--dist loadfile` one worker runs a file's tests
one after another, so that sum is the file's wall time on its worker. `--durations=25` (the
Makefile) lists the slowest single tests beside it.

On two cores the suite is CPU-bound, so a file's wall seconds depend on what ran beside it; its
CPU seconds do not. `CpuMeter` (registered in every process that runs tests) puts on each
report the CPU seconds used since the previous one by the test process and every process it
started, directly or not. Those are found by a sampler thread that reads /proc once a
second: the kernel's reaped-children figures miss most of them (a stage's JVM outlives its
Python driver and is reaped by init; a killed driver's JVM and a detached PostgreSQL server
likewise), so each descendant is followed by (pid, start time) from the first sample that sees
it, also after it is reparented, and counted up to the last sample that saw it. A process that
lives less than the interval may be missed: the figures are a floor.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from pathlib import Path

import pytest

CPU_KEY = "cpu_seconds"
SAMPLE_EVERY_S = 1.0  # a scan costs a few ms: well under 1% of a core
_TICKS = os.sysconf("SC_CLK_TCK")


def _scan() -> dict[int, tuple[int, int, float]]:
    """pid -> (parent pid, start time in ticks, utime + stime in seconds), one pass over /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while being read
        found[int(entry.name)] = (int(fields[1]), int(fields[19]),
                                  (int(fields[11]) + int(fields[12])) / _TICKS)
    return found


class TreeCpu:
    """CPU seconds of this process and of every process it started, directly or not."""

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> last CPU seconds
        self.lock = threading.Lock()

    def sample(self) -> None:
        procs = _scan()
        with self.lock:
            for pid, (_, start, cpu) in procs.items():
                key = (pid, start)
                if key in self.seen or self._descends(pid, procs):
                    self.seen[key] = max(cpu, self.seen.get(key, 0.0))

    def _descends(self, pid: int, procs: dict[int, tuple[int, int, float]]) -> bool:
        for _ in range(64):  # walk up to this process, or to init
            parent = procs.get(pid, (None,))[0]
            if parent is None or parent <= 1:
                return False
            if parent == self.root:
                return True
            pid = parent
        return False

    def total(self) -> float:
        """Sampled now: this process's CPU seconds plus its descendants' (last seen)."""
        self.sample()
        t = os.times()
        with self.lock:
            return t.user + t.system + sum(self.seen.values())


class CpuMeter:
    """Adds the CPU seconds since the previous report to each report's user_properties
    (pytest-xdist sends them to the controller with the report)."""

    def __init__(self) -> None:
        self.tree = TreeCpu()
        self.last = self.tree.total()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="suite-cpu-meter", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(SAMPLE_EVERY_S):
            self.tree.sample()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        now = self.tree.total()
        outcome.get_result().user_properties.append((CPU_KEY, now - self.last))
        self.last = now

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)


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
                     "process and every process it started, sampled each second)")
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

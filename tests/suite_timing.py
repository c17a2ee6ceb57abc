"""Where the suite's time goes: the seconds of each test file, printed at the end of a run.

Registered by tests/conftest.py in the process that reports (the controller under
pytest-xdist, which receives every worker's reports). A file's seconds are the sum of its
tests' setup, call and teardown times: under `--dist loadfile` one worker runs a file's tests
one after another, so that sum is the file's wall time on its worker. `--durations=25` (the
Makefile) lists the slowest single tests beside it.
"""

from __future__ import annotations

from collections import defaultdict

import pytest


class FileTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.worker: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] += report.duration
        if report.when == "call":
            self.tests[path] += 1
        node = getattr(report, "node", None)  # pytest-xdist: the worker that ran it
        if node is not None:
            self.worker[path] = node.gateway.id

    def table(self) -> list[str]:
        rows = sorted(self.seconds.items(), key=lambda kv: -kv[1])
        total = sum(self.seconds.values())
        lines = [f"{'seconds':>8} {'share':>6} {'tests':>5} {'worker':>6}  file"]
        for path, secs in rows:
            lines.append(f"{secs:8.1f} {100 * secs / max(total, 1e-9):5.1f}% "
                         f"{self.tests[path]:5d} {self.worker.get(path, '-'):>6}  {path}")
        lines.append(f"{total:8.1f} 100.0% {sum(self.tests.values()):5d} {'':>6}  "
                     "(all files; wall time is about this over the workers)")
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

"""The suite's CPU meter (tests/suite_timing.py) counts the CPU of the processes a test starts,
reaped or still running: the per-file table's cpu-s column rests on it."""

from __future__ import annotations

import subprocess
import sys

from tests.suite_timing import FileTimes, process_tree_cpu

# A child that burns 0.4 CPU-seconds by its own clock, then says so and waits. The kernel counts
# CPU in clock ticks (1/100 s), user and system apart: the meter may see a few ticks less.
TICKS_SLACK = 0.05
SPIN = ("import sys, time\n"
        "while time.process_time() < 0.4: pass\n"
        "print('spun', flush=True)\n"
        "sys.stdin.read()\n")


def test_a_reaped_child_s_cpu_is_counted():
    before = process_tree_cpu()
    subprocess.run([sys.executable, "-c", SPIN], input="", text=True, check=True,
                   capture_output=True, timeout=120)
    assert process_tree_cpu() - before >= 0.4 - TICKS_SLACK


def test_a_running_child_s_cpu_is_counted():
    before = process_tree_cpu()
    with subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout.readline() == "spun\n"
            assert process_tree_cpu() - before >= 0.4 - TICKS_SLACK  # alive: read from /proc
        finally:
            child.communicate("", timeout=120)


class _Report:
    def __init__(self, nodeid: str, when: str, duration: float, cpu: float) -> None:
        self.nodeid, self.when, self.duration = nodeid, when, duration
        self.user_properties = [("cpu_seconds", cpu)]


def test_the_table_sums_each_file_s_cpu_seconds():
    times = FileTimes()
    for when, cpu in (("setup", 1.0), ("call", 2.5), ("teardown", 0.5)):
        times.pytest_runtest_logreport(_Report("tests/a.py::t", when, 1.0, cpu))
    times.pytest_runtest_logreport(_Report("tests/b.py::t", "call", 0.5, 0.5))
    header, a, b, total = times.table()
    assert header.split()[:3] == ["seconds", "share", "cpu-s"]
    assert a.split()[2] == "4.0" and a.endswith("tests/a.py")
    assert b.split()[2] == "0.5" and b.endswith("tests/b.py")
    assert total.split()[2] == "4.5"

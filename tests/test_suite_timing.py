"""The suite's CPU meter (tests/suite_timing.py) counts the CPU of the processes a test starts,
running, ended, or ended after its parent did: the per-file table's cpu-s column rests on it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.suite_timing import FileTimes, TreeCpu

# A child that burns 0.4 CPU-seconds by its own clock, then says so and waits. The kernel counts
# CPU in clock ticks (1/100 s), user and system apart: the meter may see a few ticks less.
TICKS_SLACK = 0.05
SPIN = ("import sys, time\n"
        "while time.process_time() < 0.4: pass\n"
        "print('spun', flush=True)\n"
        "sys.stdin.read()\n")


def test_a_child_s_cpu_is_counted_while_it_runs_and_after_it_ended():
    tree = TreeCpu()
    before = tree.total()
    with subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout.readline() == "spun\n"
            assert tree.total() - before >= 0.4 - TICKS_SLACK  # running: read from /proc
        finally:
            child.communicate("", timeout=120)
    assert tree.total() - before >= 0.4 - TICKS_SLACK  # ended: its last sample stays


# A child that starts the spinner detached (its own session) and exits at once: the spinner is
# reparented to init, as a stage's JVM is when its Python driver ends first.
ORPHAN = ("import subprocess, sys\n"
          "p = subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdin=subprocess.PIPE, "
          "stdout=subprocess.PIPE, text=True, start_new_session=True)\n"
          "print(p.stdout.readline().strip(), p.pid, flush=True)\n")


def test_a_grandchild_seen_before_its_parent_ended_is_counted_after():
    tree = TreeCpu()
    before = tree.total()
    with subprocess.Popen([sys.executable, "-c", ORPHAN.replace(
            "flush=True)\n", "flush=True)\nsys.stdin.read()\n"), SPIN],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as parent:
        spun, orphan = parent.stdout.readline().split()
        try:
            tree.sample()  # the spinner, a grandchild now
            parent.communicate("", timeout=120)  # the parent ends: the spinner is an orphan
            assert tree.total() - before >= 0.4 - TICKS_SLACK
        finally:
            os.kill(int(orphan), signal.SIGKILL)


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

"""Resident memory and CPU time of a process tree, read from Linux /proc (no extra packages).

The benchmarks run Spark: the work happens in the driver JVM and its Python workers, children
of the process being measured, so a figure for one pid alone would miss most of it.
"""

from __future__ import annotations

import os
from pathlib import Path


def _tree(root_pid: int) -> list[list[str]]:
    """The /proc stat fields (after the command name) of root_pid and its live descendants."""
    parent: dict[int, int] = {}
    fields_of: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            parent[int(entry)] = int(fields[1])
            fields_of[int(entry)] = fields
        except (OSError, ValueError, IndexError):
            continue
    found, stack, seen = [], [root_pid], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if pid in fields_of:
            found.append(fields_of[pid])
        stack.extend(child for child, par in parent.items() if par == pid)
    return found


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of root_pid and all its descendants."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(int(fields[21]) * page for fields in _tree(root_pid))


def tree_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of root_pid and its live descendants, including what their
    reaped children used (utime, stime, cutime, cstime)."""
    ticks = sum(sum(int(x) for x in fields[11:15]) for fields in _tree(root_pid))
    return ticks / os.sysconf("SC_CLK_TCK")

"""Write one bench table to `bench/results/<name>.json` for the benchmarks page.

`docs/render_benchmarks.py` renders every such file; this module fills in what makes a figure
checkable (the command, date, machine, load average and commit that produced it) so no bench
states it by hand.

`NOT_RUN` names the benches that print figures but have no table yet, each with the reason (too
expensive for the machine the project is developed on); the page lists them, and
tests/bench/test_coverage.py fails for a bench that has neither a table nor an entry there.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from udfs.atomic import atomic_open

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def command(argv: list[str] | None = None) -> str:
    """The shell line that reran this bench, with the project's venv as the interpreter."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0]).resolve() if argv else Path("?")
    try:
        script = script.relative_to(ROOT)
    except ValueError:
        pass
    return shlex.join([".venv/bin/python", str(script), *argv[1:]])


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return "memory unknown"
    return f"{pages * size / 2**30:.0f} GiB"


def machine() -> str:
    """Cores, memory, CPU model and OS; never the host name."""
    return (f"{os.cpu_count()} cores, {_memory_gib()}, {_cpu_model()}, "
            f"{platform.system()} {platform.release()}")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages beside the core count: how busy the machine was
    while the figures were taken (CPU and wall times on a shared machine depend on it)."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f} on {os.cpu_count()} cores"


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """Short HEAD, with `+dirty` when tracked files other than the results themselves have
    uncommitted changes (a bench rewriting a committed table does not change the code it ran)."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".",
                 ":(exclude)bench/results")
    return head + ("+dirty" if dirty else "")


def write_result(name: str, title: str, columns: list[str], rows: list[list[object]],
                 notes: str | None = None, *, results_dir: Path | None = None) -> Path:
    """Write `<results_dir or RESULTS>/<name>.json` atomically and return its path."""
    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"{name}: every row needs {len(columns)} cells ({columns})")
    result = {"title": title, "command": command(),
              "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": machine(), "load": load_average(), "commit": commit(),
              "columns": list(columns), "rows": [list(row) for row in rows]}
    if notes:
        result["notes"] = notes
    path = Path(results_dir or RESULTS) / f"{name}.json"
    with atomic_open(path) as fh:
        json.dump(result, fh, indent=2, default=str)
        fh.write("\n")
    return path


#: bench script (or a script and the arguments of a table it has not written) -> why there is
#: no table in bench/results yet (the page lists these).
NOT_RUN: dict[str, str] = {
    "bench/reproduce_pategail.py": "18 training runs of 50 rounds (3 seeds x 3 settings x 2 "
    "schemes), well over ten CPU-minutes; not run on the shared 2-core machine",
    "bench/reproduce_axes.py": "8 configurations x 3 seeds of PateGAIL++ training, 10-20 "
    "minutes of one quiet core; not run on the shared 2-core machine",
    "bench/reproduce_attacks.py --skip chi": "the Geolife membership table (and the PateGAIL++ "
    "paper's white-box figures beside it) trains 4 targets and 4 shadow models each; not run "
    "on the shared 2-core machine",
}


def bench_of(result: dict) -> str | None:
    """The bench script (`bench/x.py`) a result's command ran, or None."""
    for word in shlex.split(result.get("command", "")):
        if word.startswith("bench/") and word.endswith(".py"):
            return word
    return None

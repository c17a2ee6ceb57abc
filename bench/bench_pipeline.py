"""Time the whole pipeline (`trajpriv run`) on a config, per stage, with peak memory.

    .venv/bin/python bench/bench_pipeline.py                          # the embedded default
    .venv/bin/python bench/bench_pipeline.py --config conf/telecom_shanghai.yaml \
        --set train.enabled=false --set synthesize.enabled=false

Runs the stages in a scratch data root (deleted afterwards unless --keep), one Spark session as
`make run` does, and prints the wall time of each stage (from the stage harness's log line), the
total, and the peak resident memory of the whole process tree (the CLI, the Spark driver JVM and
its Python workers), sampled from /proc every half second.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE_LINE = re.compile(r"stage (\w+) (ok|failed) in ([0-9.]+) s")


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of root_pid and all its descendants (Linux /proc)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            parent[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * page
        except (OSError, ValueError, IndexError):
            continue
    total, stack, seen = 0, [root_pid], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        stack.extend(child for child, par in parent.items() if par == pid)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "conf" / "default.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--keep", action="store_true", help="keep the scratch data root")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trajpriv_bench_"))
    cmd = [
        sys.executable,
        "-m",
        "jobs.cli",
        "run",
        "--config",
        args.config,
        "--set",
        f"storage.root={scratch}",
    ]
    for item in args.overrides:
        cmd += ["--set", item]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss_bytes(proc.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    log, _ = proc.communicate()
    wall = time.perf_counter() - t0
    sampler.join()
    peak_gib = peak[0] / 2**30
    stages = STAGE_LINE.findall(log)
    print(f"config {args.config} {' '.join(args.overrides)}")
    print(f"{'stage':<12}{'status':<8}{'wall s':>10}")
    for name, status, secs in stages:
        print(f"{name:<12}{status:<8}{float(secs):>10.1f}")
    print(f"{'total':<20}{wall:>10.1f}   (process wall time, Spark start included)")
    print(f"peak resident memory of the process tree: {peak_gib:.2f} GiB")
    report = re.search(r"written (\S+report\.html)", log)
    if report:
        print(f"report: {report.group(1)}")
    if proc.returncode != 0:
        print(log[-3000:], file=sys.stderr)
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"data root kept: {scratch}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())

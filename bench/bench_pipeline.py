"""Time the pipeline on a config, per stage, with the peak memory of each stage.

    .venv/bin/python bench/bench_pipeline.py                      # `trajpriv run` on the default
    .venv/bin/python bench/bench_pipeline.py --config conf/telecom_shanghai.yaml \
        --root /tmp/full --stages collect,evaluate                # stages on an existing root

Two modes:
- whole run (default): `trajpriv run` in one process and one Spark session, as `make run` does;
  the wall time of each stage comes from the stage harness's log line, the peak memory is that of
  the whole run;
- `--stages a,b,...`: each stage as its own `trajpriv <stage>` process, one after the other, so
  each stage gets its own wall time (Spark start included) and its own peak memory. This is how
  the Telecom-scale load test runs: the figures say which stage needs the memory.

Peak memory is the resident memory of the whole process tree (the CLI, the Spark driver JVM and
its Python workers), sampled from /proc every half second. The data root is a scratch folder
deleted afterwards, unless `--root` names one (kept) or `--keep` is given. `--json FILE` writes
the figures (with the machine's memory and load average) for the README.
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT))

from bench.proc_tree import tree_rss_bytes  # noqa: E402
from bench.results import write_result  # noqa: E402
from jobs.harness import add_overrides  # noqa: E402

STAGE_LINE = re.compile(r"stage (\w+) (ok|failed) in ([0-9.]+) s")


def run_measured(cmd: list[str]) -> tuple[int, str, float, int]:
    """Run cmd from the project root; returns (exit code, log, wall s, peak tree RSS bytes)."""
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
    return proc.returncode, log, wall, peak[0]


def machine() -> dict[str, object]:
    """Memory and load of this machine, so a figure can be read against them."""
    mem_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return {
        "cpus": os.cpu_count(),
        "mem_total_gib": round(mem_kib / 2**20, 1),
        "loadavg_1_5_15": list(os.getloadavg()),
    }


def cli_command(stage: str, config: str, root: Path, overrides: list[str]) -> list[str]:
    """`trajpriv <stage>` on `config` with its data under `root` and the --set overrides."""
    cmd = [sys.executable, "-m", "jobs.cli", stage, "--config", config]
    for item in [f"storage.root={root}", *overrides]:
        cmd += ["--set", item]
    return cmd


def stage_rows(
    stages: list[str], config: str, root: Path, overrides: list[str]
) -> tuple[int, list[dict], str]:
    """Each stage as its own process; stops at the first failure. (exit code, rows, last log)"""
    rows, code, last_log = [], 0, ""
    for stage in stages:
        code, last_log, wall, peak = run_measured(cli_command(stage, config, root, overrides))
        inner = STAGE_LINE.findall(last_log)
        rows.append(
            {
                "stage": stage,
                "status": "ok" if code == 0 else "failed",
                "wall_s": round(wall, 1),
                "stage_s": float(inner[-1][2]) if inner else None,
                "peak_gib": round(peak / 2**30, 2),
            }
        )
        if code != 0:
            break
    return code, rows, last_log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "conf" / "default.yaml"))
    add_overrides(parser)
    parser.add_argument("--root", help="data root to use and keep (default: a scratch folder)")
    parser.add_argument("--stages", help="comma-separated stages, each its own process")
    parser.add_argument("--keep", action="store_true", help="keep the scratch data root")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="trajpriv_bench_"))
    t0 = time.perf_counter()
    if args.stages:
        code, rows, log = stage_rows(args.stages.split(","), args.config, root, args.overrides)
    else:
        code, log, wall, peak = run_measured(cli_command("run", args.config, root, args.overrides))
        rows = [
            {"stage": name, "status": status, "stage_s": float(secs), "wall_s": None}
            for name, status, secs in STAGE_LINE.findall(log)
        ]
        rows.append(
            {
                "stage": "run (whole)",
                "status": "ok" if code == 0 else "failed",
                "wall_s": round(wall, 1),
                "peak_gib": round(peak / 2**30, 2),
            }
        )
    total = time.perf_counter() - t0
    print(f"config {args.config} {' '.join(args.overrides)}  root {root}")
    print(f"{'stage':<14}{'status':<8}{'stage s':>10}{'wall s':>10}{'peak GiB':>10}")
    for row in rows:
        cells = [row.get(k) for k in ("stage_s", "wall_s", "peak_gib")]
        text = "".join(f"{c:>10.1f}" if c is not None else f"{'':>10}" for c in cells)
        print(f"{row['stage']:<14}{row['status']:<8}{text}")
    print(f"{'total':<22}{total:>20.1f}   (process wall time, Spark starts included)")
    report = re.search(r"written (\S+report\.html)", log)
    if report:
        print(f"report: {report.group(1)}")
    if code != 0:
        print(log[-3000:], file=sys.stderr)
    publish(args, rows, total)
    if args.json:
        figures = {
            "config": args.config,
            "overrides": args.overrides,
            "stages": rows,
            "total_s": round(total, 1),
            "machine": machine(),
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    if args.root or args.keep:
        print(f"data root kept: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return code


def publish(args: argparse.Namespace, rows: list[dict], total: float) -> None:
    """The stage table for the benchmarks page (bench/results/pipeline.json)."""
    def num(v, fmt):
        return "" if v is None else f"{v:{fmt}}"

    table = [[r["stage"], r["status"], num(r.get("stage_s"), ".1f"), num(r.get("wall_s"), ".1f"),
              num(r.get("peak_gib"), ".2f")] for r in rows]
    table.append(["total", "", "", f"{total:.1f}", ""])
    write_result("pipeline", f"Pipeline run, {Path(args.config).name} "
                 f"{' '.join(args.overrides)}".strip(),
                 ["stage", "status", "stage s", "wall s", "peak GiB"], table,
                 notes="The total is process wall time, Spark starts included.")


if __name__ == "__main__":
    sys.exit(main())

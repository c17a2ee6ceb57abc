"""Benchmark: full-scale `trajpriv datagen` (then `trajpriv ingest` of its output) on local[2].

    .venv/bin/python bench/bench_datagen.py                       # conf/telecom_shanghai.yaml
    .venv/bin/python bench/bench_datagen.py --root /tmp/full --keep   # keep the catalog for later
    .venv/bin/python bench/bench_datagen.py --set datagen.users=1500 --no-ingest

Target (issue 2): generation plus ingestion of 9,481 users x 182 days under 15 minutes on two
cores. Prints, per stage, wall time, records per second, CPU seconds of the whole process tree
(this process, the Spark JVM and its Python workers) and its peak resident memory, then the
realism statistics next to their targets; writes every figure to bench/out/bench_datagen.json.

Why CPU seconds: the machines we bench on are shared, so wall time is an upper bound; CPU time
says how much work a stage did whatever the load (on two idle cores, wall >= CPU / 2).

The data root is `--root` (default: a fresh temporary folder). A folder this script created is
deleted afterwards unless `--keep`; a folder that existed before is never deleted. Both stages
run through the stage harness in one Spark session, so each is also in trajpriv_pub.runs.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.proc_tree import tree_cpu_seconds, tree_rss_bytes  # noqa: E402
from bench.results import write_result  # noqa: E402
from jobs import harness  # noqa: E402
from jobs.config import load_config  # noqa: E402
from jobs.datagen.stats import format_stats  # noqa: E402

TARGET_S = 15 * 60
SAMPLE_S = 0.5


class StageMeter:
    """Wall time, tree CPU seconds and peak tree RSS (sampled every SAMPLE_S) of one block."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        pid = os.getpid()
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(pid))
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> StageMeter:
        self._t0, self._cpu0 = time.perf_counter(), tree_cpu_seconds(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = tree_cpu_seconds(os.getpid()) - self._cpu0

    def figures(self) -> dict[str, float]:
        return {
            "wall_s": round(self.wall_s, 1),
            "cpu_s": round(self.cpu_s, 1),
            "peak_rss_gib": round(self.peak / 2**30, 2),
        }


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    harness.configure_logging()
    parser = harness.build_parser("bench_datagen")
    parser.set_defaults(config="conf/telecom_shanghai.yaml")
    parser.add_argument("--no-ingest", action="store_true", help="measure generation alone")
    parser.add_argument("--root", default=None, help="data root (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep a data root this script made")
    parser.add_argument("--out", default="bench/out/bench_datagen.json")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve() if args.root else Path(tempfile.mkdtemp(prefix="bench_dg_"))
    created = args.root is None or not root.exists()
    overrides = [*args.overrides, f"storage.root={root}"]
    cfg = load_config(args.config, overrides)

    from jobs.datagen import stage as datagen
    from jobs.spark.session import get_spark, stop_spark

    ingest = None if args.no_ingest else importlib.import_module("jobs.ingest.stage")
    results: dict = {"config": args.config, "overrides": overrides, "load_before": load_average()}
    spark = get_spark(cfg)
    try:
        with StageMeter() as gen_meter:
            gen = harness.execute("datagen", datagen.run, cfg, args, spark)
        results["datagen"] = gen
        results["datagen_meter"] = gen_meter.figures()
        if ingest is not None:
            with StageMeter() as ing_meter:
                results["ingest"] = harness.execute("ingest", ingest.run, cfg, args, spark)
            results["ingest_meter"] = ing_meter.figures()
    finally:
        stop_spark(spark)
        results["load_after"] = load_average()
        if created and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    results["root"] = str(root) if (args.keep or not created) else None
    report(results, gen)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return 0


def report(results: dict, gen: dict) -> None:
    n = gen["records"]
    meters = [("datagen", results["datagen_meter"])]
    if "ingest_meter" in results:
        meters.append(("ingest", results["ingest_meter"]))
    total = sum(m["wall_s"] for _, m in meters)
    results["total_s"] = round(total, 1)
    print(
        f"\n== bench_datagen: {gen['users']} users x {gen['days']} days, {gen['stations_source']}"
    )
    print(f"load average before {results['load_before']}, after {results['load_after']}")
    print(f"{'stage':<9}{'wall s':>9}{'records/s':>12}{'CPU s':>9}{'peak RSS GiB':>14}")
    for name, m in meters:
        rate = n / max(m["wall_s"], 1e-9)
        print(
            f"{name:<9}{m['wall_s']:>9.1f}{rate:>12.0f}{m['cpu_s']:>9.1f}{m['peak_rss_gib']:>14.2f}"
        )
    if "ingest" in results:
        ing = results["ingest"]
        print(
            f"ingest: accepted {ing.get('records_accepted')}, quarantined "
            f"{ing.get('records_quarantined')}; phases {phase_line(ing)}"
        )
    else:
        print("ingest   not measured: generation alone")
    print(f"datagen phases: {phase_line(gen)}")
    verdict = "within" if total < TARGET_S else "OVER"
    print(f"total    {total:8.1f} s  ({verdict} the {TARGET_S // 60}-minute target)")
    if results["root"]:
        print(f"data root kept: {results['root']}")
    stats = {k: gen[k] for k in gen if k in _STAT_KEYS}
    print("realism statistics per user-day:\n" + format_stats(stats))
    table = [[name, f"{m['wall_s']:.1f}", f"{n / max(m['wall_s'], 1e-9):.0f}",
              f"{m['cpu_s']:.1f}", f"{m['peak_rss_gib']:.2f}"] for name, m in meters]
    table.append(["total", f"{total:.1f}", "", "", ""])
    write_result("datagen", f"Data generation: {gen['users']} users x {gen['days']} days, "
                 f"{gen['stations_source']}",
                 ["stage", "wall s", "records/s", "CPU s", "peak RSS GiB"], table,
                 notes=f"Target: under {TARGET_S // 60} minutes in all.")


def phase_line(figures: dict) -> str:
    """The `*_s` figures a stage reports about its own phases, flattened to one line."""
    parts = []
    for key, value in figures.items():
        if key.endswith("_s") and key != "wall_s":
            if isinstance(value, dict):
                parts += [f"{key}.{k}={v}" for k, v in value.items()]
            else:
                parts.append(f"{key}={value}")
    return " ".join(parts)


_STAT_KEYS = (
    "records",
    "user_days",
    "distinct_median",
    "distinct_p90",
    "rg_median_km",
    "rg_p90_km",
    "rg_zero_share",
    "jump_median_km",
    "jump_p90_km",
    "jumps",
    "records_per_active_day_mean",
    "records_per_active_day_median",
    "active_share",
)

if __name__ == "__main__":
    sys.exit(main())

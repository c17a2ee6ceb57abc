"""Benchmark: full-scale `trajpriv datagen` (then `trajpriv ingest` of its output) on local[2].

    .venv/bin/python bench/bench_datagen.py                       # conf/telecom_shanghai.yaml
    .venv/bin/python bench/bench_datagen.py --set datagen.users=1000 --no-ingest

Target (issue 2): generation plus ingestion of 9,481 users x 182 days under 15 minutes on two
cores. Prints wall times, records per second and the realism statistics next to their targets,
and writes every figure to bench/out/bench_datagen.json. Both stages run through the stage
harness in one Spark session, so each is also recorded in trajpriv_pub.runs.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

from jobs import stage as harness
from jobs.config import load_config
from jobs.datagen_stats import format_stats

TARGET_S = 15 * 60


def main(argv: list[str] | None = None) -> int:
    harness.configure_logging()
    parser = harness.build_parser("bench_datagen")
    parser.set_defaults(config="conf/telecom_shanghai.yaml")
    parser.add_argument("--no-ingest", action="store_true", help="measure generation alone")
    parser.add_argument("--out", default="bench/out/bench_datagen.json")
    args = parser.parse_args(argv)
    cfg = load_config(args.config, args.overrides)

    from jobs import datagen
    from jobs.session import get_spark, stop_spark

    try:
        ingest = None if args.no_ingest else importlib.import_module("jobs.ingest")
    except ModuleNotFoundError:
        ingest = None
    results: dict = {"config": args.config, "overrides": args.overrides}
    spark = get_spark(cfg)
    try:
        t0 = time.perf_counter()
        gen = harness.execute("datagen", datagen.run, cfg, args, spark)
        gen_s = time.perf_counter() - t0
        results["datagen"] = gen
        results["datagen_s"] = round(gen_s, 1)
        if ingest is not None:
            t1 = time.perf_counter()
            results["ingest"] = harness.execute("ingest", ingest.run, cfg, args, spark)
            results["ingest_s"] = round(time.perf_counter() - t1, 1)
        else:
            results["ingest"] = "not measured (--no-ingest or jobs/ingest.py absent)"
    finally:
        stop_spark(spark)

    n = gen["records"]
    total = results["datagen_s"] + results.get("ingest_s", 0.0)
    results["total_s"] = round(total, 1)
    print(
        f"\n== bench_datagen: {gen['users']} users x {gen['days']} days, {gen['stations_source']}"
    )
    print(f"datagen  {results['datagen_s']:8.1f} s  {n / gen_s:10.0f} records/s  ({n} records)")
    if "ingest_s" in results:
        ing = results["ingest"]
        accepted, quarantined = ing.get("records_accepted"), ing.get("records_quarantined")
        print(
            f"ingest   {results['ingest_s']:8.1f} s  {n / results['ingest_s']:10.0f} records/s  "
            f"(accepted {accepted}, quarantined {quarantined})"
        )
    else:
        print("ingest   not measured: generation alone")
    verdict = "within" if total < TARGET_S else "OVER"
    print(f"total    {total:8.1f} s  ({verdict} the {TARGET_S // 60}-minute target)")
    stats = {k: gen[k] for k in gen if k in _STAT_KEYS}
    print("realism statistics per user-day:\n" + format_stats(stats))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return 0


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

"""Benchmark: geo-mode evaluation at Telecom-Shanghai scale on local[2] (issue 5, target < 5 min).

Generates synthetic 48-slot days (9,481 users x 182 days, about 37% of user-days active, over
3,233 random locations in the Shanghai box), writes them and a perturbed copy to Parquet in a
temporary folder, then times evaluate's path (`jobs.evaluate.summaries.summarize_days_pandas` on
both tables, `udfs.mobility.compare_summaries` on the driver; Parquet read included, generation
and writing excluded) and prints the figure.

    .venv/bin/python bench/bench_evaluate.py [--users 9481] [--days 182]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402

LAT, LON = (30.7, 31.6), (120.9, 121.95)


def make_days(
    rng: np.random.Generator, users: int, days: int, active: float, n_loc: int
) -> np.ndarray:
    """(n, 48) int32 days: each starts at the user's home; a few jumps, forward-filled."""
    active_mask = rng.random((users, days)) < active
    user_of_day = np.nonzero(active_mask)[0]
    n = user_of_day.size
    home = rng.integers(0, n_loc, users)[user_of_day]
    work = rng.integers(0, n_loc, users)[user_of_day]
    jump_rate = rng.uniform(0.01, 0.15, (n, 1))
    jumps = rng.random((n, 48)) < jump_rate
    target = np.where(rng.random((n, 48)) < 0.5, work[:, None], rng.integers(0, n_loc, (n, 48)))
    target = np.where(rng.random((n, 48)) < 0.3, home[:, None], target)
    days_arr = np.where(jumps, target, -1)
    days_arr[:, 0] = home
    idx = np.where(days_arr >= 0, np.arange(48), 0)
    filled = np.take_along_axis(days_arr, np.maximum.accumulate(idx, axis=1), axis=1)
    return filled.astype(np.int32)


def perturb(rng: np.random.Generator, days: np.ndarray, n_loc: int, p: float = 0.1) -> np.ndarray:
    """Each slot replaced by a uniformly random location with probability p."""
    flip = rng.random(days.shape) < p
    return np.where(flip, rng.integers(0, n_loc, days.shape), days).astype(np.int32)


def write_parquet(days: np.ndarray, folder: Path, files: int = 8) -> None:
    folder.mkdir(parents=True)
    for k, chunk in enumerate(np.array_split(np.arange(days.shape[0]), files)):
        block = days[chunk]
        slots = pa.ListArray.from_arrays(
            pa.array(np.arange(0, block.size + 1, 48, dtype=np.int32)), pa.array(block.ravel())
        )
        table = pa.table({"day_no": pa.array(chunk.astype(np.int64)), "slots": slots})
        pq.write_table(table, folder / f"part-{k:03d}.parquet")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=9481)
    ap.add_argument("--days", type=int, default=182)
    ap.add_argument("--active", type=float, default=0.37)
    ap.add_argument("--locations", type=int, default=3233)
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--repeat", type=int, default=1, help="time the evaluation this many times")
    args = ap.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from jobs.evaluate.summaries import summarize_days_pandas
    from udfs.mobility import compare_summaries, metric_bins

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    coords = np.column_stack([rng.uniform(*LAT, args.locations), rng.uniform(*LON, args.locations)])
    real = make_days(rng, args.users, args.days, args.active, args.locations)
    fake = perturb(rng, real, args.locations)
    with tempfile.TemporaryDirectory(prefix="bench_evaluate_") as tmp:
        write_parquet(real, Path(tmp) / "real")
        write_parquet(fake, Path(tmp) / "perturbed")
        gen_s = time.perf_counter() - t0
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("bench_evaluate")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.execution.arrow.pyspark.fallback.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        try:
            bins = metric_bins("geo")
            eval_s = []
            for _ in range(args.repeat):  # the first run is cold (JVM and Python workers)
                t1 = time.perf_counter()
                summaries = [
                    summarize_days_pandas(spark.read.parquet(f"{tmp}/{name}"), coords, bins, name)
                    for name in ("real", "perturbed")
                ]
                metrics = compare_summaries(*summaries, bins)
                eval_s.append(round(time.perf_counter() - t1, 1))
        finally:
            spark.stop()
    write_result("evaluate_geo", f"Geo-mode evaluation on local[2]: {args.users:,} users x "
                 f"{args.days} days, {int(real.shape[0]):,} user-days per table",
                 ["run", "evaluate wall s", "target s"],
                 [[i + 1, f"{s:.1f}", 300] for i, s in enumerate(eval_s)],
                 notes="Wall seconds of evaluate's path (`summarize_days_pandas` on the real "
                       "and the perturbed table, `compare_summaries` on the driver; Parquet "
                       "read included, generation and writing excluded); run 1 is cold (JVM "
                       f"and Python workers). {args.locations:,} random locations in the "
                       "Shanghai box.")
    print(
        json.dumps(
            {
                "benchmark": "evaluate_geo_local2",
                "users": args.users,
                "days_per_user": args.days,
                "active_share": args.active,
                "locations": args.locations,
                "user_days_per_table": int(real.shape[0]),
                "generate_and_write_s": round(gen_s, 1),
                "evaluate_s": eval_s[0],
                "evaluate_s_runs": eval_s,
                "target_s": 300,
                "load_average_1m": round(os.getloadavg()[0], 1),
                "cpus": os.cpu_count(),
                "metrics": metrics,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()

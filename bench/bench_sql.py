"""`trajpriv sql` cold and warm: seconds per query through the warm server vs a fresh session.

Builds a small root (one published table, 2,000 rows in 4 partitions) unless --root holds one,
then times, each as a separate `python -m jobs.cli sql` process (what a user types):
- cold: no server running (the command starts it: JVM, metastore, catalog);
- warm: the next queries, answered by the running server (median and max of --warm runs);
- no-server: the same query in a fresh session (`--no-server`, the path before the server).
Stops the server at the end. Prints one JSON line of the figures.

    python bench/bench_sql.py --root /tmp/bench_sql --warm 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERY = ("SELECT dataset, count(*) AS n, round(avg(lat), 4) AS lat FROM trajpriv_pub.locations "
         "GROUP BY dataset ORDER BY dataset")
SETTINGS = ["spark.master=local[2]", "spark.conf.spark.sql.shuffle.partitions=2",
            "spark.conf.spark.driver.memory=1g"]


def build(root: Path) -> None:
    """A root with `trajpriv_pub.locations` (4 datasets x 500 locations), in a subprocess."""
    code = f"""
from jobs.config import load_config
from jobs.spark.session import get_spark, stop_spark
from jobs.spark.catalog import write_table
from jobs.spark.tables import LOCATIONS
cfg = load_config(None, {["storage.root=" + str(root), *SETTINGS]!r})
spark = get_spark(cfg)
df = spark.range(2000).selectExpr("cast(id % 500 as int) AS loc_id", "31.0 + id / 1e4 AS lat",
    "121.0 + id / 1e4 AS lon", "concat('d', cast(id div 500 as string)) AS dataset")
write_table(df, LOCATIONS)
stop_spark(spark)
"""
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def sql(root: Path, *extra: str) -> float:
    cmd = [sys.executable, "-m", "jobs.cli", "sql", QUERY, *extra]
    for item in ["storage.root=" + str(root), *SETTINGS]:
        cmd += ["--set", item]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode != 0 or "|d0 " not in out.stdout:
        raise SystemExit(f"query failed ({out.returncode}): {out.stderr[-2000:]}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=Path("/tmp/bench_sql"))
    parser.add_argument("--warm", type=int, default=5)
    args = parser.parse_args()
    root = args.root.resolve()
    if not (root / "warehouse" / "trajpriv_pub.db" / "locations").exists():
        build(root)
    stop = [sys.executable, "-m", "jobs.cli", "sql", "--stop", "--set", f"storage.root={root}"]
    subprocess.run(stop, cwd=ROOT, check=True, capture_output=True)
    try:
        cold = sql(root)
        warm = [sql(root) for _ in range(args.warm)]
    finally:
        subprocess.run(stop, cwd=ROOT, check=True, capture_output=True)
    fresh = sql(root, "--no-server")
    print(json.dumps({"cold_s": round(cold, 2), "warm_median_s": round(statistics.median(warm), 2),
                      "warm_max_s": round(max(warm), 2), "no_server_s": round(fresh, 2),
                      "warm_runs": len(warm), "load_1min": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()

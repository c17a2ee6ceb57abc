"""`trajpriv sql` cold and warm: seconds per query through the warm server vs a fresh session.

Builds a small root (one published table, 2,000 rows in 4 partitions) unless --root holds one,
then times, each as a separate `python -m jobs.cli sql` process (what a user types):
- cold: no server running (the command starts it: JVM, metastore, catalog);
- warm: the next queries, answered by the running server (median and max of --warm runs);
- no-server: the same query in a fresh session (`--no-server`, the path before the server).
Stops the server at the end. Prints one JSON line of the figures.

`--endpoints`: the same table over a PostgreSQL metastore (a private server on a free port)
behind `trajpriv serve`, and per client the cold query (a new client process or connection:
beeline, impyla's DB-API, Spark Connect, `trajpriv sql` as the endpoints' client) and the warm
ones (the same connection again; beeline and `trajpriv sql` are a process per query), plus the
seconds `trajpriv serve` takes to be ready. Needs Debian's postgresql and its JDBC driver.

    python bench/bench_sql.py --root /tmp/bench_sql --warm 5
    python bench/bench_sql.py --endpoints --root /tmp/bench_sql_pg --warm 5
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
sys.path.insert(0, str(ROOT))

from bench.results import write_result  # noqa: E402

QUERY = ("SELECT dataset, count(*) AS n, round(avg(lat), 4) AS lat FROM trajpriv_pub.locations "
         "GROUP BY dataset ORDER BY dataset")
SETTINGS = ["spark.master=local[2]", "spark.conf.spark.sql.shuffle.partitions=2",
            "spark.conf.spark.driver.memory=1g"]


def build(root: Path, extra: list[str] | None = None) -> None:
    """A root with `trajpriv_pub.locations` (4 datasets x 500 locations), in a subprocess."""
    code = f"""
from jobs.config import load_config
from jobs.spark.session import get_spark, stop_spark
from jobs.spark.catalog import write_table
from jobs.spark.tables import LOCATIONS
cfg = load_config(None, {["storage.root=" + str(root), *SETTINGS, *(extra or [])]!r})
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


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _figures(cold: float, warm: list[float]) -> dict:
    return {"cold_s": round(cold, 2), "warm_median_s": round(statistics.median(warm), 2),
            "warm_max_s": round(max(warm), 2)}


def _beeline(cfg) -> None:
    from jobs.sql.endpoint import jdbc_url, spark_home

    out = subprocess.run([str(spark_home() / "bin" / "beeline"), "-u", jdbc_url(cfg), "-n",
                          "bench", "--silent=true", "--outputformat=csv2", "-e", QUERY],
                         capture_output=True, text=True)
    if out.returncode != 0 or "d0," not in out.stdout:
        raise SystemExit(f"beeline failed: {out.stderr[-2000:]}")


def _clients(cfg, sets: list[str], warm: int) -> dict:
    """Cold and warm seconds of the query through each client of the running endpoints."""
    from impala.dbapi import connect
    from pyspark.sql import SparkSession

    from jobs.sql.endpoint import connect_url

    figures = {}
    runs = [_timed(lambda: _beeline(cfg)) for _ in range(warm + 1)]
    figures["beeline"] = _figures(runs[0], runs[1:])
    conn = None

    def dbapi() -> None:
        nonlocal conn
        conn = conn or connect(host=cfg.serve.host, port=cfg.serve.port, auth_mechanism="PLAIN",
                               user="bench")
        cur = conn.cursor()
        cur.execute(QUERY)
        assert cur.fetchall()[0][0] == "d0"

    runs = [_timed(dbapi) for _ in range(warm + 1)]
    conn.close()
    figures["dbapi_impyla"] = _figures(runs[0], runs[1:])
    spark = None

    def remote() -> None:
        nonlocal spark
        spark = spark or SparkSession.builder.remote(connect_url(cfg)).getOrCreate()
        assert spark.sql(QUERY).collect()[0][0] == "d0"

    runs = [_timed(remote) for _ in range(warm + 1)]
    spark.stop()
    figures["spark_connect"] = _figures(runs[0], runs[1:])
    runs = [_timed(lambda: sql(Path(cfg.storage.root), *(f"--set={s}" for s in sets)))
            for _ in range(warm + 1)]
    figures["trajpriv_sql_via_connect"] = _figures(runs[0], runs[1:])
    return figures


def endpoints(root: Path, warm: int) -> dict:
    """The `--endpoints` figures (see the module docstring)."""
    import shutil
    import tempfile

    from jobs.config import load_config
    from jobs.spark import metastore_pg
    from tests.reliability.test_postgres_metastore import _free_ports, start_on_a_free_port

    pg = Path(tempfile.mkdtemp(prefix="bench-pg-", dir="/tmp"))
    try:
        url = start_on_a_free_port(pg, _free_ports())
        ports = _free_ports()
        sets = ["catalog.metastore=postgres", f"catalog.postgres_url={url}",
                f"serve.port={next(ports)}", f"serve.connect_port={next(ports)}"]
        shutil.rmtree(root, ignore_errors=True)
        build(root, sets)
        metastore_pg.grant_analyst(url, "postgres", None, "trajpriv_analyst")
        serve = [sys.executable, "-m", "jobs.cli", "serve",
                 *(f"--set={s}" for s in [f"storage.root={root}", *SETTINGS, *sets])]
        start = time.perf_counter()
        subprocess.run(serve, cwd=ROOT, check=True, capture_output=True)
        figures = {"serve_ready_s": round(time.perf_counter() - start, 2)}
        try:
            cfg = load_config(None, [f"storage.root={root}", *SETTINGS, *sets])
            figures.update(_clients(cfg, sets, warm))
        finally:
            subprocess.run([*serve, "--stop"], cwd=ROOT, check=True, capture_output=True)
    finally:
        metastore_pg.stop(pg)
        shutil.rmtree(pg, ignore_errors=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", type=Path, default=Path("/tmp/bench_sql"))
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--endpoints", action="store_true",
                        help="time the clients of `trajpriv serve` instead (PostgreSQL metastore)")
    args = parser.parse_args()
    root = args.root.resolve()
    if args.endpoints:
        sys.path.insert(0, str(ROOT))
        figures = endpoints(root, args.warm)
        print(json.dumps({**figures, "warm_runs": args.warm,
                          "load_1min": round(os.getloadavg()[0], 2)}))
        write_result("sql_endpoints", f"`trajpriv serve` clients, one query ({args.warm} warm "
                     "runs)", ["client", "cold s", "warm median s", "warm max s"],
                     [[name, f["cold_s"], f["warm_median_s"], f["warm_max_s"]]
                      for name, f in figures.items() if isinstance(f, dict)])
        return
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
    write_result("sql", f"`trajpriv sql`, one query ({len(warm)} warm runs)",
                 ["cold s", "warm median s", "warm max s", "no server s"],
                 [[f"{cold:.2f}", f"{statistics.median(warm):.2f}", f"{max(warm):.2f}",
                   f"{fresh:.2f}"]])


if __name__ == "__main__":
    main()

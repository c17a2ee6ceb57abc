"""Reader throughput: records per second of the ingest readers on one core (no Spark).

Writes a telecom export of N records (default 5,000,000; `user,start,end,lat,lon,station`,
ISO timestamps, as `trajpriv datagen` lands them) in files of 500,000 records under
`--dir` (default /tmp/ingest/bench), then times, file by file as the Spark job's tasks do:
  * parse: `jobs.ingest.readers.pipeline.parse_file` (bytes -> parsed frame: split, fields,
    numbers, timestamps, every quarantine check),
  * map: `jobs.ingest.locmap.map_points` onto 10,000 stations (given ids, nearest for the
    records without one),
and the same parse for two other layouts on the first `--other` records: a tab-separated,
header-less export with `H.MM` clock times and the day in the file name (`ingest.date_from`),
and a quoted CSV (`quoting: csv`, the csv module's path).

    flock /tmp/trajpriv-heavy.lock .venv/bin/python bench/bench_ingest.py [--records N]

Prints one line per figure and a JSON summary. The files are kept (`--keep`) or removed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402
from jobs.ingest.locmap import LocationSet, map_points  # noqa: E402
from jobs.ingest.readers.pipeline import ReaderOptions, parse_file  # noqa: E402

PER_FILE = 500_000


def stations(n: int, rng: np.random.Generator) -> LocationSet:
    lat = 31.0 + rng.random(n) * 0.5
    lon = 121.2 + rng.random(n) * 0.6
    ids = np.arange(n, dtype=np.int64)
    return LocationSet(ids, lat, lon, ids.astype(str).astype(object))


def records(n: int, start: int, locs: LocationSet, rng: np.random.Generator) -> pd.DataFrame:
    """n records: 9,481-ish users, a day of June 2014 each, station ids on 80% of them."""
    st = rng.integers(0, len(locs), n)
    base = np.datetime64("2014-06-01T00:00:00")
    ts = base + rng.integers(0, 30 * 86400, n).astype("timedelta64[s]")
    end = ts + rng.integers(60, 1800, n).astype("timedelta64[s]")
    jitter = rng.normal(0, 0.001, (n, 2))
    return pd.DataFrame({
        "user": (start + np.arange(n)) % 9481,
        "ts": ts, "end": end,
        "lat": np.round(locs.lat[st] + jitter[:, 0], 6),
        "lon": np.round(locs.lon[st] + jitter[:, 1], 6),
        "station": np.where(rng.random(n) < 0.8, st.astype(str), ""),
    })


def write_iso(frame: pd.DataFrame, path: Path) -> None:
    ts = frame["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    end = frame["end"].dt.strftime("%Y-%m-%d %H:%M:%S")
    body = ("u" + frame["user"].astype(str) + "," + ts + "," + end + ","
            + frame["lat"].astype(str) + "," + frame["lon"].astype(str) + "," + frame["station"])
    path.write_text("user,start,end,lat,lon,station\n" + "\n".join(body) + "\n")


def write_clock(frame: pd.DataFrame, path: Path) -> None:
    clock = frame["ts"].dt.hour.astype(str) + "." + frame["ts"].dt.strftime("%M")
    body = ("u" + frame["user"].astype(str) + "\t" + clock + "\t" + frame["lon"].astype(str)
            + "\t" + frame["lat"].astype(str))
    path.write_text("\n".join(body) + "\n")


def write_quoted(frame: pd.DataFrame, path: Path) -> None:
    ts = frame["ts"].dt.strftime("%Y-%m-%d %H:%M:%S")
    body = ('"u' + frame["user"].astype(str) + '","' + ts + '",,' + frame["lat"].astype(str)
            + "," + frame["lon"].astype(str) + ',"' + frame["station"] + '"')
    path.write_text("user,start,end,lat,lon,station\n" + "\n".join(body) + "\n")


def timed_parse(files: list[Path], opts: ReaderOptions, locs: LocationSet | None):
    """(records, parse CPU seconds, map CPU seconds) over the files, one at a time: CPU time of
    this one-threaded process, which a shared machine's load inflates far less than wall time."""
    n, t_parse, t_map = 0, 0.0, 0.0
    for f in files:
        content = f.read_bytes()
        t0 = time.process_time()
        parsed = parse_file(content, str(f), opts)
        t1 = time.process_time()
        if locs is not None:
            mapped = map_points(parsed, locs, opts.max_distance_km)
            assert mapped["reason"].isna().mean() > 0.99, mapped["reason"].value_counts()
        t2 = time.process_time()
        assert parsed["reason"].isna().all(), parsed["reason"].value_counts().head()
        n += len(parsed)
        t_parse += t1 - t0
        t_map += t2 - t1
    return n, t_parse, t_map


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--other", type=int, default=1_000_000,
                    help="records of the clock-time and quoted layouts")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/ingest/bench"))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    locs = stations(10_000, rng)
    folder = args.dir
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "iso").mkdir(parents=True)
    (folder / "clock").mkdir()
    (folder / "quoted").mkdir()
    t0 = time.perf_counter()
    iso, clock, quoted = [], [], []
    for i, start in enumerate(range(0, args.records, PER_FILE)):
        frame = records(min(PER_FILE, args.records - start), start, locs, rng)
        iso.append(folder / "iso" / f"part-{i:05d}.csv")
        write_iso(frame, iso[-1])
        if start < args.other:
            clock.append(folder / "clock" / f"cdr_201406{i + 1:02d}.txt")
            write_clock(frame, clock[-1])
            quoted.append(folder / "quoted" / f"part-{i:05d}.csv")
            write_quoted(frame, quoted[-1])
    size = sum(f.stat().st_size for f in iso)
    print(f"wrote {args.records:,} records ({size / 2**20:.0f} MiB) in "
          f"{time.perf_counter() - t0:.1f} s under {folder}")

    out = {}
    n, tp, tm = timed_parse(iso, ReaderOptions(source="telecom"), locs)
    out["iso_csv"] = {"records": n, "parse_s": round(tp, 2), "map_s": round(tm, 2),
                      "parse_records_per_s": round(n / tp), "parse_map_records_per_s":
                      round(n / (tp + tm)), "MiB_per_s": round(size / 2**20 / tp, 1)}
    print(f"telecom CSV, ISO timestamps: {n:,} records, parse {tp:.1f} s = {n / tp:,.0f} "
          f"records/s ({size / 2**20 / tp:.1f} MiB/s); + map to 10,000 stations {tm:.1f} s = "
          f"{n / (tp + tm):,.0f} records/s")
    clock_opts = ReaderOptions(source="telecom", sep="\t", header=False,
                               columns=("user", "start", "lon", "lat"), ts_format="%H.%M",
                               date_from=r"cdr_(?P<date>\d{8})", date_format="%Y%m%d")
    n, tp, _ = timed_parse(clock, clock_opts, None)
    out["clock_tab"] = {"records": n, "parse_s": round(tp, 2), "parse_records_per_s": round(n / tp)}
    print(f"tab-separated, header-less, H.MM clock times: {n:,} records, parse {tp:.1f} s = "
          f"{n / tp:,.0f} records/s")
    n, tp, _ = timed_parse(quoted, ReaderOptions(source="telecom", quoted=True), None)
    out["quoted_csv"] = {"records": n, "parse_s": round(tp, 2),
                         "parse_records_per_s": round(n / tp)}
    print(f"quoted CSV (quoting: csv): {n:,} records, parse {tp:.1f} s = {n / tp:,.0f} records/s")
    print(json.dumps(out))
    rows = [["telecom CSV, ISO timestamps", f"{out['iso_csv']['records']:,}",
             f"{out['iso_csv']['parse_records_per_s']:,}", f"{out['iso_csv']['MiB_per_s']}",
             f"{out['iso_csv']['parse_map_records_per_s']:,}"],
            ["tab-separated, header-less, H.MM clock times", f"{out['clock_tab']['records']:,}",
             f"{out['clock_tab']['parse_records_per_s']:,}", "", ""],
            ["quoted CSV (quoting: csv)", f"{out['quoted_csv']['records']:,}",
             f"{out['quoted_csv']['parse_records_per_s']:,}", "", ""]]
    write_result("ingest_readers", "Ingest readers: records per CPU second on one core",
                 ["layout", "records", "parse records/CPU s", "parse MiB/CPU s",
                  "parse + map to 10,000 stations records/CPU s"], rows,
                 notes="`jobs.ingest.readers.pipeline.parse_file` file by file (500,000 records "
                       "each), as the Spark job's tasks call it; map = `jobs.ingest.locmap."
                       "map_points`. Writing the files is not timed.")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

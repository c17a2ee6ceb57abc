"""Seconds per training round with 1 and 2 processes under TorchDistributor, and the launch cost.

Data: Geolife (83 users, ../shared/data/geolife_pategail, models.data.load_geolife) and a synthetic
Telecom-shaped slice of 9,481 users (models.data.home_work_population: random home/work days on
3,233 locations; only the shape matters for timing). Each configuration runs
`models.distributed.run_rank` through TorchDistributor(use_gpu=False) in a local[2] session (no
catalog tables: the shards are handed to the ranks in memory), with local_mode=True (torchrun on the
driver, `--modes local`) and/or local_mode=False (one barrier Spark task per rank, `--modes
barrier`), and reports:
  round_s     mean seconds per round on the slowest rank (rollout + critics + release + PPO)
  launch_s    wall time of distributor.run minus the slowest rank's setup + rounds
              (torchrun start, interpreter + torch import, process-group rendezvous, teardown)
  setup_s     rank setup (expert features, critics) on the slowest rank
Usage: python bench/bench_train_spark.py [--rounds 3] [--telecom-users 9481] [--skip-telecom]
       [--modes local,barrier]
Note the machine load (printed) when reading the figures.

Pipeline mode (`--pipeline CONFIG --root ROOT [--set KEY=VALUE ...]`): one real `trajpriv train`
on a data root prepared by `trajpriv datagen` + `ingest` (e.g. conf/telecom_shanghai.yaml, the
full 9,481 users), in a child process, and prints from its log:
  stage_s     split + shard staging on Spark (before the ranks start)
  launch_s    TorchDistributor start until every rank is ready for round 1 (torchrun, imports,
              rendezvous, shard load, expert features, critics, start distribution), with the
              phases of `jobs.train.stage.launch_phases`
  round_s     mean seconds per round (rank 0's round lines), rounds done, final epsilon
  total_s     the child's wall time (JVM start included); load average sampled every 5 s
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.results import write_result  # noqa: E402
from models.data import SHANGHAI_BOX, TrainData, home_work_population, load_geolife
from models.distributed import RankJob, check_summary, run_rank

GEOLIFE = Path(__file__).resolve().parents[2] / "shared" / "data" / "geolife_pategail"


def shard_of(data: TrainData, rank: int, world: int):
    rows = [u for u in range(data.n_users) if zlib.crc32(str(u).encode()) % world == rank]
    sub = TrainData([data.days_per_user[u] for u in rows], data.coords,
                    [data.user_ids[u] for u in rows])
    return sub, torch.tensor(rows), data.n_users


def bench(spark, name: str, data: TrainData, world: int, rounds: int, out: Path,
          local_mode: bool = True) -> dict:
    from pyspark.ml.torch.distributor import TorchDistributor

    cfg = {"rounds": rounds, "episodes_per_round": 64, "noise": 1.0, "seed": 1,
           "target_epsilon": None}
    mode = "local" if local_mode else "barrier"
    job = RankJob(cfg, 4, functools.partial(shard_of, data), str(out / f"{name}-{world}-{mode}"))
    t0 = time.perf_counter()
    res = TorchDistributor(num_processes=world, local_mode=local_mode,
                           use_gpu=False).run(run_rank, job)
    wall = time.perf_counter() - t0
    s = check_summary(res, world)
    slow = max(s["ranks"], key=lambda r: r["setup_s"] + r["rounds_s"])
    return {"data": name, "users": data.n_users, "processes": world, "mode": mode,
            "round_s": slow["rounds_s"] / rounds, "setup_s": slow["setup_s"],
            "launch_s": wall - slow["setup_s"] - slow["rounds_s"], "wall_s": wall}


ROUND = re.compile(r"round (\d+)/(\d+) released reward \S+ policy \S+ epsilon (\S+) \((\S+)s\)")
LAUNCH = re.compile(r"train launch: (.*)")


def stage_seconds(text: str) -> float | None:
    """The run's staging seconds from its figures.json (the CLI's first `wrote` line names the
    run folder; its summary line does not carry stage_s)."""
    import json

    run_dir = re.search(r"^\s*wrote (\S+)$", text, re.MULTILINE)
    figures = Path(run_dir[1]) / "figures.json" if run_dir else None
    if figures is None or not figures.is_file():
        return None
    return json.loads(figures.read_text()).get("stage_s")


def pipeline(config: str, root: str, sets: list[str]) -> None:
    """One `trajpriv train` run on a prepared root; prints stage, launch, round and total."""
    import subprocess
    import threading

    cmd = [sys.executable, "-m", "jobs.cli", "train", "--config", config,
           "--set", f"storage.root={root}", *[a for kv in sets for a in ("--set", kv)]]
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    total = time.perf_counter() - t0
    done.set()
    text = proc.stdout + proc.stderr
    if proc.returncode:
        print(text[-4000:])
        raise SystemExit(f"train failed (exit {proc.returncode})")
    rounds = [(int(m[1]), float(m[3]), float(m[4])) for m in ROUND.finditer(text)]
    phases = LAUNCH.search(text)
    stage = stage_seconds(text)
    print(f"train {config} root={root} {' '.join(sets)}")
    print(f"launch phases (s after TorchDistributor start): {phases[1] if phases else '?'}")
    ready = re.search(r"ready ([\d.]+)s", phases[1]) if phases else None
    print(f"stage_s={stage if stage is not None else '?'} "
          f"launch_s={ready[1] if ready else '?'} "
          f"round_s={sum(r[2] for r in rounds) / max(1, len(rounds)):.2f} "
          f"rounds={len(rounds)} epsilon={rounds[-1][1] if rounds else '?'} total_s={total:.1f}")
    write_result("train_spark_pipeline", f"`trajpriv train`, {Path(config).name} {' '.join(sets)}",
                 ["stage s", "launch s", "round s", "rounds", "epsilon", "total s"],
                 [[stage if stage is not None else "?", ready[1] if ready else "?",
                   f"{sum(r[2] for r in rounds) / max(1, len(rounds)):.2f}", len(rounds),
                   rounds[-1][1] if rounds else "?", f"{total:.1f}"]])
    print(f"load average during the run: mean {sum(loads) / max(1, len(loads)):.2f}, "
          f"max {max(loads, default=0):.2f} ({len(loads)} samples), cpus {os.cpu_count()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeline", metavar="CONFIG", help="time one real train run (see doc)")
    ap.add_argument("--root", help="storage.root of --pipeline (prepared by datagen + ingest)")
    ap.add_argument("--set", action="append", default=[], help="extra override of --pipeline")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--telecom-users", type=int, default=9481)
    ap.add_argument("--skip-telecom", action="store_true")
    ap.add_argument("--modes", default="local",
                    help="comma list of local (torchrun on the driver) and barrier (Spark tasks)")
    args = ap.parse_args()
    if args.pipeline:
        if not args.root:
            ap.error("--pipeline needs --root")
        pipeline(args.pipeline, args.root, args.set)
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
             .getOrCreate())
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - {"local", "barrier"}:
        ap.error(f"--modes: unknown {sorted(set(modes) - {'local', 'barrier'})}")
    out = Path("/tmp/bench_train_spark")
    sets = []
    if GEOLIFE.is_dir():
        sets.append(("geolife", load_geolife(GEOLIFE)[0]))
    else:
        print(f"geolife skipped: {GEOLIFE} missing")
    if not args.skip_telecom:
        slice_ = home_work_population(args.telecom_users, 3233, 4, box=SHANGHAI_BOX)
        sets.append(("telecom", slice_))
    print(f"load average at start: {os.getloadavg()}, cpus: {os.cpu_count()}")
    table = []
    for name, data in sets:
        for mode, world in [(m, w) for m in modes for w in (1, 2)]:
            r = bench(spark, name, data, world, args.rounds, out, local_mode=mode == "local")
            print(f"{r['data']:8s} users={r['users']:5d} processes={r['processes']} "
                  f"mode={r['mode']:7s} round_s={r['round_s']:.2f} setup_s={r['setup_s']:.2f} "
                  f"launch_s={r['launch_s']:.2f} wall_s={r['wall_s']:.2f}", flush=True)
            table.append([r["data"], r["users"], r["processes"], r["mode"],
                          *(f"{r[k]:.2f}" for k in ("round_s", "setup_s", "launch_s", "wall_s"))])
    write_result("train_spark", f"Distributed training, {args.rounds} rounds",
                 ["data", "users", "processes", "mode", "round s", "setup s", "launch s",
                  "wall s"], table)
    print(f"load average at end: {os.getloadavg()}")
    spark.stop()


if __name__ == "__main__":
    main()

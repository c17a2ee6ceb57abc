"""`trajpriv train`: PateGAIL / PateGAIL++ over sharded users with TorchDistributor.

Steps (plan, then spend):
1. driver: build and validate the model config (ConfigError before any Spark work);
2. Spark: write the train/held-out split (`trajpriv_raw.slot_days_split`, see jobs/train_data.py)
   and stage the training days as Parquet partitioned by rank (hash of the user id);
3. TorchDistributor(num_processes=W, local_mode=train.local_mode, use_gpu=False) runs
   `models.distributed.run_rank` on every rank: gloo process group, each rank reads only its
   shard, critics stay on their rank, pairs all-gathered, moments all-reduced, rank 0 draws the
   noise and broadcasts, DDP policy; rank 0 writes the artefacts;
4. driver: the summary must be complete (`check_summary`: ok flag, every rank, same rounds,
   artefacts on disk), else the job fails with the failing rank's message; staging removed.

Why the summary check: with local_mode=True TorchDistributor returns whichever rank wrote its
output last and swallows a failing rank (measured, DESIGN.md section 6), so every rank returns the
same summary and the driver checks it. Hard-killed ranks leave `rank<r>.error` files, read here.

Artefacts: `<storage.root>/runs/<run_id>/` policy.pt, accountant.json, history.json,
train_config.json (no seed), checkpoint/ (sharded, resumable with `--resume RUN_ID`).
Figures (into trajpriv_pub.runs): epsilon, delta, rounds, rewards, timings.
The training seed: `train.options.seed` if given, else derived by HMAC from the raw zone's run key
and the config seed (so published figures never let anyone recompute the noise).
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import hmac
import logging
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `spark-submit jobs/train.py`: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.config import Config
from models.config import TrainConfig
from udfs.errors import ConfigError

log = logging.getLogger("trajpriv.train")

SCHEMES = {"pategail": "pategail", "pategail++": "pategail++", "ldp": "ldp", "ldp++": "ldp++"}


def training_seed(cfg: Config) -> int:
    if "seed" in cfg.train.options:
        return int(cfg.train.options["seed"])
    from jobs.keys import run_key

    key = run_key(cfg.storage.secrets)
    msg = f"train\x1f{cfg.dataset}\x1f{cfg.seed}".encode()
    return int.from_bytes(hmac.new(key, msg, hashlib.sha256).digest()[:8], "big") >> 1


def model_config(cfg: Config, seed: int | None = None) -> TrainConfig:
    """models' TrainConfig from the `train` section (options may set any model field)."""
    tc = cfg.train
    fields = {"rounds": tc.rounds, "scheme": SCHEMES[tc.method], "noise": tc.noise,
              "target_epsilon": tc.target_epsilon, "delta": tc.delta,
              **{k: v for k, v in tc.options.items() if k != "seed"}}
    fields["seed"] = 0 if seed is None else seed
    try:
        mc = TrainConfig.from_dict(fields)
    except ConfigError as exc:
        raise ConfigError(f"train.options: {exc}") from None
    if mc.episodes_per_round % tc.blocks or tc.blocks % tc.num_processes:
        raise ConfigError(f"train.blocks={tc.blocks} must divide episodes_per_round "
                          f"({mc.episodes_per_round}) and be a multiple of train.num_processes "
                          f"({tc.num_processes})")
    return mc


def _check_devices(cfg: Config) -> None:
    if cfg.train.use_gpu:
        raise ConfigError("train.use_gpu=true: the models run on CPU (gloo) only for now; set "
                          "train.use_gpu=false")


def launch(spark, cfg: Config, job, world: int) -> Any:
    """Run `models.distributed.run_rank(job)` on `world` ranks; returns TorchDistributor's value."""
    from pyspark.ml.torch.distributor import TorchDistributor

    from models.distributed import run_rank

    root = str(Path(__file__).resolve().parents[1])  # ranks are fresh interpreters
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *[p for p in paths if p]])
    distributor = TorchDistributor(num_processes=world, local_mode=cfg.train.local_mode,
                                   use_gpu=False)
    with warnings.catch_warnings():
        # pyspark leaves the torchrun process's stdout pipe unclosed: a ResourceWarning when it
        # is collected. Known and harmless; ignored here only, with the collection done inside.
        warnings.filterwarnings("ignore", category=ResourceWarning)
        try:
            return distributor.run(run_rank, job)
        finally:
            gc.collect()


def _rank_errors(out_dir: Path) -> str:
    return "; ".join(p.read_text() for p in sorted(out_dir.glob("rank*.error")))


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    from jobs.train_data import load_locations, load_shard, stage_shards, write_split
    from models.distributed import RankFailedError, RankJob, check_summary

    _check_devices(cfg)
    world = cfg.train.num_processes
    mc = model_config(cfg, training_seed(cfg))
    resume_from = getattr(ctx.args, "resume", None)
    out_dir = cfg.storage.runs_dir / ctx.run_id
    ckpt_dir = cfg.storage.runs_dir / (resume_from or ctx.run_id) / "checkpoint"
    if resume_from and not (ckpt_dir / "LATEST.json").exists():
        raise ConfigError(f"--resume {resume_from}: no checkpoint at {ckpt_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(out_dir, 0o700)
    staging = cfg.storage.root.resolve() / "staging" / f"train-{ctx.run_id}"
    t0 = time.perf_counter()
    try:
        split = write_split(spark, cfg)
        meta = stage_shards(spark, cfg, staging, world)
        loc_ids, coords = load_locations(spark, cfg.dataset)
        t_stage = time.perf_counter() - t0
        job = RankJob(mc.to_dict(), cfg.train.blocks,
                      functools.partial(load_shard, str(staging), loc_ids, coords),
                      str(out_dir), str(ckpt_dir), resume=bool(resume_from),
                      timeout_s=cfg.train.timeout_s,
                      meta={"run_id": ctx.run_id, "dataset": cfg.dataset,
                            "loc_ids": loc_ids.tolist(), "coords": coords.tolist(),
                            "resumed_from": resume_from})
        log.info("train %s: %d users on %d rank(s) %s, %d rounds", cfg.dataset, meta["n_users"],
                 world, meta["users_per_rank"], mc.rounds)
        t1 = time.perf_counter()
        try:
            result = launch(spark, cfg, job, world)
        except Exception as exc:
            detail = _rank_errors(out_dir)
            if detail:
                raise RankFailedError(f"training failed: {detail}") from exc
            raise
        t_launch = time.perf_counter() - t1
        summary = check_summary(result, world)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return figures_of(summary, split, meta, t_stage, t_launch, out_dir)


def figures_of(summary: dict, split: dict, meta: dict, t_stage: float, t_launch: float,
               out_dir: Path) -> dict[str, Any]:
    hist = summary["history"]
    acct = summary["accountant"]
    busy = max(r["setup_s"] + r["rounds_s"] for r in summary["ranks"])
    ran = max(1, max(r["rounds_run"] for r in summary["ranks"]))
    return {
        "epsilon": acct["epsilon"], "delta": acct["delta"],
        "basic_epsilon": acct["basic_epsilon"], "accountant": acct["method"],
        "target_epsilon": acct["target_epsilon"],
        "rounds_done": summary["rounds_done"], "stopped_reason": summary["stopped_reason"],
        "resumed_at_round": summary["resumed_at"],
        "num_processes": summary["world"], "blocks": summary["blocks"],
        "users": meta["n_users"], "users_per_rank": meta["users_per_rank"], "split": split,
        "reward_mean": [h["reward_mean"] for h in hist],
        "reward_raw_mean": [h["reward_raw_mean"] for h in hist],
        "epsilon_by_round": [h["epsilon"] for h in hist],
        "stage_s": round(t_stage, 3), "train_launch_s": round(t_launch, 3),
        "seconds_per_round": round(max(r["rounds_s"] for r in summary["ranks"]) / ran, 3),
        "launch_overhead_s": round(t_launch - busy, 3),
        "artefacts": str(out_dir),
    }


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume", metavar="RUN_ID", default=None,
                        help="continue a killed train run from its last checkpoint")


if __name__ == "__main__":  # spark-submit jobs/train.py --config ...
    from jobs import train as _stage
    from jobs.stage import main

    sys.exit(main("train", _stage.run, add_args=_stage.add_args))

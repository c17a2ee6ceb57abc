"""`trajpriv train`: PateGAIL / PateGAIL++ over sharded users with TorchDistributor.

Steps (plan, then spend):
1. driver: build and validate the model config and the devices (ConfigError before any Spark
   work; `check_devices`, `check_spark_gpus`);
2. Spark: write the train/held-out split (`trajpriv_raw.slot_days_split`, see jobs/spark/split.py)
   and stage the training days as Parquet partitioned by rank (hash of the user id);
3. TorchDistributor(num_processes=W, local_mode=train.local_mode, use_gpu=train.use_gpu) runs
   `models.distributed.run_rank` on every rank: gloo process group (NCCL for device tensors with
   use_gpu, each rank on cuda:LOCAL_RANK), each rank reads only its shard, critics stay on their
   rank, pairs all-gathered, moments all-reduced, rank 0 draws the noise and broadcasts, DDP
   policy; rank 0 writes the artefacts;
4. driver: the summary must be complete (`check_summary`: ok flag, every rank, same rounds,
   artefacts on disk), else the job fails with the failing rank's message; staging removed.

Why the summary check: with local_mode=True TorchDistributor returns whichever rank wrote its
output last and swallows a failing rank (docs/architecture.md section 6), so every rank returns
the same summary and the driver checks it. A failing rank leaves `rank<r>.error`, a rank stopped
after another `rank<r>.stopped`, a hard-killed one nothing: `rank_errors` reads them.

Where the ranks run. train.local_mode=true (default): torchrun on the driver host. false: one
barrier Spark task per rank (the ranks are children of executor Python workers; the value
returned is rank 0's); it needs num_processes free task slots (on local[N], N >= num_processes)
and fails at once otherwise (`spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures=1`,
jobs/spark/session.py).
GPUs (train.use_gpu=true). The driver refuses to start unless the ranks can get one GPU each:
where they run on this host (local_mode or a local master) torch must see >= num_processes CUDA
devices, and Spark must list them (TorchDistributor takes them from the Spark resources and would
otherwise silently lower num_processes, or raise a bare RuntimeError).

Artefacts: `<storage.root>/runs/<run_id>/` policy.pt, accountant.json, history.json,
train_config.json (no seed), critics/rank<r>.pt (each rank's users' critics keyed by user, merged
by `models.critic_store.load_user_critics` for the attacks), checkpoint/ (sharded, resumable with
`--resume RUN_ID`).
Figures (into trajpriv_pub.runs): only what `PUBLIC_FIGURES` lists, each a DP release, a
post-processing of one, a config value or a timing: epsilon (labelled `privacy_model` local or
central), rounds, released rewards, timings. Figures computed from private data without noise
(the split's day and user counts, users per rank, exact critic rewards and losses, the pilot's
correlation) and the set of trained user ids stay in the run folder (mode 0700):
`trusted.json`.
The training seed: `train.seed` if given, else derived by HMAC from the raw zone's run key
and the config seed (so published figures never let anyone recompute the noise).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import logging
import math
import os
import re
import shutil
import time
import warnings
from pathlib import Path
from typing import Any

from jobs.config import Config
from jobs.train.figures import COVERS, PUBLIC_FIGURES  # noqa: F401  (the harness reads them here)
from models.config import TrainConfig
from udfs.derive import seed63
from udfs.errors import ConfigError

log = logging.getLogger("trajpriv.train")

def training_seed(cfg: Config) -> int:
    if cfg.train.seed is not None:
        return cfg.train.seed
    from jobs.keys import run_key

    key = run_key(cfg.storage.secrets)
    return seed63(key, "train", cfg.dataset, cfg.seed)


def model_config(cfg: Config, seed: int | None = None) -> TrainConfig:
    """The core's typed TrainConfig of the `train` section (validated when the config loaded)."""
    return cfg.train.model_config_of(0 if seed is None else seed)


def ranks_on_this_host(cfg: Config) -> bool:
    return cfg.train.local_mode or cfg.spark.master.strip().startswith("local")


def local_task_slots(cfg: Config) -> int | None:
    """Task slots of a local master (local, local[N], local[*], local[N,F]) over spark.task.cpus;
    None for a cluster master (Spark itself refuses a barrier stage without enough slots)."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", cfg.spark.master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        cores = 1
    elif m.group(1) == "*":
        cores = os.cpu_count() or 1
    else:
        cores = int(m.group(1))
    return cores // max(1, int(cfg.spark.conf.get("spark.task.cpus", 1)))


def check_slots(cfg: Config) -> None:
    """train.local_mode=false runs one barrier task per rank, all at once."""
    slots = local_task_slots(cfg)
    w = cfg.train.num_processes
    if not cfg.train.local_mode and slots is not None and slots < w:
        raise ConfigError(
            f"train.local_mode=false runs each of the train.num_processes={w} ranks as a Spark "
            f"barrier task, all at once, but spark.master={cfg.spark.master} has {slots} task "
            f"slot(s): set train.num_processes<={slots}, give the master more cores "
            f"(spark.master=local[{w}]), or set train.local_mode=true")


def check_devices(cfg: Config) -> None:
    """train.use_gpu preflight on the driver, before the session does any work: one CUDA device
    per rank where the ranks run on this host. (Ranks on remote executors check their own with
    `models.distributed.select_placement`.)"""
    tc = cfg.train
    if not tc.use_gpu or not ranks_on_this_host(cfg):
        return
    import torch

    where = ("train.local_mode=true" if tc.local_mode
             else f"spark.master={cfg.spark.master} runs the executors here")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"train.use_gpu=true but this host has no usable CUDA device (torch "
            f"{torch.__version__}, CUDA build: {torch.version.cuda or 'none'}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}) and the "
            f"ranks would run here ({where}): set train.use_gpu=false to train on CPU (gloo), or "
            "run on a host whose torch sees a GPU")
    count = torch.cuda.device_count()
    if count < tc.num_processes:
        raise ConfigError(
            f"train.use_gpu=true with train.num_processes={tc.num_processes}: only {count} CUDA "
            f"device(s) visible on this host and each rank needs its own; set "
            f"train.num_processes<={count} (and train.blocks to a multiple of it)")


def check_spark_gpus(spark, cfg: Config) -> None:
    """TorchDistributor takes the ranks' GPUs from Spark's resources: check they are declared
    (a static setting, so it must be in the config's `spark.conf` when the session starts)."""
    tc = cfg.train
    if not tc.use_gpu:
        return
    w = tc.num_processes
    if ranks_on_this_host(cfg):
        gpus = spark.sparkContext.resources.get("gpu")
        have = len(gpus.addresses) if gpus is not None else 0
        if have < w:
            raise ConfigError(
                f"train.use_gpu=true with train.num_processes={w}: the Spark driver declares "
                f"{have} GPU(s); TorchDistributor hands the ranks only declared GPUs. Set "
                f"spark.conf.spark.driver.resource.gpu.amount={w} and "
                "spark.conf.spark.driver.resource.gpu.discoveryScript=<a script printing "
                '{"name": "gpu", "addresses": ["0", ...]}> (Spark ships '
                "examples/src/main/scripts/getGpusResources.sh)")
    if not tc.local_mode:
        amount = spark.conf.get("spark.task.resource.gpu.amount", "0")
        if float(amount or 0) < 1:
            raise ConfigError(
                "train.use_gpu=true with train.local_mode=false: every rank is a Spark task and "
                f"needs a GPU, but spark.task.resource.gpu.amount={amount}; set "
                "spark.conf.spark.task.resource.gpu.amount=1 and "
                "spark.conf.spark.executor.resource.gpu.amount=<GPUs per executor> (with its "
                "discoveryScript)")


def launch(spark, cfg: Config, job, world: int) -> Any:
    """Run `models.distributed.run_rank(job)` on `world` ranks; returns TorchDistributor's value."""
    from pyspark.ml.torch.distributor import TorchDistributor

    from jobs.train.log_server import bound_log_server
    from models.distributed import run_rank

    distributor = TorchDistributor(num_processes=world, local_mode=cfg.train.local_mode,
                                   use_gpu=cfg.train.use_gpu)
    if distributor.num_processes != world:  # TorchDistributor lowers it to the GPUs it sees
        raise ConfigError(f"TorchDistributor would run {distributor.num_processes} rank(s), not "
                          f"train.num_processes={world}: declare one GPU per rank to Spark")
    with (warnings.catch_warnings(), rank_import_path(),
          rank_threads(world if cfg.train.local_mode else 1), bound_log_server()):
        # pyspark leaves the torchrun process's stdout pipe unclosed: a ResourceWarning when it
        # is collected. Known and harmless; ignored here only, with the collection done inside.
        warnings.filterwarnings("ignore", category=ResourceWarning)
        try:
            return distributor.run(run_rank, job)
        finally:
            gc.collect()


@contextlib.contextmanager
def rank_import_path():
    """The project's root first on PYTHONPATH for the launched ranks (fresh interpreters that
    import jobs and models), for the launch only: the driver's environment is restored after."""
    root = str(Path(__file__).resolve().parents[2])
    before = os.environ.get("PYTHONPATH")
    paths = [p for p in (before or "").split(os.pathsep) if p]
    if root in paths:
        yield
        return
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


@contextlib.contextmanager
def rank_threads(local_ranks: int):
    """`OMP_NUM_THREADS=1` for the launched ranks when several share this host, set by us:
    torchrun sets the same value itself when it is unset, with a multi-line banner that
    pyspark copies to stdout. Same threads, no banner; a value the user exported stands, and
    the driver's environment is restored after the launch."""
    if local_ranks < 2 or "OMP_NUM_THREADS" in os.environ:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


def remove_stale_staging(folder: Path) -> list[str]:
    """Remove the training shards a killed run left in `folder` (personal data). Any found at
    the start of a run are stale: the Derby metastore admits one process per storage.root
    (jobs/spark/metastore_lock.py), so no other train of this root is running."""
    stale = sorted(folder.glob("train-*"))
    for old in stale:
        log.warning("removing %s, left by a killed train run", old)
        shutil.rmtree(old, ignore_errors=True)
    return [p.name for p in stale]


def run_folders(cfg: Config, out_dir: Path, run_id: str) -> Path:
    """The run folder (mode 0700: artefacts and trusted figures) made, the shards a killed run
    left removed; returns this run's staging folder for the training shards."""
    out_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(out_dir, 0o700)
    staging = cfg.storage.root.resolve() / "staging" / f"train-{run_id}"
    remove_stale_staging(staging.parent)
    return staging


def rank_errors(out_dir: Path, world: int) -> str:
    """The ranks' error files, led by the ranks that left none (killed hard: their peers then
    fail on a closed connection or are stopped by torchrun, and that second-hand error must not
    read as the cause). `rank<r>.stopped` (a rank stopped by a peer's failure or by torchrun's
    SIGTERM, models.distributed) accounts for its rank and comes last."""
    errors = {p.name: p.read_text() for p in sorted(out_dir.glob("rank*.error"))}
    stopped = {p.name: p.read_text() for p in sorted(out_dir.glob("rank*.stopped"))}
    found = {**errors, **stopped}
    if not found:
        return ""
    silent = [r for r in range(world)
              if f"rank{r}.error" not in errors and f"rank{r}.stopped" not in stopped]
    lead = ([f"rank(s) {silent} died without a message (killed by a signal, out of memory or "
             "exited hard; the torchrun lines of the log give the exit status)"] if silent else [])
    return "; ".join([*lead, *errors.values(), *stopped.values()])


def run(spark, cfg: Config, ctx) -> dict[str, Any]:
    """`train.method`'s Spark training (its registry entry's `trainer`, jobs.methods)."""
    from jobs.methods import get, trainer_of

    return trainer_of(get(cfg.train.method))(spark, cfg, ctx)


def run_learned(spark, cfg: Config, ctx) -> dict[str, Any]:
    """A learned method (jobs/methods/learned.py): rounds on TorchDistributor ranks."""
    from jobs.spark.split import load_locations, write_split
    from jobs.train.data import load_shard, stage_shards
    from models.distributed import RankFailedError, RankJob, check_summary

    check_slots(cfg)
    check_devices(cfg)
    check_spark_gpus(spark, cfg)
    world = cfg.train.num_processes
    mc = model_config(cfg, training_seed(cfg))
    resume_from = getattr(ctx.args, "resume", None)
    out_dir = cfg.storage.runs_dir / ctx.run_id
    ckpt_dir = cfg.storage.runs_dir / (resume_from or ctx.run_id) / "checkpoint"
    if resume_from and not (ckpt_dir / "LATEST.json").exists():
        raise ConfigError(f"--resume {resume_from}: no checkpoint at {ckpt_dir}")
    staging = run_folders(cfg, out_dir, ctx.run_id)
    t0 = time.perf_counter()
    try:
        split = write_split(spark, cfg)
        meta = stage_shards(spark, cfg, staging, world)
        loc_ids, coords = load_locations(spark, cfg.dataset)
        mc, plan_note = plan_rounds(cfg, mc, meta["n_users"], coords)
        t_stage = time.perf_counter() - t0
        job = RankJob(mc.to_dict(), cfg.train.blocks,
                      functools.partial(load_shard, str(staging), loc_ids, coords),
                      str(out_dir), str(ckpt_dir), resume=bool(resume_from),
                      timeout_s=cfg.train.timeout_s, use_gpu=cfg.train.use_gpu,
                      meta={"run_id": ctx.run_id, "dataset": cfg.dataset,
                            "loc_ids": loc_ids.tolist(), "coords": coords.tolist(),
                            "resumed_from": resume_from})
        log.info("train %s: %d users on %d rank(s), %d rounds of %s (%s privacy)", cfg.dataset,
                 meta["n_users"], world, mc.rounds, mc.scheme, mc.privacy_model)
        # Charge the ledger before any release: the target epsilon is an upper bound of what
        # the run can spend (it stops before exceeding it), so a crash never under-counts.
        planned = planned_charge(cfg, ctx.run_id, resume_from, ledger_model(mc))
        charge_training(spark, meta["user_ids"], planned)
        t1, t1_wall = time.perf_counter(), time.time()
        try:  # no summary, or a failed one: the ranks' files name the cause (rank_errors)
            result = launch(spark, cfg, job, world)
            t_launch = time.perf_counter() - t1
            summary = check_summary(result, world)
            log.info("train launch: %s", ", ".join(
                f"{k} {v:.1f}s" for k, v in launch_phases(summary, t1_wall).items()))
        except Exception as exc:
            detail = rank_errors(out_dir, world)
            if detail:
                raise RankFailedError(f"training failed: {detail}") from exc
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_trusted(out_dir, summary, split, meta)
    figures = figures_of(summary, mc, meta, t_stage, t_launch, out_dir)
    figures["warnings"] += plan_note
    charge_training(spark, meta["user_ids"], spent_charge(planned, figures["epsilon"]))
    return figures


def affordable_rounds(mc: TrainConfig, n_users: int, coords) -> int:
    """The most rounds (at most `mc.rounds`) whose planned epsilon stays within the target."""
    from models.budget import planned_epsilon

    lo, hi = 0, mc.rounds  # planned epsilon grows with the rounds: bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if planned_epsilon(mc, n_users, coords, mid) <= mc.target_epsilon:
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_rounds(cfg: Config, mc: TrainConfig, n_users: int, coords
                ) -> tuple[TrainConfig, list[str]]:
    """The run's plan for the users it will train, said before it starts. With
    `train.noise_for_target` the noise is the smallest at which every planned round fits the
    target (`models.budget.noise_for_epsilon`; a function of the config and the number of
    users, both public); otherwise a plan that runs out of budget early is said in the log and
    in the run's warnings, with the noise that would fit. Returns (config, warnings)."""

    from models.budget import noise_for_epsilon

    if mc.target_epsilon is None:
        return mc, []
    try:
        fitting = noise_for_epsilon(mc, n_users, coords, mc.rounds, mc.target_epsilon)
    except ValueError as exc:
        raise ConfigError(f"train.target_epsilon={mc.target_epsilon:g}: {exc}; raise it or "
                          "lower train.start_hist_epsilon") from None
    if cfg.train.noise_for_target:
        log.info("train plan: noise %.4g makes all %d rounds fit epsilon %g for %d users",
                 fitting, mc.rounds, mc.target_epsilon, n_users)
        return dataclasses.replace(mc, noise=fitting), []
    rounds = affordable_rounds(mc, n_users, coords)
    if rounds >= mc.rounds:
        log.info("train plan: all %d rounds fit epsilon %g for %d users", mc.rounds,
                 mc.target_epsilon, n_users)
        return mc, []
    note = (f"the target epsilon {mc.target_epsilon:g} pays for {rounds} of the "
            f"{mc.rounds} planned rounds at noise {mc.noise:g} for {n_users} users: the run "
            f"stops after round {rounds}; noise {fitting:.4g} (or train.noise_for_target: "
            "true) fits them all")
    log.warning("train plan: %s", note)
    return mc, [note]


def run_markov(spark, cfg: Config, ctx) -> dict[str, Any]:
    """The DP Markov method (jobs/methods/markov.py, fitted by jobs/train/markov.py): the same
    split, staging and ledger charges as a learned run; one release instead of rounds."""
    from jobs.spark.split import write_split
    from jobs.train import markov
    from jobs.train.data import stage_shards

    if getattr(ctx.args, "resume", None):
        raise ConfigError("--resume continues a learned run's rounds; a markov run is one "
                          "release: run it again instead")
    out_dir = cfg.storage.runs_dir / ctx.run_id
    staging = run_folders(cfg, out_dir, ctx.run_id)
    t0 = time.perf_counter()
    try:
        split = write_split(spark, cfg)
        meta = stage_shards(spark, cfg, staging, cfg.train.num_processes)
        t_stage = time.perf_counter() - t0
        log.info("train %s: %d users, one DP Markov release (central privacy)", cfg.dataset,
                 meta["n_users"])
        planned = planned_charge(cfg, ctx.run_id, None, f"{cfg.train.method}:central")
        charge_training(spark, meta["user_ids"], planned)
        model, info = markov.fit(spark, cfg, staging, training_seed(cfg))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    markov.save(model, out_dir, info["loc_ids"], info["coords"])
    write_trusted(out_dir, {"history": []}, split, meta)
    figures = markov.figures_of(cfg, model, meta["n_users"],
                                {"stage_s": t_stage, "fit_s": info["stats_s"] + info["release_s"]},
                                out_dir)
    charge_training(spark, meta["user_ids"], spent_charge(planned, figures["epsilon"]))
    return figures


def launch_phases(summary: dict, start: float) -> dict[str, float]:
    """Seconds from the driver's launch (`start`, wall clock) to each phase's end on the slowest
    rank (models.distributed stamps): ranks entered (torchrun, interpreters, imports,
    unpickling), process group up, shard loaded, model built (expert features, critics),
    ready for round 1 (start distribution, critic pretraining). Timings only."""
    names = ("entered", "group", "loaded", "built", "ready")
    stamps = [r.get("stamps", {}) for r in summary["ranks"]]
    return {k: max(s[k] for s in stamps) - start for k in names if all(k in s for s in stamps)}


def planned_charge(cfg: Config, run_id: str, resume_from: str | None, model: str):
    """The run's `planned` ledger charge: the target epsilon, an upper bound of what the run
    can spend; its `spent` charge is this one with the accounted epsilon
    (`spent_charge`). A resumed run continues the killed run's accountant, so both
    share one release id (the first run's)."""
    from jobs.spark.ledger import PLANNED, TrainingCharge

    return TrainingCharge(cfg.dataset, run_id, model, cfg.train.target_epsilon, cfg.train.delta,
                          PLANNED, release_id=resume_from or run_id)


def spent_charge(planned, epsilon: float):
    """The run's `spent` charge: its `planned` one at the accounted epsilon."""
    from jobs.spark.ledger import SPENT

    return dataclasses.replace(planned, state=SPENT, epsilon=float(epsilon))


def charge_training(spark, user_ids, charge) -> None:
    """One ledger row of `charge` per trained user (jobs.spark.ledger): `planned` before the
    ranks start, `spent` after; a user's training total takes the `spent` row of a run when
    there is one, else its `planned` upper bound."""
    from jobs.spark.ledger import record_training

    users = spark.createDataFrame([(str(u),) for u in user_ids], "user_id string")
    record_training(users, charge)


def ledger_model(mc: TrainConfig) -> str:
    """The ledger's `mechanism` of a training charge: method and privacy model."""
    return f"{mc.scheme}:{mc.privacy_model}"


def epsilon_covers(mc: TrainConfig) -> str:
    """What the published epsilon covers, in words (the neighbouring relation included)."""
    if mc.privacy_model == "central" and mc.sampling == "poisson":
        return COVERS["central"].replace(
            "against replacing one user's whole data",
            "against adding or removing one user's whole data (Poisson-sampled rounds, "
            f"rate {mc.participation:g})")
    return COVERS[mc.privacy_model]


def quality_warnings(mc: TrainConfig) -> list[str]:
    """Plain-language warnings that follow from the settings alone (public)."""
    out = []
    gaussian = mc.mechanism == "gaussian"
    sd = mc.noise if gaussian else math.sqrt(2) * mc.noise  # `noise` is sigma or lambda
    if mc.privacy_model == "central" and sd >= 0.5:
        out.append(f"released rewards are mostly noise: {'Gaussian' if gaussian else 'Laplace'} "
                   f"noise sd {sd:.3g} per generated pair on critic rewards in [0, 1]; expect "
                   "a policy near its initial one")
    return out


def figures_of(summary: dict, mc: TrainConfig, meta: dict, t_stage: float, t_launch: float,
               out_dir: Path) -> dict[str, Any]:
    hist = summary["history"]
    acct = summary["accountant"]
    busy = max(r["setup_s"] + r["rounds_s"] for r in summary["ranks"])
    ran = max(1, max(r["rounds_run"] for r in summary["ranks"]))
    local = mc.privacy_model == "local"
    figures = {
        "epsilon": acct["epsilon"], "delta": acct["delta"],
        "basic_epsilon": acct["basic_epsilon"], "accountant": acct["method"],
        "target_epsilon": acct["target_epsilon"],
        "privacy_model": mc.privacy_model, "epsilon_covers": epsilon_covers(mc),
        "local_epsilon_per_round": ([h["epsilon_batch"] for h in hist] if local else None),
        "method": mc.scheme, "critic": mc.critic_kind, "noise": mc.noise, "pilot": mc.pilot,
        "beta": mc.beta, "mechanism": mc.mechanism, "sampling": mc.sampling,
        "rounds_done": summary["rounds_done"], "stopped_reason": summary["stopped_reason"],
        "rounds_planned": mc.rounds, "pairs_per_round": mc.episodes_per_round * 47,  # 47 a day
        "destination": mc.destination,
        "resumed_at_round": summary["resumed_at"],
        "num_processes": summary["world"], "blocks": summary["blocks"],
        "users": meta["n_users"],
        "reward_mean": [h["reward_mean"] for h in hist],
        "epsilon_by_round": [h["epsilon"] for h in hist],
        "warnings": quality_warnings(mc),
        "stage_s": round(t_stage, 3), "train_launch_s": round(t_launch, 3),
        "seconds_per_round": round(max(r["rounds_s"] for r in summary["ranks"]) / ran, 3),
        "launch_overhead_s": round(t_launch - busy, 3),
        "artefacts": str(out_dir),
    }
    unlisted = set(figures) - set(PUBLIC_FIGURES)
    if unlisted:  # a new figure must be classified before it can be published
        raise AssertionError(f"train figures {sorted(unlisted)} are not in PUBLIC_FIGURES")
    return figures


def write_trusted(out_dir: Path, summary: dict, split: dict, meta: dict) -> Path:
    """`trusted.json` in the run folder (mode 0700): the figures that are not DP releases and
    the ids of the users whose data trained the run (for the privacy ledger)."""
    from models.distributed import write_json

    path = out_dir / "trusted.json"
    write_json(path, {
        "split": split, "users_per_rank": meta["users_per_rank"],
        "trained_user_ids": meta["user_ids"],
        "rounds": [{"round": h["round"], **h.get("trusted", {})} for h in summary["history"]],
    })
    os.chmod(path, 0o600)
    return path


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--resume", metavar="RUN_ID", default=None,
                        help="continue a killed train run from its last checkpoint")


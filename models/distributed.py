"""The training loop on W ranks over torch.distributed (gloo on CPU). No pyspark here.

`run_rank(job)` is what every rank runs (the Spark job hands it to TorchDistributor; tests spawn
it directly). Each rank loads only its own users (`job.load(rank, world)`), keeps their critics,
and runs `models.train._Run` with `TorchComm`: the generated pairs are all-gathered, critic
moments all-reduced, rank 0 draws the noise and broadcasts the release, the policy steps with DDP.

Failure protocol. Every collective of `TorchComm` is preceded by a guard (an all-reduce of a
failure flag). A rank that raises calls `fail(message)`, whose all-reduce meets the other ranks'
next guard; then all ranks all-gather the messages and return the same failure summary
`{"ok": False, "errors": {rank: message}}`. Successful ranks return the same summary too (rank 0's
figures, broadcast, plus every rank's report), so whichever rank's return value TorchDistributor
keeps, the caller sees the truth, and checks `ok` and completeness. A rank also writes its error
to `<out_dir>/rank<r>.error`, and a rank that stops because of another (a peer's failure flag,
torchrun's SIGTERM once a rank has died) writes `rank<r>.stopped`, so the driver names the rank
that died without a message (killed: no file) whichever of a dead peer's closed connection and
torchrun's SIGTERM reaches the others first. A collective that never returns (a peer stuck)
ends at the process-group timeout.
Teardown: DDP processes sometimes abort at exit unless the model and optimiser are deleted and
`gc.collect()` runs before `destroy_process_group()`; `run_rank` does that on every path.

Sharded checkpoints: `<checkpoint_dir>/round-NNNNNN/{shared,rank<r>}/latest.pt` and
`LATEST.json` naming the last round whose files every rank has written (rank 0 writes it after
a barrier, then removes older rounds). Resume needs the same number of processes.

Devices (`select_placement`). use_gpu=False: gloo, every tensor on the CPU. use_gpu=True: rank r
binds cuda:LOCAL_RANK (torchrun's variable; TorchDistributor narrows CUDA_VISIBLE_DEVICES to the
GPUs Spark gave the job) and the process group is "cpu:gloo,cuda:nccl": `TorchComm` moves every
tensor it reduces or gathers to that device, so the all-reduces and all-gathers run over NCCL,
and hands the result back on the caller's device; CPU tensors (object collectives, a CPU model's
DDP buckets) keep using gloo. DDP wraps a CUDA module with device_ids=[local rank]. `_Run` gets
the placement's device: the policy, value net, critics, expert features and the environment's
tables live there and rollouts, critic training and scoring and PPO run there, while every random
draw stays on the CPU generators (see `models.train`). Everything saved (checkpoints, policy.pt)
is moved to the CPU first (`to_cpu`), so it loads on a machine without a GPU. No CUDA with
use_gpu=True is a ConfigError naming the key, raised before the process group starts.

Fault injection for tests: the seam `udfs.faults.train_hook` (TRAJPRIV_FAULT_TRAIN=
"rank:round[:exit|:hold]", off unless a test sets it) raises (or exits hard, or stalls) on that
rank before that round, i.e. after the checkpoint of the round before it. `hold` lets
tests/reliability/test_train_faults.py kill a run at a known round: toy rounds take
milliseconds, so without it the ranks could commit several rounds between the test seeing a
checkpoint and its SIGKILL landing.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from models.checkpoint import load_checkpoint, save_checkpoint, to_cpu
from models.config import TrainConfig
from models.critic_store import save_critic_shard
from models.data import TrainData
from models.train import _Run, train_loop
from udfs import faults
from udfs.atomic import atomic_open
from udfs.errors import ConfigError

log = logging.getLogger(__name__)

LATEST = "LATEST.json"


class RankFailedError(RuntimeError):
    """A training rank failed; the message names the rank and its error."""


class _PeerFailed(Exception):
    def __init__(self, errors: dict[int, str]):
        super().__init__(errors)
        self.errors = errors


@dataclass(frozen=True)
class Placement:
    """Where a rank runs: its process-group backend and the device of its collective tensors."""

    backend: str
    device: torch.device


GPU_BACKEND = "cpu:gloo,cuda:nccl"  # NCCL for device tensors, gloo for CPU tensors and objects


def select_placement(use_gpu: bool, local_rank: int) -> Placement:
    """The backend and device of the rank with this local rank (pure apart from asking torch
    which CUDA devices this process sees)."""
    if not use_gpu:
        return Placement("gloo", torch.device("cpu"))
    if not torch.cuda.is_available():
        raise ConfigError(
            "train.use_gpu=true but this process sees no CUDA device (torch.cuda.is_available() "
            f"is False, torch {torch.__version__}, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}): set train.use_gpu=false to "
            "train on CPU (gloo), or run where a CUDA build of torch sees a GPU")
    count = torch.cuda.device_count()
    if not 0 <= local_rank < count:
        raise ConfigError(
            f"train.use_gpu=true: local rank {local_rank} has no GPU of its own ({count} visible); "
            "lower train.num_processes to at most the GPUs per host, or give Spark more GPUs "
            "(spark.driver.resource.gpu.amount / spark.task.resource.gpu.amount)")
    return Placement(GPU_BACKEND, torch.device("cuda", local_rank))


class TorchComm:
    """`models.train.Comm` over the default process group, every collective guarded.

    Tensors are reduced and gathered on `device` (the rank's GPU under NCCL, else the CPU) and
    returned on the device they came from; the caller's tensor is never modified.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = torch.device(device)

    def _gather(self, msg: str | None) -> dict[int, str]:
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, msg)
        return {r: m for r, m in enumerate(out) if m is not None}

    def guard(self) -> None:
        flag = torch.zeros(1, device=self.device)
        dist.all_reduce(flag)
        if flag.item() > 0:
            raise _PeerFailed(self._gather(None))

    def fail(self, msg: str) -> dict[int, str]:
        """Tell the other ranks (at their next guard) that this rank failed; all messages."""
        dist.all_reduce(torch.ones(1, device=self.device))
        return self._gather(msg)

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        self.guard()
        out = t.to(self.device, copy=True)
        dist.all_reduce(out)
        return out.to(t.device)

    def all_gather_cat(self, t: torch.Tensor) -> torch.Tensor:
        """Concatenation in rank order (ranks hold equal-sized, contiguous blocks)."""
        self.guard()
        src = t.to(self.device).contiguous()
        out = [torch.empty_like(src) for _ in range(self.world)]
        dist.all_gather(out, src)
        return torch.cat(out).to(t.device)

    def broadcast_object(self, obj: Any) -> Any:
        self.guard()
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather_objects(self, obj: Any) -> list[Any]:
        self.guard()
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        self.all_reduce_sum(torch.zeros(1))

    def wrap(self, module: nn.Module) -> nn.Module:
        on = next(module.parameters()).device
        if on.type == "cuda":
            return nn.parallel.DistributedDataParallel(module, device_ids=[on.index],
                                                       output_device=on.index)
        return nn.parallel.DistributedDataParallel(module)


@dataclass
class RankJob:
    """What every rank needs; picklable (TorchDistributor ships it to the ranks)."""

    config: dict  # models.config.TrainConfig fields
    blocks: int
    load: Callable[[int, int], tuple[TrainData, torch.Tensor, int]]  # (rank, world) -> shard
    out_dir: str  # artefacts of the run (rank 0 writes)
    checkpoint_dir: str | None = None
    resume: bool = False
    stop_after: int | None = None
    timeout_s: float = 1800.0
    meta: dict = field(default_factory=dict)  # copied into the summary (ids, names)
    # (addr, port, rank, world): every rank joins the TCPStore its launcher serves at addr:port
    # (tests; the launcher binds port 0 and hands out the port it got). None: env:// (torchrun).
    init: tuple[str, int, int, int] | None = None
    use_gpu: bool = False  # NCCL and cuda:LOCAL_RANK (see select_placement)


# ----------------------------------------------------------------------------------------------
def write_json(path: Path, obj: Any) -> None:
    with atomic_open(path) as fh:
        json.dump(obj, fh, indent=2, default=str)


def save_sharded(run: _Run, folder: str | Path, comm: TorchComm) -> None:
    folder = Path(folder)
    rdir = folder / f"round-{run.round:06d}"
    if comm.rank == 0:
        save_checkpoint(to_cpu(run.shared_state()), rdir / "shared")
    save_checkpoint(to_cpu(run.shard_state()), rdir / f"rank{comm.rank}")
    comm.barrier()  # every rank's files of this round are in place
    if comm.rank == 0:
        if _orphaned():  # the launcher died: a resume may own this folder now, commit nothing
            os._exit(EXIT_ORPHANED)
        write_json(folder / LATEST, {"round": run.round, "world": comm.world})
        for old in folder.glob("round-*"):
            if old.name != rdir.name:
                shutil.rmtree(old, ignore_errors=True)


def load_sharded(run: _Run, folder: str | Path, comm: TorchComm) -> bool:
    """Load the last complete round into `run`; False when there is no checkpoint."""
    marker = Path(folder) / LATEST
    if not marker.exists():
        return False
    info = json.loads(marker.read_text())
    if info["world"] != comm.world:
        raise RankFailedError(f"checkpoint in {folder} was written by {info['world']} processes; "
                              f"resume with num_processes={info['world']} (got {comm.world})")
    rdir = Path(folder) / f"round-{info['round']:06d}"
    run.load_shared(load_checkpoint(rdir / "shared"))
    run.load_shard(load_checkpoint(rdir / f"rank{comm.rank}"))
    return True


def write_artefacts(run: _Run, out_dir: Path, meta: dict) -> dict[str, str]:
    """policy.pt (weights, dims, DP start distribution), accountant.json, history.json,
    train_config.json (without the seed), all written atomically."""
    cfg = run.cfg
    files = {name: out_dir / name for name in
             ("policy.pt", "accountant.json", "history.json", "train_config.json")}
    policy = {"policy_state": to_cpu(run.policy.state_dict()), "n_locations": run.env.n_locations,
              "loc_dim": cfg.loc_dim, "slot_dim": cfg.slot_dim, "hidden": cfg.policy_hidden,
              "k_nearest": cfg.k_nearest, "explore_exponent": cfg.explore_exponent,
              "start_probs": to_cpu(run.start_probs), "scheme": cfg.scheme, "meta": meta,
              # pretrain="markov": the released destination tables the explore draws are tilted
              # by (models.train.env_of); synthesis must build the same environment
              "dest_prior": run.dest_prior}
    with atomic_open(files["policy.pt"], binary=True) as fh:
        torch.save(policy, fh)
    write_json(files["accountant.json"], {"summary": run.accountant.summary(),
                                          "state": run.accountant.state_dict()})
    write_json(files["history.json"], run.history)
    public = {k: v for k, v in cfg.to_dict().items() if k != "seed"}
    write_json(files["train_config.json"], {**public, "blocks": run.blocks})
    return {k: str(v) for k, v in files.items()}


# ----------------------------------------------------------------------------------------------
def _train(job: RankJob, comm: TorchComm, holder: dict) -> dict:
    t0 = time.perf_counter()
    stamps = holder.setdefault("stamps", {})
    cfg = TrainConfig.from_dict(job.config)
    data, rows, n_total = job.load(comm.rank, comm.world)
    stamps["loaded"] = time.time()
    run = holder["run"] = _Run(cfg, data, comm, rows, n_total, job.blocks, comm.device)
    stamps["built"] = time.time()
    t_setup = time.perf_counter() - t0
    resumed = bool(job.checkpoint_dir and job.resume
                   and load_sharded(run, job.checkpoint_dir, comm))
    if resumed:
        log.info("rank %d resumed at round %d, epsilon %.4g", comm.rank, run.round,
                 run.accountant.epsilon())
    else:
        run.setup()
    stamps["ready"] = time.time()
    last = cfg.rounds if job.stop_after is None else min(cfg.rounds, job.stop_after)
    save = ((lambda: save_sharded(run, job.checkpoint_dir, comm)) if job.checkpoint_dir
            else None)
    round0 = run.round
    t1 = time.perf_counter()
    train_loop(run, last, save, faults.train_hook(comm.rank))
    t_rounds = time.perf_counter() - t1
    report = {"rank": comm.rank, "users": data.n_users, "rounds_done": run.round,
              "setup_s": round(t_setup, 3), "rounds_s": round(t_rounds, 3),
              "rounds_run": run.round - round0, "stamps": dict(stamps),
              "critics": str(save_critic_shard(run, job.out_dir, comm.rank, comm.world))}
    shared = None
    if comm.rank == 0:
        artefacts = write_artefacts(run, Path(job.out_dir), job.meta)
        shared = {"rounds_done": run.round, "resumed_at": round0 if resumed else None,
                  "stopped_reason": run.stopped, "accountant": run.accountant.summary(),
                  "history": run.history, "n_users_total": n_total, "blocks": job.blocks,
                  "artefacts": artefacts, "meta": job.meta}
    shared = comm.broadcast_object(shared)
    reports = comm.gather_objects(report)
    return {"ok": True, "world": comm.world, "ranks": reports, **shared}


def _init(job: RankJob) -> Placement:
    """Choose the device, bind it, start the process group. Under torchrun (TorchDistributor)
    RANK, WORLD_SIZE and LOCAL_RANK come from the environment; `job.init` (tests) is one host, so
    the local rank is the rank."""
    rank = job.init[2] if job.init else int(os.environ.get("RANK", "0"))
    local_rank = job.init[2] if job.init else int(os.environ.get("LOCAL_RANK", "0"))
    try:
        placement = select_placement(job.use_gpu, local_rank)
    except ConfigError as exc:  # before any collective: leave the message for the driver
        _write_error(job, rank, f"rank {rank}: ConfigError: {exc}")
        raise
    if placement.device.type == "cuda":
        torch.cuda.set_device(placement.device)
    timeout = dt.timedelta(seconds=job.timeout_s)
    if job.init is None:
        dist.init_process_group(placement.backend, timeout=timeout)
    else:
        # A client of the launcher's store, never a server: a port chosen free and bound later
        # by rank 0 can be taken in between, or be held on another address (EADDRINUSE).
        addr, port, rank, world = job.init
        store = dist.TCPStore(addr, port, is_master=False, timeout=timeout)
        dist.init_process_group(placement.backend, store=store, rank=rank, world_size=world,
                                timeout=timeout)
    return placement


def _write_error(job: RankJob, rank: int, msg: str, kind: str = "error") -> None:
    """`<out_dir>/rank<r>.error` (this rank's own failure) or `.stopped` (it stopped because
    another rank failed: a peer's failure flag, or its launcher's SIGTERM)."""
    try:
        Path(job.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(job.out_dir) / f"rank{rank}.{kind}").write_text(msg)
    except OSError:
        pass


def _note_launcher_stop(job: RankJob, rank: int) -> Callable[[], None]:
    """Under torchrun: on SIGTERM (torchrun stops the other ranks once one has died) write
    `rank<r>.stopped`, then exit. So a rank the launcher stops always says so, whether the
    signal or the dead peer's closed connection reaches it first, and the driver can tell the
    rank that died without a message (killed: no file) from those stopped after it
    (jobs.train.stage.rank_errors). Returns the function that restores the old handler."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_term(signum: int, frame: Any) -> None:
        _write_error(job, rank, f"rank {rank}: stopped by its launcher (SIGTERM), after "
                                "another rank failed", kind="stopped")
        os._exit(128 + signum)

    before = signal.signal(signal.SIGTERM, on_term)
    return lambda: signal.signal(signal.SIGTERM, before)


EXIT_ORPHANED = 75
_launcher_pid: int | None = None  # set by _exit_with_launcher in ranks torchrun started


def _orphaned() -> bool:
    """True when this rank was started by a launcher that is gone (its parent changed)."""
    return _launcher_pid is not None and os.getppid() != _launcher_pid


def _exit_with_launcher(interval_s: float = 1.0) -> None:
    """Exit (status EXIT_ORPHANED) as soon as this rank's parent process is gone.

    torchrun starts each rank in a session of its own, so when `trajpriv train` is killed with
    its process group (kill -9, a killed scheduler task) the ranks would outlive it, train on and
    write checkpoints into a run that may already be resumed (a worker outlives kill -9 of
    torchrun's process group; tests/reliability/test_train_faults.py checks that ours exit).
    pyspark's torchrun wrapper polls its parent the same way.
    The watch polls every `interval_s`; save_sharded checks again before it commits a round, so
    an orphan never moves LATEST.json forward.
    """
    global _launcher_pid
    _launcher_pid = os.getppid()

    def watch() -> None:
        while not _orphaned():
            time.sleep(interval_s)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="trajpriv-launcher-watch", daemon=True).start()


def run_rank(job: RankJob) -> dict:
    """One rank's whole run; returns the summary (identical on every rank, see module doc)."""
    if job.init is None:  # launched by torchrun (TorchDistributor), not by a test's spawn
        _exit_with_launcher()
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s rank %(process)d %(name)s: "
                                   "%(message)s")
    torch.set_num_threads(max(1, int(os.environ.get("TRAJPRIV_TORCH_THREADS", "1"))))
    restore = (_note_launcher_stop(job, int(os.environ.get("RANK", "0"))) if job.init is None
               else lambda: None)
    try:
        return _run_rank(job)
    finally:
        restore()


def _run_rank(job: RankJob) -> dict:
    entered = time.time()
    placement = _init(job)
    comm = TorchComm(placement.device)
    if comm.rank != 0:
        logging.getLogger("models").setLevel(logging.WARNING)
    # wall-clock stamps of the launch phases (the driver compares them with its own start):
    # entered run_rank (interpreter, imports, unpickling done), process group up, shard loaded,
    # _Run built (features, critics), set up (start distribution, critic pretraining)
    holder: dict = {"stamps": {"entered": entered, "group": time.time()}}
    result: dict
    try:
        try:
            result = _train(job, comm, holder)
        except _PeerFailed as exc:
            _write_error(job, comm.rank, f"rank {comm.rank}: stopped after rank(s) "
                                         f"{sorted(exc.errors)} failed", kind="stopped")
            result = {"ok": False, "world": comm.world, "errors": exc.errors}
        except Exception as exc:  # report it to every rank, then return the failure summary
            msg = f"rank {comm.rank}: {type(exc).__name__}: {exc}"
            log.error("%s", msg, exc_info=True)
            _write_error(job, comm.rank, msg)
            try:
                errors = comm.fail(msg)
            except Exception as exc2:  # peers unreachable
                errors = {comm.rank: f"{msg} (could not reach the other ranks: {exc2})"}
            result = {"ok": False, "world": comm.world, "errors": errors}
    finally:
        holder.pop("run", None)  # model, DDP wrapper and optimisers go before the process group
        gc.collect()
        dist.destroy_process_group()
    return result


def check_summary(result: Any, world: int) -> dict:
    """Raise RankFailedError unless `result` is a complete success summary from `world` ranks."""
    if not isinstance(result, dict) or "ok" not in result:
        raise RankFailedError(f"training returned no summary (got {type(result).__name__})")
    if not result["ok"]:
        errs = result.get("errors") or {}
        text = "; ".join(errs[r] for r in sorted(errs)) or "no message"
        raise RankFailedError(f"training failed on {len(errs)} rank(s): {text}")
    ranks = sorted(r["rank"] for r in result.get("ranks", []))
    if result.get("world") != world or ranks != list(range(world)):
        raise RankFailedError(f"incomplete training summary: ranks {ranks} of {world}")
    done = {r["rounds_done"] for r in result["ranks"]}
    if done != {result.get("rounds_done")}:
        raise RankFailedError(f"ranks disagree on the rounds done: {sorted(done)}")
    missing = [p for p in result.get("artefacts", {}).values() if not Path(p).exists()]
    if missing or not result.get("artefacts"):
        raise RankFailedError(f"training artefacts missing: {missing or 'none listed'}")
    return result

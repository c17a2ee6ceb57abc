"""Training faults (issue 10): a killed `trajpriv train` resumes to the same result, and a
checkpoint write cut short leaves the previous checkpoint usable. One chain of runs on one
checkpoint folder (each `trajpriv train` is a JVM, torchrun and two ranks):

* Killed between rounds: `trajpriv train` (driver, JVM, torchrun and its two ranks) runs as a
  subprocess in its own process group; once round 1's checkpoint is complete (LATEST.json, rank
  0 then stalls on the fault seam TRAJPRIV_FAULT_TRAIN=0:1:hold), the group gets SIGKILL. The
  ranks live in sessions of their own (torchrun starts them so) and must exit by themselves
  (models.distributed._exit_with_launcher).
* Killed during a checkpoint write: its resume runs with the fault seam
  `udfs.faults.checkpoint_write` that models/checkpoint.py calls
  (TRAJPRIV_FAULT_CHECKPOINT="ROUND:FOLDER"), which truncates the temporary file to half and
  SIGKILLs the writing process in round 2; the torn file must never be the one a reader finds
  (temp file + os.replace). The job's error names rank 0 as the rank that died without a
  message whichever reaches rank 1 first, rank 0's closed connection or torchrun's SIGTERM
  (rank 1 then leaves `rank1.error` or `rank1.stopped`; jobs.train.stage.rank_errors).
* Then `--resume` must end with the same final weights (policy, value net, every critic,
  optimisers, random streams) and the same epsilon as an uninterrupted run, bit for bit: same
  seed, same world size, same order of sums.
The uninterrupted baseline and the toy tables are made once per module in a subprocess (its own
storage root, hence its own Derby metastore: it cannot share the test session's JVM).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from models.checkpoint import Checkpointing, load_checkpoint
from models.train import fit
from tests.models._toy import tiny_config, tiny_overrides, toy_data
from udfs.faults import CHECKPOINT, PREFIX, TRAIN

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DATASET = "fault_toy"
ROUNDS = 4
LOC_OFFSET = 100
OPTIONS = tiny_overrides(seed=11)
TINY = tiny_config(rounds=ROUNDS, seed=11)
LIMIT_S = 900  # per subprocess; a loaded 2-core machine needs ~1-2 min per `trajpriv train`


def _prepare(conf: str) -> None:
    """(subprocess) Write the toy tables under the config's root and train uninterrupted."""
    import argparse
    import datetime as dt

    import numpy as np
    import pandas as pd

    from jobs import harness
    from jobs.config import load_config
    from jobs.spark.catalog import write_table
    from jobs.spark.session import get_spark
    from jobs.train import stage as train_stage

    cfg = load_config(conf)
    spark = get_spark(cfg)
    try:
        data = toy_data(n_users=6, days=8)
        rows = [(DATASET, f"u{u}", dt.date(2014, 6, 1) + dt.timedelta(days=i),
                 (d + LOC_OFFSET).astype(int).tolist())
                for u, days in enumerate(data.days_per_user) for i, d in enumerate(days)]
        write_table(spark.createDataFrame(rows, "dataset string, user_id string, date date, "
                                                "slots array<int>"),
                    "trajpriv_raw.slot_days", partition_by=["dataset", "date"],
                    replace={"dataset": DATASET})
        locs = pd.DataFrame({"dataset": DATASET,
                             "loc_id": np.arange(len(data.coords), dtype=np.int32) + LOC_OFFSET,
                             "lat": data.coords[:, 0], "lon": data.coords[:, 1]})
        write_table(spark.createDataFrame(locs, "dataset string, loc_id int, lat double, "
                                                "lon double"),
                    "trajpriv_pub.locations", partition_by=["dataset"],
                    replace={"dataset": DATASET})
        harness.execute("train", train_stage.run, cfg, argparse.Namespace(resume=None), spark,
                        "whole")
    finally:
        spark.stop()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update(PYTHONPATH=str(ROOT), TRAJPRIV_TORCH_THREADS="1", **extra)
    return env


def _run_figures(runs: Path, run_id: str) -> dict:
    """Every figure of a finished run, from its run folder (the trusted zone's copy)."""
    return json.loads((runs / run_id / "figures.json").read_text())


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _cli(conf: Path, *args: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen([sys.executable, "-m", "jobs.cli", "train", "--config", str(conf),
                                 *args], cwd=ROOT, env=env or _env(), stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """(config path, runs dir) with the toy tables and the uninterrupted run `whole`."""
    from jobs.config import load_config

    root = tmp_path_factory.mktemp("train_faults")
    cfg = load_config(None, [f"storage.root={root}", f"dataset={DATASET}", "spark.master=local[2]",
                             "spark.conf.spark.sql.shuffle.partitions=2",
                             "spark.conf.spark.driver.memory=1g", "train.num_processes=2",
                             "train.blocks=2", f"train.rounds={ROUNDS}", "train.noise=0.5",
                             "train.target_epsilon=1e6", *OPTIONS])
    conf = root / "conf.yaml"
    conf.write_text(cfg.to_yaml())
    log = root / "prepare.log"
    with open(log, "w") as fh:
        rc = subprocess.run([sys.executable, "-c", "import sys; from tests.reliability."
                             "test_train_faults import _prepare; _prepare(sys.argv[1])",
                             str(conf)], cwd=ROOT, env=_env(), stdout=fh,
                            stderr=subprocess.STDOUT, timeout=LIMIT_S).returncode
    assert rc == 0, _tail(log)
    return conf, cfg.storage.runs_dir


def _final(ckpt: Path) -> dict:
    """Every piece of state in the last complete round of a sharded checkpoint folder."""
    info = json.loads((ckpt / "LATEST.json").read_text())
    rdir = ckpt / f"round-{info['round']:06d}"
    return {"round": info["round"], "shared": load_checkpoint(rdir / "shared"),
            "ranks": [load_checkpoint(rdir / f"rank{r}") for r in range(info["world"])]}


def _same(a, b, where: str = "") -> None:
    """Exact equality of nested checkpoint state (tensors bit for bit)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _assert_same_result(runs: Path, ckpt_of_resumed: Path, resumed_run: str) -> None:
    whole, resumed = _final(runs / "whole" / "checkpoint"), _final(ckpt_of_resumed)
    assert whole["round"] == resumed["round"] == ROUNDS
    for key in ("policy", "value", "ppo_opt", "accountant", "generators", "numpy_rng",
                "start_probs", "stopped"):
        _same(whole["shared"][key], resumed["shared"][key], key)
    for r, (a, b) in enumerate(zip(whole["ranks"], resumed["ranks"], strict=True)):
        _same(a, b, f"rank{r}")  # critics, their optimiser, rows
    pol_a = torch.load(runs / "whole" / "policy.pt", weights_only=False)
    pol_b = torch.load(runs / resumed_run / "policy.pt", weights_only=False)
    _same(pol_a["policy_state"], pol_b["policy_state"], "policy.pt")
    acct_a = json.loads((runs / "whole" / "accountant.json").read_text())["summary"]
    acct_b = json.loads((runs / resumed_run / "accountant.json").read_text())["summary"]
    assert acct_a["epsilon"] == acct_b["epsilon"] and acct_a["releases"] == acct_b["releases"]
    hist_a = [h["reward_mean"] for h in json.loads((runs / "whole" / "history.json").read_text())]
    hist_b = [h["reward_mean"]
              for h in json.loads((runs / resumed_run / "history.json").read_text())]
    assert hist_a == hist_b


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(p)
    return out


@pytest.mark.spark
def test_killed_between_rounds_then_during_a_checkpoint_write_resumes_to_the_same_result(
        baseline):
    """One run, two faults, then a resume: the same final state as the uninterrupted run.

    1. `trajpriv train` is SIGKILLed (whole process group) after committing round 1: its
       orphaned ranks exit by themselves and commit nothing more.
    2. Its resume dies while rank 0 writes round 2's shared checkpoint: the job fails with
       rank 0 named, and round 1 stays the latest complete checkpoint (the torn file is never
       the one a reader finds).
    3. The next resume reproduces the uninterrupted run bit for bit.
    One chain instead of two runs from scratch: each `trajpriv train` is a JVM, torchrun and
    two ranks (about half a minute of CPU), and step 2 is a checkpoint write like any other.
    """
    conf, runs = baseline
    ckpt = runs / "killed" / "checkpoint"
    _kill_between_rounds(conf, runs, ckpt)
    _torn_checkpoint_write(conf, runs, ckpt)

    staging = runs.parent / "staging"
    log = conf.parent / "resumed.log"
    res = _cli(conf, "--resume", "killed", "--run-id", "resumed", log=log)
    assert res.wait(timeout=LIMIT_S) == 0, _tail(log)
    assert _run_figures(runs, "resumed")["resumed_at_round"] == 1
    _assert_same_result(runs, ckpt, "resumed")
    assert not list(staging.glob("train-*"))  # the next run removed the stale shards
    assert not (ckpt / "round-000002").exists()  # older rounds, torn file included, cleaned up


def _kill_between_rounds(conf: Path, runs: Path, ckpt: Path) -> None:
    """SIGKILL `trajpriv train` once round 1 is committed; its ranks must leave by themselves."""
    log = conf.parent / "killed.log"
    # rank 0 stalls before round 2, after committing round 1 (fault hook `hold`): the kill lands
    # at a known round however fast the toy rounds are
    proc = _cli(conf, "--run-id", "killed", log=log, env=_env(**{TRAIN: "0:1:hold"}))
    deadline = time.monotonic() + LIMIT_S
    family: set[int] = set()
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            family |= _descendants(proc.pid)  # ranks included, before they are orphaned
            if (ckpt / "LATEST.json").exists() and \
                    json.loads((ckpt / "LATEST.json").read_text())["round"] >= 1:
                break
            time.sleep(0.25)
        assert proc.poll() is None, f"train ended before the kill:\n{_tail(log)}"
        family |= _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        # the ranks run in sessions of their own: they must notice and exit by themselves
        t0 = time.monotonic()
        while _alive(family) and time.monotonic() - t0 < 30:
            time.sleep(0.5)
        left = _alive(family)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for p in left:  # clean up before failing: processes this test started
        os.kill(p, signal.SIGKILL)
    assert not left, f"processes of the killed run still alive: {sorted(left)}"
    assert json.loads((ckpt / "LATEST.json").read_text())["round"] == 1  # nothing after the kill
    assert not (runs / "killed" / "policy.pt").exists()  # it never finished
    assert (runs.parent / "staging" / "train-killed").is_dir()  # its users' shards, left behind


def _torn_checkpoint_write(conf: Path, runs: Path, ckpt: Path) -> None:
    """Resume the killed run; rank 0 dies while writing round 2's shared checkpoint."""
    log = conf.parent / "torn.log"
    proc = _cli(conf, "--resume", "killed", "--run-id", "torn", log=log,
                env=_env(**{CHECKPOINT: "2:shared"}))
    assert proc.wait(timeout=LIMIT_S) == 1, _tail(log)  # EXIT_FAILURE, not a crash of the CLI
    failed = [ln for ln in _tail(log, 20000).splitlines() if ln.startswith("trajpriv train: ")]
    assert failed and failed[-1].startswith("trajpriv train: failed:"), _tail(log)
    # the cause first: rank 0 left no file; rank 1 said why it stopped, whichever way it did
    assert "training failed: rank(s) [0] died without a message" in failed[-1], failed[-1]
    assert "rank 1: " in failed[-1], failed[-1]
    assert json.loads((ckpt / "LATEST.json").read_text())["round"] == 1
    torn = ckpt / "round-000002" / "shared"
    assert not (torn / "latest.pt").exists()
    tmp = list(torn.glob(".ckpt-*.tmp"))
    assert len(tmp) == 1 and tmp[0].stat().st_size > 0  # the half-written file, left by SIGKILL
    with pytest.raises(Exception):  # noqa: B017 - proof that the torn file is unreadable
        torch.load(tmp[0], weights_only=False)
    prev = _final(ckpt)
    assert prev["round"] == 1 and prev["shared"]["round"] == 1
    assert all(s["round"] == 1 for s in prev["ranks"])


def test_fit_killed_during_a_checkpoint_write_keeps_the_previous_one(tmp_path):
    """The one-process loop overwrites one `latest.pt`: a write cut short must leave the previous
    round's file in place, and resuming from it reproduces the uninterrupted run."""
    folder = tmp_path / "ckpt"
    code = ("import torch; torch.set_num_threads(1); from models.train import fit;"
            "from models.checkpoint import Checkpointing;"
            "from tests.reliability.test_train_faults import TINY;"
            "from tests.models._toy import tiny_config, tiny_overrides, toy_data;"
            f"fit(TINY, toy_data(n_users=6), checkpoint=Checkpointing({str(folder)!r}), blocks=2)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env=_env(**{CHECKPOINT: "2:ckpt"}), timeout=LIMIT_S)
    assert out.returncode == -signal.SIGKILL, out.stderr[-3000:]
    assert load_checkpoint(folder)["round"] == 1
    assert len(list(folder.glob(".ckpt-*.tmp"))) == 1
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the killed process: same kernels, same bits
    try:
        whole = fit(TINY, toy_data(n_users=6), blocks=2)
        resumed = fit(TINY, toy_data(n_users=6), checkpoint=Checkpointing(folder, resume=True),
                      blocks=2)
    finally:
        torch.set_num_threads(threads)
    _same(whole.policy_state, resumed.policy_state, "policy")
    assert whole.accountant == resumed.accountant
    assert [h["reward_mean"] for h in whole.history] == [h["reward_mean"]
                                                         for h in resumed.history]

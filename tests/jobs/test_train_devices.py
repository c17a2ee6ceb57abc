"""`trajpriv train` preflight and failure reporting (no Spark, no GPU needed: torch.cuda is
monkeypatched).

train.use_gpu=true must fail at start, naming the key, the reason and the fix, before the job
touches Spark (the stage gets `spark=None` here: any Spark use would raise AttributeError).
"""

from __future__ import annotations

import argparse
import os
from types import SimpleNamespace

import pytest
import torch

from jobs.config import load_config
from jobs.train import stage as train_stage
from udfs.errors import ConfigError


def _cfg(tmp_path, *extra: str):
    return load_config(None, [f"storage.root={tmp_path}", "train.num_processes=2",
                              "train.blocks=2", *extra])


def _cuda(monkeypatch, available: bool, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def _spark(gpus: list[str] | None, conf: dict | None = None):
    resources = {} if gpus is None else {"gpu": SimpleNamespace(addresses=gpus)}
    conf = conf or {}
    return SimpleNamespace(sparkContext=SimpleNamespace(resources=resources),
                           conf=SimpleNamespace(get=lambda k, d=None: conf.get(k, d)))


def test_use_gpu_without_cuda_fails_before_any_spark_work(tmp_path, monkeypatch):
    _cuda(monkeypatch, False, 0)
    cfg = _cfg(tmp_path, "train.use_gpu=true")
    ctx = SimpleNamespace(args=argparse.Namespace(resume=None), run_id="train-gpu")
    with pytest.raises(ConfigError, match=r"train.use_gpu=true but this host has no usable CUDA "
                                          r"device .*train.local_mode=true.*set "
                                          r"train.use_gpu=false to train on CPU"):
        train_stage.run(None, cfg, ctx)
    assert not (cfg.storage.runs_dir / "train-gpu").exists()  # nothing written either


def test_use_gpu_needs_one_device_per_rank(tmp_path, monkeypatch):
    _cuda(monkeypatch, True, 1)
    with pytest.raises(ConfigError, match=r"train.num_processes=2: only 1 CUDA device.*set "
                                          r"train.num_processes<=1"):
        train_stage.check_devices(_cfg(tmp_path, "train.use_gpu=true"))
    _cuda(monkeypatch, True, 2)
    train_stage.check_devices(_cfg(tmp_path, "train.use_gpu=true"))


def test_cpu_training_and_remote_ranks_are_not_checked_here(tmp_path, monkeypatch):
    _cuda(monkeypatch, False, 0)
    train_stage.check_devices(_cfg(tmp_path))  # use_gpu=false: gloo on CPU, nothing to check
    train_stage.check_spark_gpus(None, _cfg(tmp_path))
    # ranks on a cluster's executors: they check their own GPU (select_placement)
    train_stage.check_devices(_cfg(tmp_path, "train.use_gpu=true", "train.local_mode=false",
                                   "spark.master=spark://head:7077"))
    # ...but a local master runs the executors on this host
    with pytest.raises(ConfigError, match="spark.master=local"):
        train_stage.check_devices(_cfg(tmp_path, "train.use_gpu=true", "train.local_mode=false",
                                       "spark.master=local[2]"))


def test_spark_must_declare_the_gpus(tmp_path):
    cfg = _cfg(tmp_path, "train.use_gpu=true")
    with pytest.raises(ConfigError, match=r"declares 0 GPU\(s\).*spark.conf.spark.driver.resource."
                                          r"gpu.amount=2.*discoveryScript"):
        train_stage.check_spark_gpus(_spark(None), cfg)
    with pytest.raises(ConfigError, match=r"declares 1 GPU"):
        train_stage.check_spark_gpus(_spark(["0"]), cfg)
    train_stage.check_spark_gpus(_spark(["0", "1"]), cfg)
    remote = _cfg(tmp_path, "train.use_gpu=true", "train.local_mode=false",
                  "spark.master=spark://head:7077")
    with pytest.raises(ConfigError, match=r"spark.task.resource.gpu.amount=0; set spark.conf."
                                          r"spark.task.resource.gpu.amount=1"):
        train_stage.check_spark_gpus(_spark(None), remote)
    train_stage.check_spark_gpus(_spark(None, {"spark.task.resource.gpu.amount": "1"}), remote)


@pytest.mark.parametrize(("master", "task_cpus", "slots"), [
    ("local", 1, 1), ("local[2]", 1, 2), ("local[4, 3]", 2, 2), ("local[*]", 1, None),
    ("spark://head:7077", 1, None), ("yarn", 1, None)])
def test_local_task_slots(tmp_path, master, task_cpus, slots):
    cfg = _cfg(tmp_path, f"spark.master={master}", f"spark.conf.spark.task.cpus={task_cpus}")
    want = (os.cpu_count() or 1) if master == "local[*]" else slots
    assert train_stage.local_task_slots(cfg) == want


def test_barrier_ranks_need_a_slot_each(tmp_path):
    """local_mode=false with more ranks than slots: a ConfigError before the job stages anything
    (Spark would otherwise fail the barrier stage with SPARK-24819 after the split is written)."""
    cfg = _cfg(tmp_path, "train.local_mode=false", "train.num_processes=4", "train.blocks=4",
               "spark.master=local[2]")
    ctx = SimpleNamespace(args=argparse.Namespace(resume=None), run_id="train-slots")
    with pytest.raises(ConfigError, match=r"train.num_processes=4 ranks as a Spark barrier task.*"
                                          r"spark.master=local\[2\] has 2 task slot"):
        train_stage.run(None, cfg, ctx)
    train_stage.check_slots(_cfg(tmp_path, "train.local_mode=true", "train.num_processes=4",
                                 "train.blocks=4", "spark.master=local[2]"))
    train_stage.check_slots(_cfg(tmp_path, "train.local_mode=false", "spark.master=local[2]"))


def test_rank_errors_lead_with_the_ranks_that_died_silently(tmp_path):
    assert train_stage.rank_errors(tmp_path, 2) == ""
    (tmp_path / "rank1.error").write_text("rank 1: RuntimeError: Connection closed by peer")
    msg = train_stage.rank_errors(tmp_path, 2)
    assert msg.startswith("rank(s) [0] died without a message (killed by a signal")
    assert msg.endswith("rank 1: RuntimeError: Connection closed by peer")
    (tmp_path / "rank0.error").write_text("rank 0: ValueError: boom")
    assert train_stage.rank_errors(tmp_path, 2) == (
        "rank 0: ValueError: boom; rank 1: RuntimeError: Connection closed by peer")


def test_rank_errors_count_a_rank_stopped_after_another_as_not_silent(tmp_path):
    """Rank 0 killed hard: rank 1 either fails on the closed connection (rank1.error) or is
    stopped by torchrun's SIGTERM first (rank1.stopped); the lead is the same either way."""
    (tmp_path / "rank1.stopped").write_text("rank 1: stopped by its launcher (SIGTERM)")
    msg = train_stage.rank_errors(tmp_path, 2)
    assert msg.startswith("rank(s) [0] died without a message")
    assert msg.endswith("rank 1: stopped by its launcher (SIGTERM)")
    (tmp_path / "rank0.error").write_text("rank 0: ValueError: boom")
    assert train_stage.rank_errors(tmp_path, 2) == (
        "rank 0: ValueError: boom; rank 1: stopped by its launcher (SIGTERM)")

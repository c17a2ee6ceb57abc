"""W ranks (gloo, spawned processes) reproduce the one-process loop (no Spark here).

Tolerance: the ranks compute every random draw exactly as one process does (shard-invariant
streams), but floating-point sums are taken in another order: critic moments are all-reduced
(float64) and DDP averages float32 gradients over ranks where one process sums them in one
pass. Those differences are ~1e-7 relative per PPO step and stay that small over a few rounds
(no sampled action flips at this size), so rewards and losses are compared at rel 1e-4, and the
privacy ledger, which depends on the released values only through the pilot weights, exactly at
the basic composition and at rel 1e-9 for the RDP epsilon.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing as mp
from collections import namedtuple

import pytest
import torch
import torch.distributed as dist

from models.distributed import (
    GPU_BACKEND,
    RankFailedError,
    RankJob,
    TorchComm,
    _init,
    check_summary,
    run_rank,
    select_placement,
    to_cpu,
)
from models.train import fit
from tests.models._toy import tiny_config, toy_data
from udfs.errors import ConfigError

TINY = tiny_config(spectral_norm=True)


def toy_shard(rank: int, world: int, n_users: int = 6):
    """Users u with u % world == rank (interleaved, so shards are not contiguous)."""
    data = toy_data(n_users=n_users)
    rows = [u for u in range(n_users) if u % world == rank]
    shard = type(data)([data.days_per_user[u] for u in rows], data.coords, rows)
    return shard, torch.tensor(rows), n_users


def _child(job: RankJob, queue) -> None:
    torch.set_num_threads(1)
    queue.put((job.init[2], run_rank(job)))


def launcher_store() -> dist.TCPStore:
    """The store the ranks of a test join (`RankJob.init`), served by the test itself on a port
    the kernel chose: held from the moment it is known, so no other process can take it."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def run_world(job: RankJob, world: int, timeout: float = 300) -> list[dict]:
    store = launcher_store()  # served until this function returns, after every rank is done
    port = store.port
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(dataclasses.replace(
        job, init=("127.0.0.1", port, r, world)), queue)) for r in range(world)]
    for p in procs:
        p.start()
    out = dict(queue.get(timeout=timeout) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    return [out[r] for r in range(world)]


def _close(a: float, b: float, rel: float = 1e-4) -> bool:
    return abs(a - b) <= rel * max(1.0, abs(a), abs(b))


# private pre-training: the Markov statistics all-reduced, released on rank 0, cloned there
PRETRAINED = {"pretrain": "markov", "target_epsilon": 2000.0, "markov_share": 0.1,
              "bc_days": 64, "bc_epochs": 1}


@pytest.mark.slow
@pytest.mark.parametrize("destination,pretrain", [("public", False), ("learned", False),
                                                  ("public", True)])
def test_two_ranks_equal_one_process(tmp_path, destination, pretrain):
    cfg = dataclasses.replace(TINY, destination=destination, **(PRETRAINED if pretrain else {}))
    one = fit(cfg, toy_data(n_users=6), blocks=2)
    job = RankJob(cfg.to_dict(), 2, functools.partial(toy_shard, n_users=6), str(tmp_path))
    results = run_world(job, 2)
    assert results[0] == results[1]  # every rank returns the same summary
    two = check_summary(results[0], 2)
    assert two["rounds_done"] == one.rounds_done == 3
    for h1, h2 in zip(one.history, two["history"], strict=True):
        for key in ("reward_mean", "policy_loss", "entropy"):
            assert _close(h1[key], h2[key]), (h1["round"], key, h1[key], h2[key])
        for key in ("reward_raw_mean", "critic_loss"):  # trusted-zone figures
            t1, t2 = h1["trusted"][key], h2["trusted"][key]
            assert _close(t1, t2), (h1["round"], key, t1, t2)
        assert h1["participants"] == h2["participants"]
        assert h1["epsilon_batch"] == pytest.approx(h2["epsilon_batch"], rel=1e-9)
    b1, b2 = one.accountant["basic_epsilon"], two["accountant"]["basic_epsilon"]
    assert b1 == b2 if b1 is None else b1 == pytest.approx(b2, rel=1e-9)  # None: a Gaussian
    assert one.accountant["epsilon"] == pytest.approx(two["accountant"]["epsilon"], rel=1e-9)
    assert {r["users"] for r in two["ranks"]} == {3}  # each rank held only its own users
    # launch phases stamped in order on every rank (the bench's launch breakdown reads them)
    from jobs.train.stage import launch_phases

    for r in two["ranks"]:
        s = r["stamps"]
        assert s["entered"] <= s["group"] <= s["loaded"] <= s["built"] <= s["ready"], s
    phases = launch_phases(two, min(r["stamps"]["entered"] for r in two["ranks"]))
    assert list(phases) == ["entered", "group", "loaded", "built", "ready"]
    times = list(phases.values())
    assert times[0] >= 0 and times == sorted(times)


def test_summary_check_names_the_failing_rank():
    bad = {"ok": False, "world": 2, "errors": {1: "rank 1: RuntimeError: boom"}}
    with pytest.raises(RankFailedError, match="rank 1: RuntimeError: boom"):
        check_summary(bad, 2)
    with pytest.raises(RankFailedError, match="incomplete"):
        check_summary({"ok": True, "world": 2, "ranks": [{"rank": 0, "rounds_done": 1}],
                       "rounds_done": 1}, 2)


# --- devices: which backend and device a rank takes (torch.cuda monkeypatched) ---------------
def _cuda(monkeypatch, available: bool, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_placement_without_use_gpu_is_gloo_on_cpu_even_with_gpus(monkeypatch):
    _cuda(monkeypatch, True, 4)
    p = select_placement(False, 3)
    assert p.backend == "gloo" and p.device == torch.device("cpu")


def test_placement_with_gpus_is_nccl_on_the_local_rank(monkeypatch):
    _cuda(monkeypatch, True, 2)
    for local_rank in (0, 1):
        p = select_placement(True, local_rank)
        assert p.backend == GPU_BACKEND == "cpu:gloo,cuda:nccl"
        assert p.device == torch.device("cuda", local_rank)


def test_placement_use_gpu_without_cuda_names_the_key_and_the_fix(monkeypatch):
    _cuda(monkeypatch, False, 0)
    with pytest.raises(ConfigError, match=r"train.use_gpu=true but this process sees no CUDA "
                                          r"device.*set train.use_gpu=false"):
        select_placement(True, 0)


def test_placement_more_ranks_than_gpus_is_refused(monkeypatch):
    _cuda(monkeypatch, True, 1)
    with pytest.raises(ConfigError, match=r"local rank 1 has no GPU of its own \(1 visible\)"):
        select_placement(True, 1)


def test_rank_without_cuda_fails_before_the_process_group_and_leaves_its_error(
        monkeypatch, tmp_path):
    _cuda(monkeypatch, False, 0)
    job = RankJob(TINY.to_dict(), 2, functools.partial(toy_shard, n_users=6), str(tmp_path),
                  init=("127.0.0.1", 1, 1, 2), use_gpu=True)
    with pytest.raises(ConfigError, match="no CUDA device"):
        run_rank(job)
    assert not dist.is_initialized()
    assert "rank 1: ConfigError: train.use_gpu=true" in (tmp_path / "rank1.error").read_text()


def test_to_cpu_keeps_the_structure_and_moves_every_tensor():
    Pair = namedtuple("Pair", "a b")
    t = torch.ones(2, requires_grad=True)
    state = {"w": t, "opt": {"state": {0: {"step": torch.tensor(3.0)}}, "groups": [{"lr": 0.1}]},
             "pair": Pair(torch.zeros(1), 5), "seq": (torch.arange(2), "x"), "none": None}
    out = to_cpu(state)
    assert out["w"].device.type == "cpu" and not out["w"].requires_grad
    assert torch.equal(out["w"], t.detach())
    assert out["opt"]["state"][0]["step"].item() == 3.0 and out["opt"]["groups"] == [{"lr": 0.1}]
    assert isinstance(out["pair"], Pair) and out["pair"].b == 5
    assert isinstance(out["seq"], tuple) and out["seq"][1] == "x" and out["none"] is None


def test_a_rank_joins_the_launchers_store_and_binds_no_port_itself():
    """`RankJob.init` names the store the launcher serves; rank 0 joins it as a client. Before,
    rank 0 served the store itself on a port the test had only probed free, which another
    process could take in between; against a served port that bind fails every time
    (EADDRINUSE), so this test failed before the change."""
    store = launcher_store()
    job = RankJob(TINY.to_dict(), 1, toy_shard, "unused", timeout_s=60,
                  init=("127.0.0.1", store.port, 0, 1))
    placement = _init(job)
    try:
        assert placement.device.type == "cpu" and dist.get_world_size() == 1
        comm = TorchComm(placement.device)
        assert comm.all_reduce_sum(torch.tensor([2.0])).item() == 2.0
    finally:
        dist.destroy_process_group()


def test_torch_comm_moves_through_its_device_and_back():
    """The device path of the collectives (to the comm device, reduce/gather, back to the
    caller's device) with device "cpu" in a one-rank gloo group; the caller's tensor stays."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        comm = TorchComm(torch.device("cpu"))
        x = torch.tensor([1.0, 2.0], dtype=torch.float64)
        red = comm.all_reduce_sum(x)
        assert torch.equal(red, x) and red.data_ptr() != x.data_ptr()
        assert red.device == x.device and red.dtype == torch.float64
        cat = comm.all_gather_cat(torch.arange(6).view(3, 2)[:, 0])  # non-contiguous input
        assert cat.tolist() == [0, 2, 4]
        comm.guard()
        comm.barrier()
    finally:
        dist.destroy_process_group()

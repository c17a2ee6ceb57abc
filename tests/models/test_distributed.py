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
import socket

import pytest
import torch

from models.config import TrainConfig
from models.distributed import RankFailedError, RankJob, check_summary, run_rank
from models.train import fit
from tests.models._toy import toy_data

TINY = TrainConfig(rounds=3, episodes_per_round=8, k_nearest=10, critic_hidden=8,
                   critic_batch=16, critic_steps=2, policy_hidden=16, loc_dim=4, slot_dim=4,
                   ppo_epochs=2, ppo_minibatch=128, noise=0.5, beta=0.5, participation=0.8,
                   spectral_norm=True, seed=7)


def toy_shard(rank: int, world: int, n_users: int = 6):
    """Users u with u % world == rank (interleaved, so shards are not contiguous)."""
    data = toy_data(n_users=n_users)
    rows = [u for u in range(n_users) if u % world == rank]
    shard = type(data)([data.days_per_user[u] for u in rows], data.coords, rows)
    return shard, torch.tensor(rows), n_users


def _child(job: RankJob, queue) -> None:
    torch.set_num_threads(1)
    queue.put((job.init[2], run_rank(job)))


def run_world(job: RankJob, world: int, timeout: float = 300) -> list[dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
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


@pytest.mark.slow
def test_two_ranks_equal_one_process(tmp_path):
    one = fit(TINY, toy_data(n_users=6), blocks=2)
    job = RankJob(TINY.to_dict(), 2, functools.partial(toy_shard, n_users=6), str(tmp_path))
    results = run_world(job, 2)
    assert results[0] == results[1]  # every rank returns the same summary
    two = check_summary(results[0], 2)
    assert two["rounds_done"] == one.rounds_done == 3
    for h1, h2 in zip(one.history, two["history"], strict=True):
        for key in ("reward_mean", "reward_raw_mean", "critic_loss", "policy_loss", "entropy"):
            assert _close(h1[key], h2[key]), (h1["round"], key, h1[key], h2[key])
        assert h1["participants"] == h2["participants"]
        assert h1["epsilon_batch"] == pytest.approx(h2["epsilon_batch"], rel=1e-9)
    assert one.accountant["basic_epsilon"] == pytest.approx(two["accountant"]["basic_epsilon"],
                                                            rel=1e-9)
    assert one.accountant["epsilon"] == pytest.approx(two["accountant"]["epsilon"], rel=1e-9)
    assert {r["users"] for r in two["ranks"]} == {3}  # each rank held only its own users


def test_summary_check_names_the_failing_rank():
    bad = {"ok": False, "world": 2, "errors": {1: "rank 1: RuntimeError: boom"}}
    with pytest.raises(RankFailedError, match="rank 1: RuntimeError: boom"):
        check_summary(bad, 2)
    with pytest.raises(RankFailedError, match="incomplete"):
        check_summary({"ok": True, "world": 2, "ranks": [{"rank": 0, "rounds_done": 1}],
                       "rounds_done": 1}, 2)

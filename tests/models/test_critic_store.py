"""Critic shards saved by the ranks merge, by user, into the critics one process trains.

Oracle: a one-process `fit` with the same seed and blocks (models.train is shard-invariant in
every random draw; the critics see the same all-gathered generated pairs, so they match up to
float summation order, well inside atol 1e-5 after 3 rounds; see tests/models/test_distributed.py
for why that tolerance holds).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from models.critic_store import (
    load_user_critics,
    merge_critic_shards,
    save_critic_shard,
)
from models.distributed import RankJob, check_summary
from models.train import fit
from tests.models._toy import tiny_config, toy_data
from tests.models.test_distributed import run_world, toy_shard
from udfs.errors import InputDataError

TINY = tiny_config(spectral_norm=True)


def _fake_run(res, rows: list[int], world_round: int = 3):
    """A stand-in for one rank's _Run holding the users `rows` of a one-process result."""
    state = {k: v[rows] for k, v in res.critics_state.items()}
    critics = SimpleNamespace(state_dict=lambda: state)
    return SimpleNamespace(round=world_round, n_total=len(res.critic_users),
                           rows=torch.tensor(rows), critics=critics, cfg=res.config,
                           data=SimpleNamespace(user_ids=[res.critic_users[r] for r in rows]))


@pytest.fixture(scope="module")
def one_process():
    return fit(TINY, toy_data(n_users=6), blocks=2)


def test_fit_result_carries_the_critics(one_process):
    crit = one_process.user_critics()
    assert crit.n_users == 6 and crit.user_ids == list(range(6))
    assert crit.spectral_norm and crit.hidden == 8
    x = torch.rand(5, crit.module().w1.shape[1])
    assert crit.module()(x).shape == (6, 5)


def test_shards_merge_by_user_in_any_order(one_process, tmp_path):
    for rank, rows in ((1, [1, 3, 5]), (0, [4, 0, 2])):  # unsorted rows, rank 1 saved first
        save_critic_shard(_fake_run(one_process, rows), tmp_path, rank, 2)
    merged = load_user_critics(tmp_path)
    assert merged.user_ids == list(range(6))
    for k, v in one_process.critics_state.items():
        assert torch.equal(merged.state[k], v), k
    sub = merged.select([4, 1])
    assert sub.user_ids == [4, 1] and torch.equal(sub.state["w1"][0], merged.state["w1"][4])


def test_incomplete_or_stale_shards_are_refused(one_process, tmp_path):
    from models.critic_store import critic_shard

    a = critic_shard(_fake_run(one_process, [0, 2, 4]), 0, 2)
    b = critic_shard(_fake_run(one_process, [1, 3, 5]), 1, 2)
    with pytest.raises(InputDataError, match=r"ranks \[0\] found, the run had 2"):
        merge_critic_shards([a])
    with pytest.raises(InputDataError, match="disagree on \\['round'\\]"):
        merge_critic_shards([a, critic_shard(_fake_run(one_process, [1, 3, 5], 2), 1, 2)])
    dup = critic_shard(_fake_run(one_process, [0, 2, 5]), 0, 2)  # user 5 twice, 4 never
    with pytest.raises(InputDataError, match="exactly once"):
        merge_critic_shards([b, dup])
    with pytest.raises(InputDataError, match="retrain it to attack"):
        load_user_critics(tmp_path / "none")


@pytest.mark.slow
def test_two_ranks_save_the_critics_of_one_process(one_process, tmp_path):
    job = RankJob(TINY.to_dict(), 2, functools.partial(toy_shard, n_users=6), str(tmp_path))
    out = run_world(job, 2)
    summary = check_summary(out[0], 2)
    assert sorted(r["critics"].rsplit("/", 1)[1] for r in summary["ranks"]) == \
        ["rank0.pt", "rank1.pt"]
    merged = load_user_critics(tmp_path)
    assert merged.user_ids == one_process.critic_users == list(range(6))
    for k, v in one_process.critics_state.items():
        assert torch.allclose(merged.state[k], v, atol=1e-5), k

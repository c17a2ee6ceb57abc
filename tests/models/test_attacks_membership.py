"""White-box MIA: succeeds against a memorising critic, stays at chance against one that ignores
its data. Tolerances: the evaluation half holds ~140 members and ~60 non-members; over 6 seeds of
the null case (untrained critics, other attack seeds) the AUC ranged 0.41-0.56 with standard
deviation ~0.06 (forest on 200 examples plus the split), so the band 0.5 +- 0.2 (3.3 sd) fails
by chance with probability ~1e-3; the memorising critic scores AUC 1.0 (bar 0.9). Seeds are
fixed, so a given run is deterministic."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from models.attacks.membership import (
    Candidates,
    day_features,
    day_rewards,
    load_critics,
    reward_features,
    run_membership,
    split_member_days,
)
from models.attacks.report import AttackSettings
from models.critics import BatchedCritics
from models.env import MobilityEnv
from models.features import FEATURE_DIM
from tests.models._attack_toy import MemorisingCritics, walk_data
from udfs.errors import InputDataError


@pytest.fixture(scope="module")
def setup():
    data = walk_data()
    train, cands = split_member_days(data, 0.7, seed=1)
    return data, train, cands


def test_split_is_per_user_seventy_thirty(setup):
    data, train, cands = setup
    for u, d in enumerate(data.days_per_user):
        m = cands.is_member[cands.users == u]
        assert m.sum() == len(train.days_per_user[u]) == round(0.7 * len(d))
        assert np.array_equal(np.sort(cands.days[(cands.users == u) & cands.is_member], 0),
                              np.sort(train.days_per_user[u], 0))


def test_memorising_critic_is_caught(setup):
    data, train, cands = setup
    env = MobilityEnv(data.coords, k_nearest=1)
    members = [day_features(env, d).reshape(-1, FEATURE_DIM) for d in train.days_per_user]
    rep = run_membership(MemorisingCritics(members), data.coords, cands,
                         settings=AttackSettings(n_boot=100, seed=0, forest_trees=100))
    n_eval = rep.n_members + rep.n_nonmembers
    assert abs(n_eval - len(cands.days) / 2) <= 2 * data.n_users  # half, +-1 per (user, label)
    assert rep.auc > 0.9 and rep.auc_ci[0] > 0.8
    assert rep.balanced_accuracy > 0.75
    assert rep.tpr_at_fpr > 0.2


def test_critic_that_ignores_its_data_stays_at_chance(setup):
    data, _, cands = setup
    untrained = BatchedCritics(data.n_users, FEATURE_DIM, 16, torch.Generator().manual_seed(5))
    rep = run_membership(untrained, data.coords, cands,
                         settings=AttackSettings(n_boot=100, seed=0, forest_trees=100))
    assert abs(rep.auc - 0.5) < 0.2
    assert abs(rep.balanced_accuracy - 0.5) < 0.2


def test_reward_features_oracle():
    # 2 days, 3 users, 4 pairs; day 0 claimed by user 2, day 1 by user 0
    r = torch.tensor([[[0.1] * 4, [0.2] * 4, [0.9, 0.7, 0.9, 0.7]],
                      [[0.5] * 4, [0.5] * 4, [0.5] * 4]])
    x = reward_features(r, np.array([2, 0]))
    assert x.shape == (2, 21)
    assert x[0, 0] == pytest.approx(0.8) and x[0, 2] == pytest.approx(0.7)
    assert x[0, 3] == pytest.approx(0.9)
    assert x[0, 9] == pytest.approx((0.1 + 0.2 + 0.8) / 3)  # mean over users, then over pairs
    assert x[0, 18] == pytest.approx(0.8 - 0.15)  # mine minus the others' mean
    assert x[0, 20] == pytest.approx(2 / 3) and x[1, 20] == 0.0  # rank among users
    assert x[1, 19] == pytest.approx(0.0, abs=1e-6)


def test_day_rewards_match_the_critics_directly(setup):
    data, _, cands = setup
    env = MobilityEnv(data.coords, k_nearest=1)
    crit = BatchedCritics(data.n_users, FEATURE_DIM, 8, torch.Generator().manual_seed(0))
    f = day_features(env, cands.days[:5])
    r = day_rewards(crit, f, chunk_days=2)
    direct = torch.sigmoid(crit(f[3], torch.arange(data.n_users)))  # (U, 47)
    assert torch.allclose(r[3], direct, atol=1e-6)


def test_critics_come_back_from_a_checkpoint(tmp_path):
    from models.attacks.lira import Trained, fit_with_critics
    from tests.models.test_train import TINY

    data = walk_data(n_users=3, days=10)
    train, cands = split_member_days(data, 0.7, seed=0)
    cfg = dataclasses.replace(TINY, rounds=1, participation=1.0)
    model = fit_with_critics(cfg, train, tmp_path)
    assert isinstance(model, Trained)
    crit = load_critics(tmp_path)
    assert crit.spectral and crit.n_users == 3
    for k, v in load_critics(model).state_dict().items():
        assert torch.equal(v, crit.state_dict()[k])
    rep = run_membership(model, data.coords, Candidates(cands.days, cands.users, cands.is_member),
                         settings=AttackSettings(n_boot=20, forest_trees=20))
    assert 0 <= rep.auc <= 1
    with pytest.raises(InputDataError, match="fit\\(checkpoint="):
        load_critics(tmp_path / "nothing")

"""White-box membership inference on the per-user critics (docs/architecture.md section 7).

Threat model: the attacker holds every user's trained critic D_u (for example a curious server,
or whoever obtains a checkpoint) and a candidate day d claimed to belong to user u. It computes
the rewards R_v(s, a) = sigmoid(D_v(s, a)) of all users' critics on the day's 47 state-action
pairs (labelled with the environment's own expert labelling, as in training) and asks: was d one
of u's training days? Members are training days, non-members held-out days of the same users
(`split_member_days`, 70/30 as in PateGAIL++). A random forest (scikit-learn, seeded) learns
member vs non-member from reward features on one half of the candidates and is evaluated on
the other half (stratified by user and label), so no figure is computed on the attacker's
training data. The balanced-accuracy threshold is picked on the forest's out-of-bag scores.

Features of a candidate (d, u), from R (U users x 47 pairs):
  target user's rewards R_u over the pairs: mean, std, min, max, quantiles 10/25/50/75/90;
  the mean over all users' rewards per pair: same nine statistics;
  contrast: mean R_u minus the mean of the other users, its z-score among users' day means, and
  the rank of u's day mean among all users (fraction of users below).
What it measures: leakage of the *critics*. The critics are trained on raw local data without
noise (the DP releases protect the aggregated reward the server sees, not the critic weights),
so this attack bounds what a holder of the critics learns, under both schemes alike.
Runtime: O(distinct pairs x U x hidden^2) for the rewards (the training loop's tiled scorer,
chunked over days so memory stays bounded); the forest is small.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from sklearn.ensemble import RandomForestClassifier

from models.attacks.report import (
    DEFAULT_SETTINGS,
    AttackReport,
    AttackSettings,
    attack_split,
    best_threshold,
    evaluate_attack,
)
from models.critic_store import FOLDER as CRITICS_FOLDER
from models.critic_store import UserCritics, load_user_critics
from models.critics import BatchedCritics, critic_rewards
from models.data import TrainData
from models.env import MobilityEnv
from models.features import Trajectories, expert_trajectories
from udfs.errors import InputDataError, InvalidParameterError

QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class Candidates:
    """Candidate days for membership inference: (n, 48) days, the index of the claimed user in
    the training data / critics order, and the true membership label."""

    days: np.ndarray
    users: np.ndarray
    is_member: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.days)
        if np.asarray(self.days).ndim != 2 or len(self.users) != n or len(self.is_member) != n:
            raise InvalidParameterError("days (n, 48), users (n,) and is_member (n,) must align")


def split_member_days(data: TrainData, member_fraction: float = 0.7, seed: int = 0
                      ) -> tuple[TrainData, Candidates]:
    """Per user, a random `member_fraction` of the days (at least one) become training days;
    the rest are held out. Returns the training data and all days as candidates."""
    if not 0 < member_fraction <= 1:
        raise InvalidParameterError(f"member_fraction={member_fraction} must lie in (0, 1]")
    rng = np.random.default_rng(seed)
    train, days, users, member = [], [], [], []
    for u, d in enumerate(data.days_per_user):
        perm = rng.permutation(len(d))
        k = min(len(d), max(1, int(round(member_fraction * len(d)))))
        m = np.zeros(len(d), bool)
        m[perm[:k]] = True
        train.append(d[m])
        days.append(d)
        users.append(np.full(len(d), u))
        member.append(m)
    return (TrainData(train, data.coords, list(data.user_ids)),
            Candidates(np.concatenate(days), np.concatenate(users), np.concatenate(member)))


def load_critics(source) -> BatchedCritics:
    """The trained per-user critics, from any of: a BatchedCritics (or any module mapping
    (x, users) -> (A, m) logits), a `models.critic_store.UserCritics`, an object with
    `user_critics()` (FitResult, `target.TrainedRun`), a run folder holding `critics/rank*.pt`
    (the ranks' shards, merged by user), a checkpoint folder / `latest.pt` written by
    `fit(checkpoint=...)`, a checkpoint dict, or an object with `critics_state` and
    `config` (`lira.Trained`)."""
    if isinstance(source, BatchedCritics) or (callable(source) and hasattr(source, "n_users")):
        return source
    if isinstance(source, UserCritics):
        return source.module()
    if callable(getattr(source, "user_critics", None)):
        return source.user_critics().module()
    if isinstance(source, str | Path):
        p = Path(source)
        if p.is_dir() and (p / CRITICS_FOLDER).is_dir():
            return load_user_critics(p).module()
        p = p / "latest.pt" if p.is_dir() else p
        if not p.exists():
            raise InputDataError(f"no checkpoint at {p}; train with fit(checkpoint=...)")
        source = torch.load(p, weights_only=False)
    if isinstance(source, dict):
        state, cfg = source.get("critics"), source.get("config")
    else:
        state, cfg = getattr(source, "critics_state", None), getattr(source, "config", None)
    if state is None or cfg is None:
        raise InputDataError("no critic weights found: pass critics, a checkpoint folder written "
                             "by fit(checkpoint=...), or a checkpoint dict")
    rows = source.get("rows") if isinstance(source, dict) else None
    if rows is not None and not torch.equal(torch.as_tensor(rows).cpu(),
                                            torch.arange(len(rows))):
        raise InputDataError("this checkpoint holds one rank's shard of the critics (rows "
                             f"{torch.as_tensor(rows)[:5].tolist()}...); load the run folder's "
                             "critics/ (models.critic_store.load_user_critics merges the shards)")
    cfg = cfg if isinstance(cfg, dict) else cfg.to_dict()
    n_users = state["w1"].shape[0]
    return UserCritics(state, list(range(n_users)), int(cfg["critic_hidden"]),
                       bool(cfg["spectral_norm"])).module()


def day_features(env: MobilityEnv, days: np.ndarray) -> torch.Tensor:
    """(n, 47, F) expert state-action features of real days (the training definition)."""
    return expert_trajectories(env, days).features


@torch.no_grad()
def day_rewards(critics, feats: torch.Tensor, chunk_days: int | None = None) -> torch.Tensor:
    """(n, U, 47) rewards sigmoid(D_v) of every user's critic on every day's pairs.

    BatchedCritics go through `models.critics.critic_rewards` (the training loop's tiled scorer,
    which also scores repeated pairs once: real days repeat a lot); any other module mapping a
    shared (m, F) batch to (A, m) logits is called directly. `chunk_days` bounds memory
    (default: about 16 M rewards per chunk)."""
    n, t, f = feats.shape
    n_users = critics.n_users
    step = chunk_days or max(1, (1 << 24) // max(1, n_users * t))
    users = torch.arange(n_users)
    out = []
    for i in range(0, n, step):
        x = feats[i:i + step].reshape(-1, f)
        if isinstance(critics, BatchedCritics):
            r = critic_rewards(critics, x, users)  # (U, m*t)
        else:
            r = torch.sigmoid(critics(x, users))
        out.append(r.view(n_users, -1, t).permute(1, 0, 2))
    return torch.cat(out) if out else torch.zeros(0, n_users, t)


def _stats(x: np.ndarray) -> np.ndarray:
    """(n, T) -> (n, 9): mean, std, min, max, quantiles."""
    return np.column_stack([x.mean(1), x.std(1), x.min(1), x.max(1),
                            *np.quantile(x, QUANTILES, axis=1)])


def reward_features(rewards: torch.Tensor, users: np.ndarray) -> np.ndarray:
    """(n, 21) attack features of candidate days from their (n, U, 47) reward tensor."""
    r = rewards.double().numpy()
    n, n_users, _ = r.shape
    users = np.asarray(users, dtype=np.int64)
    target = r[np.arange(n), users]  # (n, 47)
    allmean = r.mean(1)  # (n, 47)
    day_means = r.mean(2)  # (n, U)
    mine = day_means[np.arange(n), users]
    others = (day_means.sum(1) - mine) / max(1, n_users - 1)
    z = (mine - day_means.mean(1)) / (day_means.std(1) + 1e-9)
    rank = (day_means < mine[:, None]).mean(1)
    return np.column_stack([_stats(target), _stats(allmean), mine - others, z, rank])


def day_reward_features(critics, feats: torch.Tensor, users: np.ndarray,
                        chunk_days: int | None = None) -> np.ndarray:
    """(n, 21) `reward_features` of candidate days, computed chunk by chunk of days so that the
    (days x users x 47) reward tensor never exists whole."""
    n, t, _ = feats.shape
    step = chunk_days or max(1, (1 << 24) // max(1, critics.n_users * t))
    parts = [reward_features(day_rewards(critics, feats[i:i + step], step), users[i:i + step])
             for i in range(0, n, step)]
    return np.concatenate(parts) if parts else np.zeros((0, 21))


def run_membership(critics_source, coords: np.ndarray, candidates: Candidates, *,
                   settings: AttackSettings = DEFAULT_SETTINGS,
                   name: str = "whitebox_mia", chunk_days: int | None = None,
                   traj: Trajectories | None = None) -> AttackReport:
    """White-box MIA: random forest on reward features, scored on a held-out half.

    critics_source: see `load_critics`; coords: the public (L, 2) map the model was trained on;
    candidates: e.g. from `split_member_days` (user indices in the critics' order);
    traj: optional `expert_trajectories` of candidates.days (to label them once)."""
    critics = load_critics(critics_source)
    users = np.asarray(candidates.users, dtype=np.int64)
    if users.size and (users.min() < 0 or users.max() >= critics.n_users):
        raise InvalidParameterError(f"candidate user indices must lie in [0, {critics.n_users})")
    if traj is None:  # features use the map only, not the K-nearest table
        feats = day_features(MobilityEnv(coords, k_nearest=1), candidates.days)
    else:
        feats = traj.features
    x = day_reward_features(critics, feats, users, chunk_days)
    y = np.asarray(candidates.is_member, bool)
    ev = attack_split(y, users, settings.eval_fraction, settings.seed)
    rf = RandomForestClassifier(n_estimators=settings.forest_trees, min_samples_leaf=3,
                                oob_score=True, class_weight="balanced",
                                random_state=settings.seed, n_jobs=1)
    rf.fit(x[~ev], y[~ev])
    oob = np.nan_to_num(rf.oob_decision_function_[:, 1], nan=0.5)
    thr = best_threshold(oob, y[~ev])
    score = rf.predict_proba(x[ev])[:, 1]
    return evaluate_attack(name, score, y[ev], threshold=thr, settings=settings,
                           extra={"n_attack_train": int((~ev).sum()),
                                  "features": int(x.shape[1])})

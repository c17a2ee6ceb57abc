"""LiRA, the likelihood-ratio attack of Carlini et al. (2022), against the trained generator.

Candidates are all days of all users (`membership.Candidates`). The attacker trains K shadow
models with the target's training recipe (config, seeds of its own) on random halves of the
candidates: shadow k is trained on the days with `in_mask[k]` set; shadows come in
complementary pairs splitting every user's days in two, so every day is IN exactly K/2 shadows
(`shadow_masks`, balanced as in the paper) and every shadow sees every user. With K = 2 each
day has one IN and one OUT shadow: enough with the pooled variance below. A
per-example score s(model, day) is computed under the target and every shadow:
- `policy_score`: the mean log-likelihood log pi(a_t | s_t) of the day's 47 expert-labelled
  actions under the generator's policy (what a holder of the released generator can compute;
  explore/return targets come from public distributions and carry no training signal);
- `critic_score`: the mean reward of the claimed user's critic on the day (white-box variant).
Per example, Gaussians are fitted to the shadow scores: OUT (shadows not trained on it) and, in
the online variant, IN. Score of the target's s:
  online:  log N(s; mu_in, sd_in) - log N(s; mu_out, sd_out)
  offline: log Phi((s - mu_out) / sd_out)   (one-sided test that s is larger than OUT)
With few shadows, a global standard deviation (pooled over examples) replaces per-example ones
(`fixed_variance`, the paper's recommendation below 64 shadows). The report is computed on an
evaluation half of the candidates (stratified by user and label); the balanced-accuracy
threshold is chosen on the other half.
Runtime: (K + 1) trainings plus (K + 1) scoring passes over the candidates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import norm

from models.attacks.membership import Candidates, day_features, load_critics
from models.attacks.report import (
    DEFAULT_SETTINGS,
    AttackReport,
    AttackSettings,
    attack_split,
    best_threshold,
    evaluate_attack,
)
from models.data import TrainData
from models.env import MobilityEnv
from models.features import Trajectories, expert_trajectories
from models.policy import PolicyNet
from models.ppo import obs_of
from udfs.errors import InvalidParameterError


def _per_user_half(users: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n,) bool: a random half of each user's days (floor or ceil at random), so a user with
    two or more days has days on both sides."""
    _, inv, counts = np.unique(users, return_inverse=True, return_counts=True)
    order = np.lexsort((rng.random(users.size), inv))
    pos = np.empty(users.size, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos[order] = np.arange(users.size) - np.repeat(starts, counts)
    k = counts // 2 + ((counts % 2 == 1) & (rng.random(counts.size) < 0.5))
    return pos < k[inv]


def shadow_masks(candidates: Candidates, n_shadows: int, seed: int = 0) -> np.ndarray:
    """(K, n) bool IN masks. Shadows come in complementary pairs (2j, 2j+1) that split every
    user's days into random halves, so each day is IN exactly one shadow of each pair (K/2 in
    all; an odd last shadow takes one more random half) and every shadow trains on at least one
    day of every user with two or more days. A user with a single day has it IN every shadow (a
    shadow needs a day of each user): such days have no OUT shadow and `lira_report` leaves
    them out."""
    if n_shadows < 2:
        raise InvalidParameterError(f"n_shadows={n_shadows}: LiRA needs at least 2 shadows")
    rng = np.random.default_rng(seed)
    users = np.asarray(candidates.users)
    mask = np.zeros((n_shadows, users.size), bool)
    for j in range(n_shadows // 2):
        half = _per_user_half(users, rng)
        mask[2 * j], mask[2 * j + 1] = half, ~half
    if n_shadows % 2:
        mask[-1] = _per_user_half(users, rng)
    _, inv, counts = np.unique(users, return_inverse=True, return_counts=True)
    mask[:, counts[inv] == 1] = True
    return mask


def shadow_data(candidates: Candidates, mask: np.ndarray, template: TrainData) -> TrainData:
    """Training data of one shadow: the candidates with `mask` set, grouped by user index."""
    users = np.asarray(candidates.users)
    per_user = [candidates.days[mask & (users == u)] for u in range(template.n_users)]
    return TrainData(per_user, template.coords, list(template.user_ids))


@torch.no_grad()
def policy_log_likelihood(policy: PolicyNet, env: MobilityEnv, days: np.ndarray | None = None,
                          chunk: int = 1024, traj: Trajectories | None = None) -> np.ndarray:
    """(n,) mean log pi(a_t | s_t) over each day's 47 expert-labelled actions (pass the days,
    or their `expert_trajectories` as `traj` to label them once for many models)."""
    if traj is not None:
        dist = policy.distribution(obs_of(traj), env.coords_norm)
        lp = dist.log_prob(traj.flat("actions")).view(traj.actions.shape)
        return lp.mean(1).double().numpy()
    out = [policy_log_likelihood(policy, env, traj=expert_trajectories(env, days[i:i + chunk]))
           for i in range(0, len(days), chunk)]
    return np.concatenate(out) if out else np.zeros(0)


def policy_score(model, coords: np.ndarray, candidates: Candidates,
                 traj: Trajectories | None = None) -> np.ndarray:
    """LiRA score of a trained model (anything with `.policy()`, e.g. FitResult or Trained)."""
    env = MobilityEnv(coords, k_nearest=1)
    return policy_log_likelihood(model.policy().eval(), env, candidates.days, traj=traj)


def critic_score(model, coords: np.ndarray, candidates: Candidates,
                 traj: Trajectories | None = None, chunk_days: int = 512) -> np.ndarray:
    """LiRA score from per-user critics (anything `load_critics` accepts): the mean logit-scaled
    reward of the claimed user's critic on the day. Each day meets only its claimed user's
    critic (one batched call per chunk of days, the critic picked per day), not all users'."""
    critics = load_critics(model)
    feats = traj.features if traj is not None else day_features(
        MobilityEnv(coords, k_nearest=1), candidates.days)
    users = torch.as_tensor(np.asarray(candidates.users, dtype=np.int64))
    out = []
    with torch.no_grad():
        for i in range(0, len(users), chunk_days):
            d = critics(feats[i:i + chunk_days], users[i:i + chunk_days])  # (m, 47) logits
            p = torch.sigmoid(d).double().clamp(1e-6, 1 - 1e-6)
            out.append(torch.logit(p).mean(1))  # logit scaling, as the paper does for confidences
    return torch.cat(out).numpy() if out else np.zeros(0)


def lira_statistic(target: np.ndarray, shadows: np.ndarray, in_mask: np.ndarray, *,
                   online: bool = True, fixed_variance: bool | None = None) -> np.ndarray:
    """Per-example LiRA score (higher = member) from (n,) target scores, (K, n) shadow scores
    and the (K, n) IN mask of the shadows."""
    t = np.asarray(target, float)
    s = np.asarray(shadows, float)
    m = np.asarray(in_mask, bool)
    if s.shape != m.shape or s.shape[1:] != t.shape:
        raise InvalidParameterError(f"shadows {s.shape}, in_mask {m.shape}, target {t.shape}")
    k = s.shape[0]
    fixed = k < 64 if fixed_variance is None else fixed_variance

    def fit(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cnt = sel.sum(0)
        if (cnt == 0).any():
            raise InvalidParameterError("some example has no shadow on this side (IN/OUT); "
                                        "use more shadows or the offline variant")
        mu = (s * sel).sum(0) / cnt
        dev = (s - mu) ** 2 * sel
        if fixed or (cnt < 2).any():
            sd = np.full(t.shape, np.sqrt(dev.sum() / max(1, sel.sum() - t.size)))
        else:
            sd = np.sqrt(dev.sum(0) / (cnt - 1))
        return mu, np.maximum(sd, 1e-6)

    mu_out, sd_out = fit(~m)
    if not online:
        return norm.logcdf((t - mu_out) / sd_out)
    mu_in, sd_in = fit(m)
    return norm.logpdf(t, mu_in, sd_in) - norm.logpdf(t, mu_out, sd_out)


@dataclass(frozen=True)
class LiraSettings:
    """The LiRA variant: `n_shadows` shadow models, the online test (IN and OUT Gaussians) or
    the offline one (OUT only), and per-example or pooled variances (None: pooled below 64
    shadows, Carlini et al.'s advice)."""

    n_shadows: int = 4
    online: bool = True
    fixed_variance: bool | None = None


DEFAULT_LIRA = LiraSettings()


def lira_report(target_scores: np.ndarray, shadow_scores: np.ndarray, in_mask: np.ndarray,
                candidates: Candidates, *, lira: LiraSettings = DEFAULT_LIRA,
                settings: AttackSettings = DEFAULT_SETTINGS, name: str = "lira") -> AttackReport:
    """LiRA report from precomputed scores (n,) target, (K, n) shadows and their IN mask
    (`lira.n_shadows` is not read: the mask says K). Candidates with no OUT shadow (or, online,
    no IN shadow) cannot be scored and are left out before the split (`extra["n_unscored"]`)."""
    online = lira.online
    m = np.asarray(in_mask, bool)
    ok = (~m).any(0) & (m.any(0) if online else True)
    stat = lira_statistic(np.asarray(target_scores)[ok], np.asarray(shadow_scores)[:, ok],
                          m[:, ok], online=online, fixed_variance=lira.fixed_variance)
    y = np.asarray(candidates.is_member, bool)[ok]
    ev = attack_split(y, np.asarray(candidates.users)[ok], settings.eval_fraction, settings.seed)
    thr = best_threshold(stat[~ev], y[~ev])
    return evaluate_attack(name, stat[ev], y[ev], threshold=thr, settings=settings,
                           extra={"n_shadows": int(m.shape[0]),
                                  "variant": "online" if online else "offline",
                                  "n_unscored": int((~ok).sum())})


@dataclass(frozen=True)
class ShadowTrainer:
    """How `run_lira` trains its shadows: `train(data, seed)` on `template`'s users, each
    shadow with its share of the candidate days (`shadow_data`)."""

    train: Callable[[TrainData, int], object]
    template: TrainData


def run_lira(shadows: ShadowTrainer | list, score: Callable[[object, Candidates], np.ndarray],
             target_model, candidates: Candidates, *, lira: LiraSettings = DEFAULT_LIRA,
             settings: AttackSettings = DEFAULT_SETTINGS, name: str = "lira"
             ) -> tuple[AttackReport, dict]:
    """Train K shadows with `shadows` (shadow k on `shadow_masks(...)[k]`, seed
    seed + 1000 + k), score the target and every shadow with `score(model, candidates)`, report
    LiRA on the evaluation half. Returns (report, {"shadows", "in_mask", "scores", "target"});
    pass the returned shadows back as `shadows` (same K and seed) to reuse them with another
    score, or call `lira_report` on the returned scores for the other variant."""
    n_shadows, seed = lira.n_shadows, settings.seed
    mask = shadow_masks(candidates, n_shadows, seed)
    if isinstance(shadows, ShadowTrainer):
        shadow_models = [shadows.train(shadow_data(candidates, mask[k], shadows.template),
                                       seed + 1000 + k) for k in range(n_shadows)]
    else:
        shadow_models = list(shadows)
    if len(shadow_models) != n_shadows:
        raise InvalidParameterError(f"got {len(shadow_models)} shadow models for K={n_shadows}")
    sh = np.stack([score(mdl, candidates) for mdl in shadow_models])
    tg = score(target_model, candidates)
    rep = lira_report(tg, sh, mask, candidates, lira=lira, settings=settings, name=name)
    return rep, {"shadows": shadow_models, "in_mask": mask, "scores": sh, "target": tg}


class Trained:
    """A trained model as the attacks see it: the FitResult plus the critics' weights (kept
    for callers of the earlier API; FitResult now carries them itself)."""

    def __init__(self, fit_result, critics_state: dict):
        self.fit_result, self.critics_state = fit_result, critics_state
        self.config = fit_result.config

    def policy(self) -> PolicyNet:
        return self.fit_result.policy()


def fit_with_critics(config, data: TrainData, workdir=None) -> Trained:
    """models.train.fit; with `workdir`, also a checkpoint there (saved once, at the end)."""
    import dataclasses
    from pathlib import Path

    from models.checkpoint import Checkpointing
    from models.train import fit

    if workdir is None:
        res = fit(config, data)
    else:
        cfg = dataclasses.replace(config, checkpoint_every=max(1, config.rounds))
        res = fit(cfg, data, checkpoint=Checkpointing(Path(workdir)))
    return Trained(res, res.critics_state)


def fit_trainer(config, workdir=None, blocks: int = 1) -> Callable[[TrainData, int], object]:
    """`train(data, seed)` for run_lira: the target's recipe (`blocks` rollout blocks, as the
    target ran) with another seed; with `workdir`, each shadow checkpoints in its own folder."""
    import dataclasses
    from pathlib import Path

    from models.train import fit

    def train(data: TrainData, seed: int):
        cfg = dataclasses.replace(config, seed=seed)
        if workdir is None:
            return fit(cfg, data, blocks=blocks)
        return fit_with_critics(cfg, data, Path(workdir) / f"shadow_{seed}")

    return train

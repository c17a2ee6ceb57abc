"""The membership attacks on one trained model, as `trajpriv evaluate --attacks` runs them.

Why one function: the Spark job (jobs/evaluate/membership.py) and the bench both need the same
sequence, with the candidates labelled once and the shadow models trained once and reused:
  1. white-box MIA on the target's critics (`membership.run_membership`), `whitebox_mia`;
  2. K shadows of the target's recipe on complementary random halves of the candidates
     (`lira.shadow_masks`), scored with the policy's mean log-likelihood of each day's actions:
     LiRA online (`lira_policy`) and offline, OUT shadows only (`lira_policy_offline`);
  3. the same shadows scored with the claimed user's critic (`lira_critic`).
Every report is computed on an evaluation half of the candidates the attacker did not fit on.
Runtime: K trainings of the recipe on the candidates' users, plus the white-box rewards
(days x users x 47 critic evaluations) and K + 1 cheap scoring passes per score.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from models.attacks.lira import (
    LiraSettings,
    ShadowTrainer,
    critic_score,
    lira_report,
    policy_score,
    run_lira,
)
from models.attacks.membership import Candidates, run_membership
from models.attacks.report import DEFAULT_SETTINGS, AttackReport, AttackSettings
from models.data import TrainData
from models.env import MobilityEnv
from models.features import expert_trajectories

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttackPlan:
    """Which membership attacks `membership_attacks` runs: the white-box MIA, and LiRA with
    `n_shadows` shadow models (0: no LiRA)."""

    whitebox: bool = True
    n_shadows: int = 2


DEFAULT_PLAN = AttackPlan()


def membership_attacks(target, coords: np.ndarray, candidates: Candidates,
                       template: TrainData, train: Callable[[TrainData, int], object] | None, *,
                       plan: AttackPlan = DEFAULT_PLAN, settings: AttackSettings = DEFAULT_SETTINGS
                       ) -> tuple[list[AttackReport], dict[str, float]]:
    """(reports, seconds per part). `target`: anything with `.policy()` and critics
    (`membership.load_critics`); `candidates.users` index `template`'s users and the target's
    critics alike; `train(data, seed)` trains a shadow (None or plan.n_shadows = 0: no LiRA)."""
    n_shadows = plan.n_shadows
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    traj = expert_trajectories(MobilityEnv(coords, k_nearest=1), candidates.days)  # label once
    reports: list[AttackReport] = []
    if plan.whitebox:
        reports.append(run_membership(target, coords, candidates, settings=settings, traj=traj))
        seconds["whitebox"] = round(time.perf_counter() - t0, 3)
        log.info("white-box MIA: AUC %.3f (%.1fs)", reports[-1].auc, seconds["whitebox"])
    if train is None or n_shadows == 0:
        return reports, seconds
    t1 = time.perf_counter()
    online = LiraSettings(n_shadows=n_shadows, online=True)
    lira_p, extra = run_lira(ShadowTrainer(train, template),
                             lambda m, c: policy_score(m, coords, c, traj), target, candidates,
                             lira=online, settings=settings, name="lira_policy")
    offline = lira_report(extra["target"], extra["scores"], extra["in_mask"], candidates,
                          lira=LiraSettings(n_shadows=n_shadows, online=False),
                          settings=settings, name="lira_policy_offline")
    lira_c, _ = run_lira(extra["shadows"], lambda m, c: critic_score(m, coords, c, traj),
                         target, candidates, lira=online, settings=settings, name="lira_critic")
    seconds["lira"] = round(time.perf_counter() - t1, 3)
    log.info("LiRA (%d shadows): policy AUC %.3f (offline %.3f), critic AUC %.3f (%.1fs)",
             n_shadows, lira_p.auc, offline.auc, lira_c.auc, seconds["lira"])
    return [*reports, lira_p, offline, lira_c], seconds

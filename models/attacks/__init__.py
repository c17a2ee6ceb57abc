"""Attacks on our own output (docs/architecture.md section 7): every privacy claim comes with an
attack figure.

- `membership.run_membership`: white-box membership inference on the per-user critics;
- `lira.run_lira`: LiRA (Carlini et al. 2022) with shadow models, against the generator's policy
  (`lira.policy_score`) or the critics (`lira.critic_score`);
- `home.home_reidentification`: share of users whose home, inferred from published data, lies
  within 1 km of the true home;
- `report`: AUC, balanced accuracy, TPR at 1% FPR with bootstrap intervals (`AttackReport`);
- `target.TrainedRun`: a Spark train run read back from its artefacts (policy, critics merged
  from the ranks' shards, recipe), `target.shadow_trainer` its shadow models;
- `suite.membership_attacks`: white-box MIA and LiRA (policy and critic) on one trained model.
Pure numpy / torch / scikit-learn: no pyspark, nothing from jobs/.
"""

from models.attacks.home import home_coverage, home_reidentification, infer_homes, true_homes
from models.attacks.lira import (
    LiraSettings,
    ShadowTrainer,
    Trained,
    critic_score,
    fit_trainer,
    fit_with_critics,
    lira_report,
    lira_statistic,
    policy_score,
    run_lira,
)
from models.attacks.membership import (
    Candidates,
    load_critics,
    reward_features,
    run_membership,
    split_member_days,
)
from models.attacks.report import AttackReport, AttackSettings, evaluate_attack
from models.attacks.suite import AttackPlan, membership_attacks
from models.attacks.target import TrainedRun, shadow_trainer

__all__ = [
    "AttackPlan", "AttackReport", "AttackSettings", "Candidates", "LiraSettings", "ShadowTrainer",
    "Trained", "TrainedRun", "critic_score", "evaluate_attack",
    "fit_trainer", "fit_with_critics", "home_coverage", "home_reidentification", "infer_homes",
    "lira_report", "lira_statistic", "load_critics", "membership_attacks", "policy_score",
    "reward_features", "run_lira", "run_membership", "shadow_trainer", "split_member_days",
    "true_homes",
]

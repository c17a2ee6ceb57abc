"""What a train run may publish, for every method (the learned stage and `markov`): one home,
imported by jobs/train/stage.py and jobs/train/markov.py alike (neither imports the other)."""

from __future__ import annotations

# Every figure a train run publishes (trajpriv_pub.runs, the console line) and why it may be:
# "dp" a DP release or its post-processing, "config" a setting, "public" fixed by the
# neighbouring relation (the number of training users N: replace-one keeps it, and every
# release's sensitivity 1/N is computed from it), "time" a timing. Anything else goes to
# trusted.json. tests/jobs/test_train_spark.py scans the published row against this.
PUBLIC_FIGURES = {
    "epsilon": "dp", "delta": "config", "basic_epsilon": "dp", "accountant": "config",
    "target_epsilon": "config", "privacy_model": "config", "epsilon_covers": "config",
    "local_epsilon_per_round": "dp", "method": "config", "critic": "config", "noise": "config",
    "pilot": "config", "beta": "config", "mechanism": "config", "sampling": "config",
    "rounds_done": "dp", "stopped_reason": "dp",
    "rounds_planned": "config", "pairs_per_round": "config", "destination": "config",
    "resumed_at_round": "config", "num_processes": "config", "blocks": "config",
    "users": "public", "reward_mean": "dp", "epsilon_by_round": "dp", "warnings": "config",
    "stage_s": "time", "train_launch_s": "time", "seconds_per_round": "time",
    "launch_overhead_s": "time", "artefacts": "config",
}

COVERS = {
    "central": "user-level: the policy, the start distribution, the synthetic days and every "
               "published figure, against replacing one user's whole data; the server (the "
               "ranks) is trusted",
    "local": "local, per user: what each user's reports reveal to the server about that user's "
             "data (rewards and start report perturbed on the user's side before any sum); "
             "epsilon is per user, composed over the rounds",
}

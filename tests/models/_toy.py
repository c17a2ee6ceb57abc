"""Small synthetic map, users and model for fast model tests (models.data.home_work_population)."""

from __future__ import annotations

from models.config import TrainConfig
from models.data import TrainData, home_work_population

# The tiny model of the distributed, critic-store, Spark-training and fault tests: seconds a run.
TINY_FIELDS = {"episodes_per_round": 8, "k_nearest": 10, "critic_hidden": 8, "critic_batch": 16,
               "critic_steps": 2, "policy_hidden": 16, "loc_dim": 4, "slot_dim": 4,
               "ppo_epochs": 2, "ppo_minibatch": 128, "beta": 0.5, "participation": 0.8}


def toy_data(n_users: int = 5, n_loc: int = 60, days: int = 4, seed: int = 0) -> TrainData:
    return home_work_population(n_users, n_loc, days, seed)


def tiny_config(**overrides) -> TrainConfig:
    """TINY_FIELDS with 3 rounds at noise 0.5 and seed 7, unless overridden."""
    return TrainConfig(**{**TINY_FIELDS, "rounds": 3, "noise": 0.5, "seed": 7, **overrides})


def tiny_overrides(seed: int, **overrides) -> list[str]:
    """TINY_FIELDS and `seed` as a stage config's `--set train.<field>=<value>` overrides."""
    fields = {"seed": seed, **TINY_FIELDS, **overrides}
    return [f"train.{k}={v}" for k, v in fields.items()]

"""Reward aggregation schemes, one per module: uniform Laplace or Gaussian (PateGAIL),
sensitivity-aware Laplace or Gaussian (PateGAIL++), LDP reward (users perturb their own
rewards), each a `RewardScheme` built through `models.aggregation.registry`."""

from models.aggregation.base import LocalRewards, RewardScheme
from models.aggregation.ldp import LdpReward
from models.aggregation.sensitivity import SensitivityAware, SensitivityAwareGaussian
from models.aggregation.uniform import UniformGaussian, UniformLaplace

__all__ = ["LdpReward", "LocalRewards", "RewardScheme", "SensitivityAware",
           "SensitivityAwareGaussian", "UniformGaussian", "UniformLaplace"]

"""Reward aggregation schemes, one per module: uniform Laplace or Gaussian (PateGAIL),
sensitivity-aware Laplace or Gaussian (PateGAIL++), LDP reward (users perturb their own
rewards)."""

from models.aggregation.ldp import LdpReward
from models.aggregation.sensitivity import SensitivityAware, SensitivityAwareGaussian
from models.aggregation.uniform import UniformGaussian, UniformLaplace

__all__ = ["LdpReward", "SensitivityAware", "SensitivityAwareGaussian", "UniformGaussian",
           "UniformLaplace"]

"""Reward aggregation schemes, one per module: uniform Laplace (PateGAIL), sensitivity-aware
(PateGAIL++), LDP reward (users perturb their own rewards)."""

from models.aggregation.ldp import LdpReward
from models.aggregation.sensitivity import SensitivityAware
from models.aggregation.uniform import UniformLaplace

__all__ = ["LdpReward", "SensitivityAware", "UniformLaplace"]

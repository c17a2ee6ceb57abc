"""The registry of reward schemes: one builder per (config `scheme`, `mechanism`) pair.

The keys are the scheme names of `models.config.SCHEMES` (the `train.method` names of the
pipeline config); each maps the mechanism names the scheme offers to a builder from the
training config. The trainer builds its scheme here and calls `release` on it whatever it is
(`models.aggregation.base.RewardScheme`).
"""

from __future__ import annotations

from collections.abc import Callable

from models.aggregation.base import RewardScheme
from models.aggregation.ldp import LdpReward
from models.aggregation.sensitivity import SensitivityAware, SensitivityAwareGaussian
from models.aggregation.uniform import UniformGaussian, UniformLaplace
from models.config import SCHEMES, TrainConfig
from udfs.errors import ConfigError

Builder = Callable[[TrainConfig], RewardScheme]

REWARD_SCHEMES: dict[str, dict[str, Builder]] = {
    "pategail": {
        "laplace": lambda c: UniformLaplace(c.noise, c.beta),
        "gaussian": lambda c: UniformGaussian(c.noise, c.beta, c.delta),
    },
    "pategail++": {
        "laplace": lambda c: SensitivityAware(c.noise, c.pilot_fraction, c.delta_prime, c.beta,
                                              c.pilot),
        "gaussian": lambda c: SensitivityAwareGaussian(c.noise, c.delta_prime, c.beta, c.delta),
    },
    "ldp": {
        "laplace": lambda c: LdpReward(c.noise, False, c.pilot_fraction, c.delta_prime, c.beta,
                                       c.pilot),
    },
    "ldp++": {
        "laplace": lambda c: LdpReward(c.noise, True, c.pilot_fraction, c.delta_prime, c.beta,
                                       c.pilot),
    },
}
if tuple(REWARD_SCHEMES) != SCHEMES:  # the config's names and the registry's are one list
    raise ImportError(f"reward scheme registry {tuple(REWARD_SCHEMES)} != config {SCHEMES}")


def make_scheme(cfg: TrainConfig) -> RewardScheme:
    """The reward scheme of `cfg` (its `scheme` with its `mechanism`)."""
    builders = REWARD_SCHEMES[cfg.scheme]
    if cfg.mechanism not in builders:
        raise ConfigError(f"scheme {cfg.scheme} offers mechanism {', '.join(builders)}; got "
                          f"{cfg.mechanism}")
    return builders[cfg.mechanism](cfg)

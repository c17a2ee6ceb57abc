"""Training configuration (a frozen dataclass validated on construction).

The Spark job builds it from the pydantic/YAML config; a wrong value fails here with a message
naming the field (ConfigError).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from udfs.errors import ConfigError

SCHEMES = ("pategail", "pategail++", "ldp", "ldp++")


@dataclass(frozen=True)
class TrainConfig:
    seed: int = 0
    rounds: int = 100
    scheme: str = "pategail++"  # pategail | pategail++ | ldp | ldp++ (LDP without/with weights)
    noise: float = 0.1  # lambda: Laplace scale of the matched uniform scheme
    pilot_fraction: float = 0.1
    delta_prime: float = 0.1
    beta: float = 0.0  # dynamics compensation weight; 0 disables (no variance release)
    participation: float = 1.0
    # environment
    k_nearest: int = 200
    explore_exponent: float = 0.6
    episodes_per_round: int = 64
    # critics
    critic_kind: str = "wgan"  # wgan | bce
    lambda_gp: float = 10.0
    spectral_norm: bool = False
    critic_hidden: int = 32
    critic_lr: float = 1e-3
    critic_steps: int = 2
    critic_batch: int = 64
    score_chunk_elems: int = 1 << 24
    # policy / PPO
    loc_dim: int = 16
    slot_dim: int = 8
    policy_hidden: int = 64
    policy_lr: float = 3e-3
    ppo_epochs: int = 4
    ppo_minibatch: int = 512
    clip: float = 0.2
    gamma: float = 0.99
    gae_lambda: float = 0.95
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    # privacy
    delta: float = 1e-5
    target_epsilon: float | None = None
    accountant: str = "rdp"  # rdp | pld
    start_hist_epsilon: float = 1.0
    # bookkeeping
    checkpoint_every: int = 1

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"train config field {name!r}={getattr(self, name)!r}: {why}")

        if self.scheme not in SCHEMES:
            raise bad("scheme", f"must be one of {SCHEMES}")
        if self.critic_kind not in ("wgan", "bce"):
            raise bad("critic_kind", "must be 'wgan' or 'bce'")
        if self.accountant not in ("rdp", "pld"):
            raise bad("accountant", "must be 'rdp' or 'pld'")
        for name in ("noise", "pilot_fraction", "delta_prime", "critic_lr", "policy_lr", "clip",
                     "start_hist_epsilon"):
            if not 0 < getattr(self, name) < math.inf:
                raise bad(name, "must be finite and > 0")
        for name in ("rounds", "episodes_per_round", "k_nearest", "critic_hidden", "critic_steps",
                     "critic_batch", "ppo_epochs", "ppo_minibatch", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if not 0 < self.participation <= 1:
            raise bad("participation", "must lie in (0, 1]")
        if not 0 < self.delta < 1:
            raise bad("delta", "must lie in (0, 1)")
        if self.beta < 0 or self.lambda_gp < 0:
            raise bad("beta" if self.beta < 0 else "lambda_gp", "must be >= 0")
        if self.target_epsilon is not None and not 0 < self.target_epsilon < math.inf:
            raise bad("target_epsilon", "must be finite and > 0, or None")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown train config field(s) {unknown}; known: {sorted(known)}")
        return cls(**d)

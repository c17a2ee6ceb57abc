"""The sections of synthesis: training (`train`, with the DP Markov release's `train.markov`)
and sampling (`synthesize`).

The `train` section is generated from the core's `models.config.TrainConfig`: every core field
is a typed key with the core's default, so a default has one home (the core) unless the section
declares the field itself (`_TRAIN_OWN`, each with its reason).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Any, Literal

from pydantic import Field, create_model, field_validator, model_validator

from jobs.config.types import Finite, Section
from models.config import MECHANISMS as CORE_MECHANISMS
from models.config import MarkovSettings as CoreMarkovSettings
from models.config import TrainConfig as CoreTrainConfig
from udfs.errors import ConfigError

# The Markov release takes the noises the core offers (`models.config.MECHANISMS`).
MarkovMechanism = Literal[CORE_MECHANISMS]  # type: ignore[valid-type]


def _core_train_fields() -> dict[str, Any]:
    """The fields of `models.config.TrainConfig` as pydantic fields (type, default), so the
    `train` section holds every model setting typed, with the core's default: one home for
    each default, no free-form dict. The section declares a few itself (below)."""
    hints = typing.get_type_hints(CoreTrainConfig)
    return {f.name: (hints[f.name], f.default) for f in dataclasses.fields(CoreTrainConfig)
            if f.name not in _TRAIN_OWN}


# Core fields the `train` section declares itself: a user-facing name (method <- scheme, critic
# <- critic_kind), a bound checked for every method, the Markov one included (rounds, with the
# core's default), the product's default where it differs from the core's (target epsilon: the
# core has none), or a different meaning (seed: unset = derived from the run key). The Markov
# release's settings of private pre-training come from the `train.markov` section (one home for
# them, shared with method `markov`): `_TRAIN_MARKOV`.
_TRAIN_MARKOV = {"markov_mechanism": "mechanism", "markov_cell_depth": "cell_depth",
                 "markov_tau": "tau", "markov_smooth": "smooth"}
_TRAIN_OWN = {"scheme", "critic_kind", "rounds", "target_epsilon", "seed", *_TRAIN_MARKOV}
_TRAIN_RENAMED = {"method": "scheme", "critic": "critic_kind"}

_TrainModelFields = create_model("_TrainModelFields", __base__=Section, **_core_train_fields())


class MarkovSettings(Section):
    """The DP Markov model's release (`models.markov`; method `markov`, and the Markov release
    that private pre-training starts from): the noise (`gaussian`, Gaussian per release composed
    under the accountant; `laplace`, pure epsilon), the k-d depth of the public move cells, the
    soft threshold of the hierarchies and transition rows (in noise sds) and the pooling of the
    action table over neighbouring slots. All are utility choices: the guarantee holds for any."""

    mechanism: MarkovMechanism = CoreMarkovSettings.mechanism
    cell_depth: int = Field(CoreMarkovSettings.cell_depth, ge=1, le=16)
    tau: float = Field(CoreMarkovSettings.tau, ge=0, allow_inf_nan=False)
    smooth: int = Field(CoreMarkovSettings.smooth, ge=0, le=46)

    def core(self) -> CoreMarkovSettings:
        """The core's value object of these settings (what `models.markov` takes)."""
        return CoreMarkovSettings(**self.model_dump())


class Markov2Settings(Section):
    """What the adaptive second-order DP Markov model (`models.markov2`; method `markov2`, study
    and bench only) adds to `train.markov`'s settings: the second-order table's share of the
    budget (the first-order releases keep theirs times 1 - share) and the threshold, in sds of
    a row's noisy total, above which a move uses its (cell before, current cell) row instead of
    the first-order one. Utility choices: the guarantee holds for any."""

    # the second-order release's share of the budget (0.2: 12% more noise sd on the others)
    second_share: float = Field(0.2, gt=0, lt=1)
    # a row is used where its noisy total exceeds this many of its noise sds (3: a row of pure
    # noise passes with probability 0.00135)
    threshold: float = Field(3.0, ge=0, allow_inf_nan=False)


class TrainConfig(_TrainModelFields):
    """PateGAIL / PateGAIL++ training on Spark (docs/architecture.md section 6).

    Every field of `models.config.TrainConfig` is a typed field here (episodes_per_round,
    critic_hidden, beta, ...; the core's docs and defaults), validated by the core's own checks
    at load; `model_config_of` hands the core its typed config. `blocks` cuts each round's
    episodes into equal blocks with their own random streams: results do not depend on
    `num_processes` as long as `blocks` stays the same (it must be a multiple of num_processes
    and divide episodes_per_round).
    """

    enabled: bool = True
    # pategail (uniform Laplace) by default: the sensitivity-aware pategail++ has not measured
    # better at equal epsilon (README, training section)
    # markov: the DP Markov chain (models/markov.py), one release of normalised per-user counts
    # a name of jobs.methods' registry (built in: markov, pategail, pategail++, ldp, ldp++; the
    # study's markov2 is not published)
    method: str = "pategail"
    markov: MarkovSettings = Field(default_factory=MarkovSettings)
    markov2: Markov2Settings = Field(default_factory=Markov2Settings)
    # true: the noise is calibrated at run time so that all `rounds` fit `target_epsilon` for
    # the users trained (the run's log says the noise); false: `noise` as set, and a run whose
    # rounds do not all fit says before it starts after which round it will stop
    noise_for_target: bool = False
    # critic per user: bce (cross-entropy discriminator, PateGAIL's) or wgan (WGAN-GP,
    # PateGAIL++'s); unset: the method's paper
    critic: Literal["bce", "wgan"] | None = None
    target_epsilon: Finite = Field(10.0, gt=0)
    rounds: int = Field(CoreTrainConfig.rounds, ge=1)
    # the training seed; unset: derived by HMAC from the raw zone's run key, the dataset and the
    # top-level seed (jobs.train.stage.training_seed)
    seed: int | None = None
    num_processes: int = Field(1, ge=1)
    use_gpu: bool = False  # NCCL, one GPU per rank (cuda:LOCAL_RANK); checked at start
    holdout_fraction: float = Field(0.3, gt=0, lt=1)
    blocks: int = Field(4, ge=1)
    # TorchDistributor local_mode: true = torchrun on the driver host; false = one barrier Spark
    # task per rank (needs num_processes free task slots, checked at start on a local master)
    local_mode: bool = True
    timeout_s: Finite = Field(1800.0, gt=0)  # collective timeout of the process group

    @field_validator("method")
    @classmethod
    def _registered(cls, value: str) -> str:
        from jobs.methods import check_trainable

        return check_trainable(value)

    @model_validator(mode="after")
    def _core_checks(self) -> TrainConfig:
        """The core's own validation (one home for the rules), and the block layout. The
        Markov method trains no policy: the learned methods' settings do not apply to it."""
        if not self.learned:
            return self
        mc = self.model_config_of(seed=0)
        if mc.episodes_per_round % self.blocks or self.blocks % self.num_processes:
            raise ValueError(f"blocks={self.blocks} must divide episodes_per_round "
                             f"({mc.episodes_per_round}) and be a multiple of num_processes "
                             f"({self.num_processes})")
        return self

    @property
    def learned(self) -> bool:
        """A policy trained by imitation learning (TorchDistributor ranks), not a Markov fit."""
        from jobs.methods import get

        return get(self.method).learned

    def model_config_of(self, seed: int, method: str | None = None):
        """The core's typed `models.config.TrainConfig` of this section, with `seed`; `method`
        (a learned one) in place of `train.method` (the synthesis study trains several)."""
        method = method or self.method
        from jobs.methods import get

        if not get(method).learned:
            raise ConfigError(f"train.method={method} trains no policy: it has no core "
                              "training config")
        values = {name: getattr(self, name) for name in _core_train_fields()}
        values.update({core: getattr(self, own) for own, core in _TRAIN_RENAMED.items()})
        values.update({core: getattr(self.markov, own) for core, own in _TRAIN_MARKOV.items()})
        if method != self.method:  # another method's paper critic, unless one is set
            values.update(scheme=method, critic_kind=self.critic)
        values.update(rounds=self.rounds, target_epsilon=self.target_epsilon, seed=seed)
        try:
            return CoreTrainConfig(**values)
        except ConfigError as exc:  # the core names its field; say it as the config key
            raise ValueError(re.sub(r"^train config field '(\w+)'=", r"train.\1=", str(exc))
                             ) from None


class SynthesizeConfig(Section):
    enabled: bool = True
    n_days: int = Field(500, ge=1)
    partitions: int = Field(4, ge=1)

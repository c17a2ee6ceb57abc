"""The sections of what is released and charged: the privacy unit and budget, the metadata of
published rows, the one published collection and the trusted-zone study that chooses it.

Choices and defaults come from the LDP core: mechanism names from its registry
(`udfs.collect`), the mechanism options' defaults from `udfs.collect.MechanismOptions`, the
combiners and granularities from the modules that implement them, the publication choices from
the release kernel. A new mechanism or option is then a change of the core alone.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import Field, field_validator, model_validator

from jobs.config.types import Epsilon, Section, check_epsilon, check_window
from udfs.collect import MECHANISMS, PUBLISHED_MECHANISMS, MechanismOptions
from udfs.collect_kernel import PUBLISH_CHOICES, PublishOptions
from udfs.space import GRANULARITIES
from udfs.tp import COMBINERS

# The names come from the one mechanism registry (`udfs.collect`).
Mechanism = Literal[MECHANISMS]  # type: ignore[valid-type]
PublishedMechanism = Literal[PUBLISHED_MECHANISMS]  # type: ignore[valid-type]
Granularity = Literal[("auto", *GRANULARITIES)]  # type: ignore[valid-type]
Combiner = Literal[COMBINERS]  # type: ignore[valid-type]
_OPTIONS = MechanismOptions()


class PrivacyConfig(Section):
    """The one privacy unit and budget every release charges (docs/architecture.md section 4).

    `unit: user`: neighbouring datasets differ in one user's data. A user may spend at most
    `budget` (epsilon) per window of `window_days` days, summed over every collection release
    of the user's trajectories dated in that window (sequential composition); training records
    its (epsilon, delta) per trained user in the same ledger (`trajpriv budget` shows totals).
    The default, 10 per 7 days, is a budget a data protection officer can sign.
    """

    unit: Literal["user"] = "user"
    budget: float = Field(10.0, gt=0)
    window_days: int = Field(7, ge=1)

    @field_validator("budget")
    @classmethod
    def _finite_budget(cls, value: float) -> float:
        import math

        if not math.isfinite(value):
            raise ValueError(f"must be finite (an infinite budget refuses nobody), got {value}")
        return value


class PublishConfig(Section):
    """What a published row reveals beyond the LDP guarantee, and settings that reduce it.

    `date`: the trajectory's day (`day`), the Monday of its week (`week`) or nothing (`none`).
    `traj_key`: `stable` (one key per trajectory whatever the release: a --fresh release links
    to the earlier one) or `per_release` (a new key in every release). `pseudonym`: `stable`
    (one per user: every release of a user links), `per_window` (rotated every budget window:
    links only within a window) or `none` (no user column: rows of a user cannot be grouped).
    """

    # Choices and defaults are the release kernel's (`udfs.collect_kernel.PublishOptions`).
    date: Literal[PUBLISH_CHOICES["date"]] = PublishOptions.date  # type: ignore[valid-type]
    traj_key: Literal[PUBLISH_CHOICES["traj_key"]] = (  # type: ignore[valid-type]
        PublishOptions.traj_key)
    pseudonym: Literal[PUBLISH_CHOICES["pseudonym"]] = (  # type: ignore[valid-type]
        PublishOptions.pseudonym)
    # The OS group of analysts: with one set, the published zone's folders and files are
    # group-readable (0750/0640) and everything else under the root stays its owner's only.
    group: str | None = None


class CollectConfig(Section):
    """The published LDP collection: one mechanism at one epsilon (docs/architecture.md section 4).

    Each trajectory dated in the collection window (`window_start`..`window_end`, inclusive;
    None = unbounded; the DAG passes its data interval) is released once under this setting,
    charged `epsilon` to its user's budget (`privacy:`); a trajectory already released under
    the same setting is skipped (spends nothing) unless `trajpriv collect --fresh`. Choosing
    the setting is a study's job (`study:`), whose output stays in the trusted zone.
    """

    mechanism: PublishedMechanism = "atp"
    epsilon: Epsilon = 2.5
    granularity: Granularity = _OPTIONS.granularity
    r_dir: float = Field(_OPTIONS.r_dir, gt=0, lt=1)
    window_start: dt.date | None = None
    window_end: dt.date | None = None
    calibrated: bool = _OPTIONS.calibrated  # ATP radius calibration (post-processing either way)
    # How TP/ATP join their two copies (post-processing either way; `udfs.tp.combine`):
    # medoid (the default; bench/reproduce_ldp.py compares them), copy_medoid, paper (Eq. 7 as
    # written) or midpoint.
    combiner: Combiner = _OPTIONS.combiner
    max_len: int | None = Field(None, ge=1)  # refuse longer trajectories (None: no limit)

    @model_validator(mode="after")
    def _window_ordered(self) -> CollectConfig:
        check_window(self.window_start, self.window_end)
        return self

    def window_text(self) -> str:
        """The collection window in words, as a log line says it ('all dates' when unset)."""
        start, end = self.window_start, self.window_end
        if start is None and end is None:
            return "all dates"
        if end is None:
            return f"from {start}"
        return f"{start} to {end}" if start is not None else f"up to {end}"


class StudyConfig(Section):
    """A sweep of settings to choose the published one, run in the trusted zone (`trajpriv
    study`). Its perturbed data and raw-based utility figures (NE, PRQ, ACD, Kendall tau)
    land in `trajpriv_trusted.*`, never in `trajpriv_pub`, and it charges no budget: nothing
    of it is released. `max_trajectories` caps the sample it perturbs (None: every
    trajectory of the collection window)."""

    enabled: bool = True
    mechanisms: list[Mechanism] = Field(default_factory=lambda: ["atp", "tp", "exp", "uniform"])
    epsilons: list[float] = Field(default_factory=lambda: [1.0, 4.0, 10.0])
    prq_km: list[float] = Field(default_factory=lambda: [0.5, 1.0, 2.0])
    acd_top_fraction: float = Field(0.1, gt=0, le=1)
    max_trajectories: int | None = Field(None, ge=1)
    # The synthesis study: each method trained on the training split at train.target_epsilon,
    # its days scored against the held-out days (trusted zone; nothing released or charged).
    # [] turns it off. `synthesis_seeds` trainings per method (mean and spread);
    # `synthesis_max_users` caps the training users (a keyed-hash sample; None: all).
    # names of jobs.methods' registry (built in: markov, markov2, pategail, pategail++, ldp,
    # ldp++)
    synthesis_methods: list[str] = Field(
        default_factory=lambda: ["markov", "markov2", "pategail", "pategail++"])
    synthesis_seeds: int = Field(1, ge=1, le=20)
    synthesis_max_users: int | None = Field(2000, ge=2)

    @field_validator("synthesis_methods")
    @classmethod
    def _registered(cls, value: list[str]) -> list[str]:
        from jobs.methods import check

        return [check(name) for name in value]

    @field_validator("prq_km")
    @classmethod
    def _prq_positive(cls, value: list[float]) -> list[float]:
        import math

        bad = [v for v in value if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ValueError(f"each PRQ radius must be finite and > 0 km, got {bad}")
        return value

    @field_validator("epsilons")
    @classmethod
    def _epsilons(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("at least one epsilon is needed")
        return [check_epsilon(v) for v in value]

    @model_validator(mode="after")
    def _unique(self) -> StudyConfig:
        if len(set(self.mechanisms)) != len(self.mechanisms):
            raise ValueError(f"mechanisms has duplicates: {self.mechanisms}")
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"epsilons has duplicates: {self.epsilons}")
        if len(set(self.synthesis_methods)) != len(self.synthesis_methods):
            raise ValueError(f"synthesis_methods has duplicates: {self.synthesis_methods}")
        return self

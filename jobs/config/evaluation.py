"""The sections of what the pipeline says about its output: `evaluate` (utility figures and
the attacks on the project's own output) and `report`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from jobs.attack_kinds import ATTACK_KINDS
from jobs.config.types import Section

# The kinds come from the one attack registry (`jobs.attack_kinds`).
AttackKind = Literal[ATTACK_KINDS]  # type: ignore[valid-type]


class EvaluateConfig(Section):
    """`attacks` (or `trajpriv evaluate --attacks`) runs `attack_kinds` on the dataset's latest
    results: home re-identification on the published points; white-box MIA and LiRA against the
    train run(s) whose synthetic days are evaluated, with that run's training days as members
    and held-out days of the same users as non-members. `attack_users`: at most this many users
    (sampled by pseudonym) are attacked; `lira_shadows`: shadow models trained with the run's
    recipe (each costs about one in-process training on those users' days);
    `attack_bootstrap`: bootstrap replicates of every confidence interval."""

    mode: Literal["paper", "geo"] = "geo"
    attacks: bool = False
    attack_kinds: list[AttackKind] = Field(default_factory=lambda: list(ATTACK_KINDS))
    attack_users: int = Field(300, ge=2)
    lira_shadows: int = Field(4, ge=2, le=256)
    attack_bootstrap: int = Field(500, ge=20, le=100_000)

    @field_validator("attack_kinds")
    @classmethod
    def _kinds(cls, value: list[str]) -> list[str]:
        if not value or len(set(value)) != len(value):
            raise ValueError(f"name each of {', '.join(ATTACK_KINDS)} at most once, at least "
                             f"one; got {value}")
        return value


class ReportConfig(Section):
    output: Path | None = None

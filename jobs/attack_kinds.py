"""The attacks of `trajpriv evaluate --attacks`: one registry, as for mechanisms and methods.

An attack kind is a name of `evaluate.attack_kinds`. Kinds that share their data are computed
by one family in one pass (the white-box MIA and LiRA score the same candidate days of the same
train run with the same critics), so the registry holds families, each naming its kinds and
its runner. The config takes its choices from `ATTACK_KINDS`, and the evaluate stage runs the
families of the chosen kinds (`families_of`) without comparing a kind's name.

Why the runner is a "module:function" string: the config imports this module, and a runner
imports Spark and torch; only the evaluate stage resolves it (`runner_of`). No pyspark here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol


class AttackRunner(Protocol):
    def __call__(self, spark: Any, cfg: Any, kinds: set[str],
                 targets: list[tuple[str, str, float]] | None
                 ) -> tuple[list[dict], dict[str, Any]]:
        """Evaluation rows and figures of the family's `kinds` among the chosen ones;
        `targets`: the train runs to attack, (run id, model, epsilon); None: the latest."""
        ...


@dataclass(frozen=True)
class AttackFamily:
    name: str
    kinds: tuple[str, ...]  # the attack kinds it computes, in the order its rows come
    runner: str  # "module:function", an AttackRunner


FAMILIES = (
    # home re-identification on the published points
    AttackFamily("home", ("home",), "jobs.evaluate.attacks:home_family"),
    # membership inference against a learned train run's per-user critics
    AttackFamily("membership", ("whitebox", "lira"), "jobs.evaluate.membership:membership_family"),
)
ATTACK_KINDS = tuple(kind for family in FAMILIES for kind in family.kinds)
if len(set(ATTACK_KINDS)) != len(ATTACK_KINDS) or any(
        f.runner.count(":") != 1 for f in FAMILIES):
    raise ImportError(f"attack families must name each kind once and a module:function runner; "
                      f"got {FAMILIES}")


def families_of(kinds: Iterable[str]) -> list[AttackFamily]:
    """The families that compute any of `kinds`, in the registry's order."""
    chosen = set(kinds)
    return [f for f in FAMILIES if chosen & set(f.kinds)]


def runner_of(family: AttackFamily) -> AttackRunner:
    module, _, function = family.runner.partition(":")
    return getattr(importlib.import_module(module), function)

"""Synthesis methods: one interface (`SynthesisMethod`) and one registry, used by every stage.

A method is named by `train.method` and `study.synthesis_methods`. What each stage asks of it:
- train: `trainer`, "module:function" of its Spark training (`function(spark, cfg, ctx)`
  returns the run's published figures and leaves `artefact` in the run folder);
- study: `fit(cfg, data, epsilon, seed)`, a `FittedModel` trained in this process at
  `epsilon` (`sample(n_days, seed)`, `epsilon` spent);
- synthesize: `load(blob)` of the run folder's `artefact` (a `FittedModel` whose
  `sample_partition` is the pure Spark kernel), `model_name(blob)` (the table's `model`);
- evaluate: `learned` (per-user critics the membership attacks score; a released table of
  summed counts has none);
- report: `label` (the display name) and `privacy_setting(figures)`.

Adding a method: its own module under jobs/methods/ (a module-level `register(...)` call),
and its module path in `BUILTIN`. A method with `trainable = False` (optional attribute,
default true) is a study and bench method: `train.method` refuses it (`check_trainable`).
The stages enumerate `names()` and look methods up with `get`; none compares a method name.
Why the train stage names its trainer by a string: the stages import one another only downwards
(pyproject's import contracts), the study sits below train, and a method module imported by the
study must not import the train stage; only the train stage resolves `trainer`.

No pyspark and no torch at import: jobs.config validates method names against the registry,
and a method module imports its core (models.*) inside its functions.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from udfs.errors import ConfigError

#: the modules whose import registers the built-in methods, in the order they are listed
BUILTIN = ("jobs.methods.markov", "jobs.methods.markov2", "jobs.methods.learned")


@runtime_checkable
class FittedModel(Protocol):
    """A trained method's model: what the study samples and synthesize's kernel runs."""

    epsilon: float | None  # spent by `fit`; None once loaded (the run's ledger row holds it)

    def sample(self, n_days: int, seed: int) -> np.ndarray:
        """(n_days, 48) rows of the training data's location table."""
        ...

    def sample_partition(self, seed: int, p: int, first: int, count: int) -> pd.DataFrame:
        """Partition p's days as (traj_no, slots of location ids); post-processing only."""
        ...


@runtime_checkable
class SynthesisMethod(Protocol):
    name: str        # the config's value
    label: str       # the report's display name
    learned: bool    # a policy trained in rounds (TorchDistributor), with per-user critics
    artefact: str    # the model's file in the train run folder
    trainer: str     # "module:function" of the train stage's Spark training

    def fit(self, cfg: Any, data: Any, epsilon: float, seed: int) -> FittedModel: ...

    def load(self, blob: bytes) -> FittedModel: ...

    def model_name(self, blob: bytes) -> str: ...

    def privacy_setting(self, figures: dict) -> str: ...


_REGISTRY: dict[str, SynthesisMethod] = {}
_loaded = False


def register(method: SynthesisMethod) -> SynthesisMethod:
    """Add `method` under its name (a second method of the same name is refused)."""
    if not isinstance(method, SynthesisMethod):
        raise TypeError(f"{method!r} does not implement SynthesisMethod")
    if method.name in _REGISTRY and _REGISTRY[method.name] is not method:
        raise ValueError(f"synthesis method {method.name!r} is already registered")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_builtin() -> None:
    global _loaded
    if not _loaded:
        for module in BUILTIN:
            importlib.import_module(module)
        _loaded = True


def methods() -> dict[str, SynthesisMethod]:
    """Every registered method by name, the built-in ones first."""
    _load_builtin()

    def rank(method: SynthesisMethod) -> int:  # BUILTIN's order, whoever imported one first
        module = type(method).__module__
        return BUILTIN.index(module) if module in BUILTIN else len(BUILTIN)

    return {m.name: m for m in sorted(_REGISTRY.values(), key=rank)}  # stable: then as registered


def names(*, learned: bool | None = None) -> list[str]:
    return [n for n, m in methods().items() if learned is None or m.learned == learned]


def get(name: str) -> SynthesisMethod:
    found = methods().get(name)
    if found is None:
        raise ConfigError(f"unknown synthesis method {name!r}; choices: {', '.join(names())}")
    return found


def of_run(figures: dict) -> SynthesisMethod:
    """The method of a train run, by the `method` its published figures name."""
    return get(str(figures.get("method", "pategail")))


def check(name: str) -> str:
    """`name` if it is a registered method (a pydantic validator's ValueError otherwise)."""
    if name not in methods():
        raise ValueError(f"unknown synthesis method {name!r}; choices: {', '.join(names())}")
    return name


def check_trainable(name: str) -> str:
    """`name` if the train stage can publish it (`check`, and not `trainable = False`)."""
    check(name)
    if not getattr(methods()[name], "trainable", True):
        publishable = [n for n, m in methods().items() if getattr(m, "trainable", True)]
        raise ValueError(f"synthesis method {name!r} is for the study and the benchmarks only; "
                         f"train.method choices: {', '.join(publishable)}")
    return name


def trainer_of(method: SynthesisMethod):
    """The train stage's Spark training function of `method` (its `trainer` resolved)."""
    module, _, function = method.trainer.partition(":")
    return getattr(importlib.import_module(module), function)

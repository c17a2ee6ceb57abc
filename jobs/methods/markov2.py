"""The adaptive second-order DP Markov method (models/markov2.py): the DP Markov release plus a
second-order move table, each move following (cell before, current cell) where the released
counts support it and the current cell alone elsewhere.

Study and bench only. Why no Spark training: the train stage's Markov path
(`jobs.train.stage.run_markov`, jobs/train/markov.py) sums a fixed set of statistics per shard
and saves `MarkovModel.TABLES`; this method would need its own sums, artefact and trainer, for
a model whose role today is the baseline the learned methods must beat in the study and the
benchmarks. The config refuses `train.method: markov2` (`trainable = False`,
`jobs.methods.check_trainable`) and its `trainer` refuses too. `load` reads a `markov2.npz` of
`Markov2Model.TABLES` and the location ids, so a trainer can be added without changing it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.methods import register
from jobs.methods.markov import FittedMarkov, MarkovMethod
from udfs.errors import ConfigError

ARTEFACT = "markov2.npz"


@dataclass(frozen=True)
class Markov2Method(MarkovMethod):
    name: str = "markov2"
    label: str = "DP Markov (adaptive 2nd order)"
    artefact: str = ARTEFACT
    trainer: str = "jobs.methods.markov2:no_trainer"
    trainable: bool = False  # study and bench only (module docstring)

    def fit(self, cfg: Any, data: Any, epsilon: float, seed: int) -> FittedMarkov:
        from models.markov2 import Markov2Settings, fit_markov2

        ms, m2 = cfg.train.markov, cfg.train.markov2
        settings = Markov2Settings(ms.core(), cfg.train.accountant, m2.second_share,
                                   m2.threshold)
        model = fit_markov2(data.days_per_user, data.coords, epsilon, cfg.train.delta, seed,
                            settings)
        return FittedMarkov(model, None, float(model.epsilon))

    def model_class(self) -> type:
        from models.markov2 import Markov2Model

        return Markov2Model

    def privacy_setting(self, figures: dict) -> str:
        return (f"one DP Markov release with a second-order table ({figures.get('mechanism')} "
                f"noise), {figures.get('privacy_model', 'central')} epsilon")


def no_trainer(spark, cfg, ctx):
    raise ConfigError("train.method=markov2 is a study and bench method (jobs/methods/"
                      "markov2.py): publish markov or a learned method")


METHOD = register(Markov2Method())

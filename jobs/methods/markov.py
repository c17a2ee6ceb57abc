"""The DP Markov method (models/markov.py): one release of normalised per-user counts.

Trained on Spark by `jobs.train.stage.run_markov` (summed statistics, one release, the same
split, staging and ledger charges as a learned run); in the study it fits in this process.
Its artefact is `markov.npz`: the released tables and the location ids they index."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from jobs.methods import register

ARTEFACT = "markov.npz"  # the released tables, in the run folder


@dataclass
class FittedMarkov:
    model: Any                    # models.markov.MarkovModel
    loc_ids: np.ndarray | None    # the location ids the tables index (None in the study)
    epsilon: float | None         # spent by the release (None: loaded, the ledger has it)

    def sample(self, n_days: int, seed: int) -> np.ndarray:
        return self.model.sample(n_days, np.random.default_rng([seed, 1]))

    def sample_partition(self, seed: int, p: int, first: int, count: int) -> pd.DataFrame:
        """numpy's generator seeded by (seed, p); post-processing of the release."""
        days = self.model.sample(count, np.random.default_rng([seed, p]))
        return pd.DataFrame({"traj_no": np.arange(first, first + count, dtype=np.int64),
                             "slots": list(self.loc_ids[days].astype(np.int32))})


@dataclass(frozen=True)
class MarkovMethod:
    name: str = "markov"
    label: str = "DP Markov"
    learned: bool = False
    artefact: str = ARTEFACT
    trainer: str = "jobs.train.stage:run_markov"

    def fit(self, cfg: Any, data: Any, epsilon: float, seed: int) -> FittedMarkov:
        from models.markov import fit_markov

        model = fit_markov(data.days_per_user, data.coords, epsilon, cfg.train.delta, seed,
                           settings=cfg.train.markov.core(), accountant=cfg.train.accountant)
        return FittedMarkov(model, None, float(model.epsilon))

    def load(self, blob: bytes) -> FittedMarkov:
        cls = self.model_class()
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            model = cls(**{name: z[name] for name in cls.TABLES})
            loc_ids = z["loc_ids"]
        return FittedMarkov(model, loc_ids, None)

    def model_class(self) -> type:
        """The model the artefact's tables (its `TABLES`) rebuild."""
        from models.markov import MarkovModel

        return MarkovModel

    def model_name(self, blob: bytes) -> str:
        return self.name

    def privacy_setting(self, figures: dict) -> str:
        return (f"one DP Markov release ({figures.get('mechanism')} noise), "
                f"{figures.get('privacy_model', 'central')} epsilon")


METHOD = register(MarkovMethod())


def sample_partition(blob: bytes, seed: int, p: int, first: int, count: int) -> pd.DataFrame:
    """Partition p's synthetic days from a `markov.npz`: (traj_no, slots of location ids)."""
    return METHOD.load(blob).sample_partition(seed, p, first, count)

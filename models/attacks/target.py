"""A finished train run as the membership attacks see it, read back from its artefacts.

Why a separate reader: the Spark job trains on W ranks and writes `policy.pt` (policy, DP start
distribution, the public map), `train_config.json` (the recipe without the secret seed) and
`critics/rank<r>.pt` (each rank's users' critics; merged here by user, models.critic_store). The
attacks need all three: the policy for LiRA against the released generator, the critics for the
white-box attack and critic LiRA, the recipe to train shadow models the way the target was
trained (`shadow_trainer`, one process, the run's rollout blocks, seeds of the attacker's own).
Pure torch / numpy: no pyspark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from models.config import TrainConfig
from models.critic_store import UserCritics, load_user_critics
from models.data import TrainData
from models.policy import PolicyNet
from udfs.errors import InputDataError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainedRun:
    """Policy, per-user critics (users in `critics.user_ids` order) and recipe of one run."""

    config: TrainConfig  # the recipe; seed 0 stands in for the run's secret seed
    blocks: int
    policy_state: dict
    n_locations: int
    loc_ids: np.ndarray  # (L,) sorted public location ids; a day's slots are rows of this
    coords: np.ndarray  # (L, 2) lat/lon of those rows
    critics: UserCritics
    scheme: str

    @classmethod
    def load(cls, run_dir: str | Path) -> TrainedRun:
        run_dir = Path(run_dir)
        for name in ("policy.pt", "train_config.json"):
            if not (run_dir / name).exists():
                raise InputDataError(f"train run folder {run_dir} has no {name}")
        art = torch.load(run_dir / "policy.pt", weights_only=False)
        recipe = json.loads((run_dir / "train_config.json").read_text())
        blocks = int(recipe.pop("blocks", 1))
        meta = art.get("meta") or {}
        if "loc_ids" not in meta or "coords" not in meta:
            raise InputDataError(f"{run_dir / 'policy.pt'} lacks the location map (meta)")
        return cls(TrainConfig.from_dict({**recipe, "seed": 0}), blocks, art["policy_state"],
                   int(art["n_locations"]), np.asarray(meta["loc_ids"], np.int64),
                   np.asarray(meta["coords"], np.float64), load_user_critics(run_dir),
                   str(art["scheme"]))

    def policy(self) -> PolicyNet:
        return PolicyNet.restore(self.config, self.n_locations, self.policy_state)

    def user_critics(self) -> UserCritics:
        return self.critics

    def with_users(self, index) -> TrainedRun:
        """The same run with only the critics of users `index` (positions), in that order: the
        attacks index candidates' users in the order of the users attacked."""
        return dataclasses.replace(self, critics=self.critics.select(index))

    def rows_of(self, slots: np.ndarray) -> np.ndarray:
        """Location ids -> rows of the map (what the model indexes); unknown ids raise."""
        slots = np.asarray(slots, np.int64)
        rows = np.searchsorted(self.loc_ids, slots).clip(0, len(self.loc_ids) - 1)
        bad = self.loc_ids[rows] != slots
        if bad.any():
            raise InputDataError(f"{int(bad.sum())} slot(s) name location ids the run was not "
                                 f"trained on, e.g. {int(slots[bad][0])}")
        return rows


def shadow_trainer(run: TrainedRun) -> Callable[[TrainData, int], object]:
    """`train(data, seed)` for `lira.run_lira`: the run's recipe and rollout blocks in one
    process (models.train.fit; W ranks give the same model up to float summation order).
    A shadow's rounds log at DEBUG: four shadows printed 16 `round i/4` lines among the
    stage's own; the attack suite logs one line per shadow set."""
    from models.train import fit

    def train(data: TrainData, seed: int):
        t0 = time.perf_counter()
        model = fit(dataclasses.replace(run.config, seed=seed), data, blocks=run.blocks,
                    round_log_level=logging.DEBUG)
        log.debug("LiRA shadow (seed %d) trained in %.1f s", seed, time.perf_counter() - t0)
        return model

    return train

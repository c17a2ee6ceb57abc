"""The learned methods (models/train.py): a policy trained by imitation learning in rounds,
one method per scheme of the core (`models.config.SCHEMES`: pategail, pategail++ and their
local-privacy variants ldp, ldp++).

Trained on Spark by `jobs.train.stage.run_learned` (TorchDistributor ranks); in the study on
one rank in this process, with the noise calibrated so that `train.rounds` rounds spend the
target. Its artefact is `policy.pt` (policy state, start distribution, environment settings)."""

from __future__ import annotations

import dataclasses
import io
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from jobs.methods import register
from models.config import SCHEMES

ARTEFACT = "policy.pt"
LABELS = {"pategail": "PateGAIL", "pategail++": "PateGAIL++", "ldp": "PateGAIL-LDP",
          "ldp++": "PateGAIL++-LDP"}


@dataclass
class FittedPolicy:
    policy: Any                   # models.policy.PolicyNet
    env: Any                      # models.env.MobilityEnv
    start_probs: np.ndarray
    loc_ids: np.ndarray | None    # the location ids of the rows (None in the study)
    epsilon: float | None         # spent by training (None: loaded, the ledger has it)

    def sample(self, n_days: int, seed: int) -> np.ndarray:
        import torch

        from models.synthesis import synthesize

        return synthesize(self.policy, self.env, self.start_probs, n_days,
                          torch.Generator().manual_seed(seed + 1))

    def sample_partition(self, seed: int, p: int, first: int, count: int) -> pd.DataFrame:
        import torch

        from models.synthesis import synthesize

        torch.set_num_threads(1)
        gen = torch.Generator()
        gen.manual_seed(int(np.random.SeedSequence([seed, p]).generate_state(1, np.uint64)[0]
                            >> 1))
        days = synthesize(self.policy, self.env, self.start_probs, count, gen)
        return pd.DataFrame({"traj_no": np.arange(first, first + count, dtype=np.int64),
                             "slots": list(self.loc_ids[days].astype(np.int32))})


def _artefact(blob: bytes) -> dict:
    import torch

    return torch.load(io.BytesIO(blob), map_location="cpu", weights_only=False)


@dataclass(frozen=True)
class LearnedMethod:
    name: str
    label: str
    learned: bool = True
    artefact: str = ARTEFACT
    trainer: str = "jobs.train.stage:run_learned"

    def fit(self, cfg: Any, data: Any, epsilon: float, seed: int) -> FittedPolicy:
        from models.budget import noise_for_epsilon
        from models.env import MobilityEnv
        from models.train import fit

        base = cfg.train.model_config_of(seed, self.name)
        noise = noise_for_epsilon(base, data.n_users, data.coords, base.rounds, epsilon)
        mc = dataclasses.replace(base, noise=noise, target_epsilon=epsilon * (1 + 1e-9))
        res = fit(mc, data, round_log_level=logging.DEBUG)
        env = MobilityEnv(data.coords, mc.k_nearest, mc.explore_exponent)
        return FittedPolicy(res.policy(), env, res.start_probs, None,
                            float(res.accountant["epsilon"]))

    def load(self, blob: bytes) -> FittedPolicy:
        from models.env import DestPrior, MobilityEnv
        from models.policy import PolicyNet

        art = _artefact(blob)
        meta = art["meta"]
        # a run pre-trained on the Markov release drew its explore moves from its tilted weights
        env = MobilityEnv(np.asarray(meta["coords"]), art["k_nearest"], art["explore_exponent"],
                          dest_prior=DestPrior.of(art.get("dest_prior")))
        # a state with the destination head's weights restores the learned-destination policy
        policy = PolicyNet.from_state(art["n_locations"], art["loc_dim"], art["slot_dim"],
                                      art["hidden"], art["policy_state"])
        return FittedPolicy(policy, env, art["start_probs"],
                            np.asarray(meta["loc_ids"], dtype=np.int64), None)

    def model_name(self, blob: bytes) -> str:
        return str(_artefact(blob)["scheme"])

    def privacy_setting(self, figures: dict) -> str:
        return (f"{figures.get('rounds_done', '?')} rounds, "
                f"{figures.get('privacy_model', 'central')} epsilon")


METHODS = {s: register(LearnedMethod(s, LABELS[s])) for s in SCHEMES}

"""Start-location histogram (DP) and sampling of synthetic days from a trained policy.

DP start histogram. Guarantee: user-level (replace one user's whole data). Each user contributes
its normalised histogram of slot-0 locations (mass 1 in total, however many days it has), so
replacing a user moves the summed histogram by at most 2 in L1: Laplace(2/eps) per cell is
eps-DP (one LaplaceDpEvent with noise multiplier 1/eps on sensitivity 2). Post-processing: cells
below `threshold_sd` noise scales are zeroed (suppresses the noise floor over thousands of empty
cells), the rest normalised; if nothing survives, the largest noisy cell is kept.
Citations: Dwork & Roth 2014 (histograms); Korolova et al. 2009 (thresholding as post-processing).
Runtime: O(L + days). Utility: cells with user-mass well above 2 ln(L) / eps survive.
"""

from __future__ import annotations

import dp_accounting
import numpy as np
import torch

from models.aggregation.base import laplace
from models.env import MobilityEnv
from models.policy import PolicyNet, ValueNet
from models.ppo import rollout


def dp_start_histogram(days_per_user: list[np.ndarray], n_locations: int, epsilon: float,
                       gen: torch.Generator, spend, threshold_sd: float | None = None
                       ) -> torch.Tensor:
    """(L,) probabilities of a synthetic day's start location."""
    spend(dp_accounting.LaplaceDpEvent(1.0 / epsilon))
    hist = torch.zeros(n_locations, dtype=torch.float64)
    for days in days_per_user:  # setup-time loop over users, O(days)
        starts = torch.as_tensor(np.asarray(days)[:, 0], dtype=torch.long)
        hist += torch.bincount(starts, minlength=n_locations).double() / len(starts)
    scale = 2.0 / epsilon
    noisy = hist + scale * laplace((n_locations,), gen)
    thr = scale * (np.log(n_locations) if threshold_sd is None else threshold_sd)
    kept = torch.where(noisy > thr, noisy, torch.zeros_like(noisy))
    if kept.sum() <= 0:
        kept = torch.zeros_like(noisy)
        kept[int(noisy.argmax())] = 1.0
    return kept / kept.sum()


@torch.no_grad()
def synthesize(policy: PolicyNet, env: MobilityEnv, start_probs: torch.Tensor, n: int,
               gen: torch.Generator, batch: int = 1024) -> np.ndarray:
    """n synthetic days, int64 array (n, 48) of location ids."""
    value = ValueNet(env.n_locations, policy.trunk.loc_emb.embedding_dim,
                     policy.trunk.slot_emb.embedding_dim, policy.head.in_features)
    out = []
    for start in range(0, n, batch):
        m = min(batch, n - start)
        starts = torch.multinomial(start_probs.float(), m, replacement=True, generator=gen)
        out.append(rollout(policy, value, env, starts, gen).traj.days.numpy())
    return np.concatenate(out) if out else np.zeros((0, 48), dtype=np.int64)

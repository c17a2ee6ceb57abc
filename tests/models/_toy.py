"""Small synthetic map and users for fast model tests."""

from __future__ import annotations

import numpy as np

from models.data import TrainData


def toy_data(n_users: int = 5, n_loc: int = 60, days: int = 4, seed: int = 0) -> TrainData:
    rng = np.random.default_rng(seed)
    coords = np.column_stack([39.9 + rng.random(n_loc) * 0.3, 116.3 + rng.random(n_loc) * 0.3])
    per_user = []
    for _ in range(n_users):
        home, work = rng.choice(n_loc, 2, replace=False)
        d = np.full((days, 48), home)
        for i in range(days):
            a, b = sorted(rng.choice(np.arange(14, 40), 2, replace=False))
            d[i, a:b] = work
            d[i, rng.integers(b, 46)] = rng.integers(n_loc)  # an excursion
        per_user.append(d.astype(np.int64))
    return TrainData(per_user, coords, list(range(n_users)))

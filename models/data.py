"""Training data: per-user real days (int arrays (n_u, 48)) and the public location coordinates."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from models.env import SLOTS
from udfs.errors import InputDataError, InvalidTrajectoryError


@dataclass(frozen=True)
class TrainData:
    days_per_user: list[np.ndarray]  # one (n_u, 48) int64 array per user, n_u >= 1
    coords: np.ndarray  # (L, 2) float (lat, lon); location id = row
    user_ids: list  # public ids, same order (used only for sharding / reporting)

    def __post_init__(self) -> None:
        if not self.days_per_user:
            raise InvalidTrajectoryError("training data has no users")
        for uid, d in zip(self.user_ids, self.days_per_user, strict=True):
            if d.ndim != 2 or d.shape[1] != SLOTS or len(d) == 0:
                raise InvalidTrajectoryError(f"user {uid}: days must be (n>=1, {SLOTS}); "
                                             f"got {d.shape}")

    @property
    def n_users(self) -> int:
        return len(self.days_per_user)

    @classmethod
    def from_frame(cls, df: pd.DataFrame, coords: np.ndarray) -> TrainData:
        """From a frame with user_id, s0..s47 (one row per user-day)."""
        cols = [f"s{i}" for i in range(SLOTS)]
        missing = [c for c in ["user_id", *cols] if c not in df.columns]
        if missing:
            raise InputDataError(f"per-user frame lacks columns {missing[:5]}")
        groups = df.groupby("user_id", sort=True)
        return cls([g[cols].to_numpy(np.int64) for _, g in groups], np.asarray(coords, float),
                   list(groups.groups))


# (lat, lon) of the south-west corner and the span in degrees of the home-work population's map
BEIJING_BOX = ((39.9, 116.3), (0.3, 0.3))
SHANGHAI_BOX = ((30.7, 120.9), (0.9, 1.05))


def home_work_population(n_users: int, n_loc: int = 60, days: int = 4, seed: int = 0,
                         box: tuple = BEIJING_BOX) -> TrainData:
    """A seeded synthetic population for tests and benchmarks (never for results).

    Locations are uniform in `box`. Each user has a home and a work place; each day is home,
    then work over a random interval of the working slots 14-39, then one excursion slot to a
    random location before evening, then home. Same arguments, same data.
    """
    rng = np.random.default_rng(seed)
    (lat0, lon0), (dlat, dlon) = box
    coords = np.column_stack([lat0 + rng.random(n_loc) * dlat, lon0 + rng.random(n_loc) * dlon])
    per_user = []
    for _ in range(n_users):
        home, work = rng.choice(n_loc, 2, replace=False)
        d = np.full((days, SLOTS), home)
        for i in range(days):
            a, b = sorted(rng.choice(np.arange(14, 40), 2, replace=False))
            d[i, a:b] = work
            d[i, rng.integers(b, 46)] = rng.integers(n_loc)  # an excursion
        per_user.append(d.astype(np.int64))
    return TrainData(per_user, coords, list(range(n_users)))


def load_geolife(folder: str | Path) -> tuple[TrainData, np.ndarray, np.ndarray]:
    """(per-user training data, real.data days, test.data days) of the shared Geolife split."""
    folder = Path(folder)
    for name in ("gps", "real_data_per_user.csv", "test.data", "real.data"):
        if not (folder / name).exists():
            raise InputDataError(f"{folder / name} is missing")
    coords = np.loadtxt(folder / "gps")
    df = pd.read_csv(folder / "real_data_per_user.csv")
    real = np.loadtxt(folder / "real.data", dtype=np.int64)
    test = np.loadtxt(folder / "test.data", dtype=np.int64)
    return TrainData.from_frame(df, coords), real, test

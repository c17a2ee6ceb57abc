"""`trajpriv train` with `train.method: markov`: the DP Markov chain of `models.markov`.

Steps (plan, then spend), as for the learned methods:
1. the train/held-out split (jobs/spark/split.py) and the training days staged as Parquet
   shards (jobs/train/data.py);
2. the ledger charged `planned` at the target epsilon for every training user;
3. one Spark task per shard sums its users' normalised statistics (`models.markov.user_stats`:
   each user contributes vectors of bounded mass, whatever its number of days); the driver adds
   the partial sums and releases them once with calibrated noise (`release_markov`), so the
   noise is drawn in one place and the accountant sees one release;
4. the model's tables (post-processing of the noisy counts) saved to the run folder as
   `markov.npz`, the ledger charged `spent` at the accounted epsilon.
Nothing else leaves the trusted zone: the partial sums stay in the Spark tasks' memory and the
driver's; the figures are the accountant's summary, settings and timings (`PUBLIC_FIGURES` of
jobs/train/figures.py).
Row shapes: staged days (shard, uidx, user_id, date, slots) -> per shard one row of summed
statistics (npz bytes) -> driver: one `Stats` -> `MarkovModel`.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jobs.config import Config
from jobs.methods.markov import ARTEFACT
from jobs.train.figures import COVERS, PUBLIC_FIGURES
from models.markov import MarkovModel, Stats, add_stats, move_cells, release_markov, user_stats
from udfs.atomic import atomic_open


def _stats_bytes(stats: Stats) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, starts=stats.starts, actions=stats.actions, transitions=stats.transitions,
             destinations=stats.destinations)
    return buf.getvalue()


def _stats_of(blob: bytes) -> Stats:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return Stats(z["starts"], z["actions"], z["transitions"], z["destinations"])


def shard_stats(staging: str, loc_ids: np.ndarray, coords: np.ndarray, cell_of: np.ndarray,
                shard: int, world: int) -> Stats:
    """The summed statistics of one shard's users (read with pandas, as a training rank)."""
    from jobs.train.data import load_shard

    data, _, _ = load_shard(staging, loc_ids, coords, shard, world)
    return user_stats(data.days_per_user, cell_of, len(coords))


def sharded_stats(spark, staging: Path, loc_ids: np.ndarray, coords: np.ndarray,
                  cell_of: np.ndarray, world: int) -> Stats:
    """Sum of every shard's statistics, one Spark task per shard."""
    folder = str(staging)

    def kernel(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for pdf in batches:
            for shard in pdf["id"].tolist():
                stats = shard_stats(folder, loc_ids, coords, cell_of, int(shard), world)
                yield pd.DataFrame({"stats": [_stats_bytes(stats)]})

    rows = (spark.range(0, world, numPartitions=world)
            .mapInPandas(kernel, "stats binary").collect())
    parts = [_stats_of(bytes(r["stats"])) for r in rows]
    total = parts[0]
    for part in parts[1:]:
        total = add_stats(total, part)
    return total


def fit(spark, cfg: Config, staging: Path, seed: int) -> tuple[MarkovModel, dict]:
    """Stage nothing, charge nothing: the statistics of the staged shards, released once."""
    from jobs.spark.split import load_locations

    loc_ids, coords = load_locations(spark, cfg.dataset)
    ms = cfg.train.markov
    cell_of = move_cells(coords, ms.cell_depth)
    t0 = time.perf_counter()
    stats = sharded_stats(spark, staging, loc_ids, coords, cell_of, cfg.train.num_processes)
    t_stats = time.perf_counter() - t0
    model = release_markov(stats, coords, cell_of, cfg.train.target_epsilon, cfg.train.delta,
                           seed, settings=ms.core(), accountant=cfg.train.accountant)
    return model, {"loc_ids": loc_ids, "coords": coords, "stats_s": t_stats,
                   "release_s": time.perf_counter() - t0 - t_stats}


def save(model: MarkovModel, out_dir: Path, loc_ids: np.ndarray, coords: np.ndarray) -> Path:
    """`markov.npz` (the tables and the location ids and coordinates they index; arrays only,
    loaded without pickle) and `accountant.json` in the run folder, each written whole or not
    at all and owner-only (`udfs.atomic`), as the learned runs' artefacts."""
    path = out_dir / ARTEFACT
    with atomic_open(path, binary=True) as fh:
        np.savez(fh, loc_ids=loc_ids, coords=coords,
                 **{name: getattr(model, name) for name in MarkovModel.TABLES})
    with atomic_open(out_dir / "accountant.json") as fh:
        json.dump(model.accountant, fh)
    return path


def figures_of(cfg: Config, model: MarkovModel, n_users: int, timings: dict[str, float],
               out_dir: Path) -> dict[str, Any]:
    """The run's published figures: the accountant's summary, settings, timings."""
    acc = model.accountant
    figures = {
        "epsilon": acc["epsilon"], "delta": acc["delta"], "basic_epsilon": acc["basic_epsilon"],
        "accountant": acc["method"], "target_epsilon": acc["target_epsilon"],
        "privacy_model": "central", "epsilon_covers": COVERS["central"], "method": cfg.train.method,
        "mechanism": cfg.train.markov.mechanism, "rounds_done": 0, "rounds_planned": 0,
        "stopped_reason": "released", "users": n_users, "warnings": [],
        "stage_s": round(timings["stage_s"], 3), "train_launch_s": round(timings["fit_s"], 3),
        "artefacts": str(out_dir),
    }
    unlisted = set(figures) - set(PUBLIC_FIGURES)
    if unlisted:  # a new figure must be classified before it can be published
        raise AssertionError(f"train figures {sorted(unlisted)} are not in PUBLIC_FIGURES")
    return figures


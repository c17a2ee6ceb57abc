"""Training input on Spark: the per-rank shards of the training days.

The train/held-out split they are cut from: jobs/spark/split.py.

Shards. Users (training days) are numbered 0..U-1 in user-id order (the global index every
shard-invariant random draw uses) and assigned to rank pmod(xxhash64(user_id), W). Spark writes
them once as Parquet partitioned by shard under a 0700 staging folder; rank r reads only
`shard=r` (`load_shard`, pandas/pyarrow, no Spark). Location ids become rows of the sorted public
location table (`coords[row]`).
Row shapes: slot_days (one row per user-day) -> split (same rows + split) -> staged
(uidx, user_id, date, slots, shard) -> per rank: TrainData (one (n_u, 48) array per user).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from jobs.spark.tables import LOCATIONS, SLOT_DAYS_SPLIT
from models.data import TrainData
from udfs.errors import InputDataError


def stage_shards(spark, cfg, folder: Path, world: int) -> dict:
    """Write the training days partitioned by rank to `folder` (mode 0700); returns meta:
    n_users, users_per_rank and user_ids (the last two trusted-zone only)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    train = (spark.table(SLOT_DAYS_SPLIT)
             .where((F.col("dataset") == cfg.dataset) & (F.col("split") == "train")))
    users = (train.select("user_id").distinct()
             .withColumn("uidx", F.row_number().over(Window.orderBy("user_id")) - 1)
             .withColumn("shard", F.pmod(F.xxhash64("user_id"), F.lit(world)).cast("int")))
    staged = train.join(users, "user_id").select("shard", "uidx", "user_id", "date", "slots")
    staged.write.mode("overwrite").partitionBy("shard").parquet(str(folder / "days"))
    assigned = users.select("user_id", "shard").collect()  # one row per training user
    per_shard: dict[int, int] = {}
    for r in assigned:
        per_shard[r["shard"]] = per_shard.get(r["shard"], 0) + 1
    n_users = len(assigned)
    empty = [r for r in range(world) if not per_shard.get(r)]
    if empty:
        raise InputDataError(f"{n_users} training user(s) leave rank(s) {empty} of {world} "
                             "without users; lower train.num_processes")
    meta = {"n_users": n_users, "users_per_rank": [per_shard[r] for r in range(world)]}
    (folder / "meta.json").write_text(json.dumps(meta))
    # the trained users' ids: for the run folder's trusted.json (the privacy ledger), never
    # published
    return {**meta, "user_ids": sorted(str(r["user_id"]) for r in assigned)}


def load_shard(folder: str, loc_ids: np.ndarray, coords: np.ndarray, rank: int, world: int
               ) -> tuple[TrainData, torch.Tensor, int]:
    """Rank `rank`'s users: (TrainData, their global indices, number of users in all)."""
    meta = json.loads((Path(folder) / "meta.json").read_text())
    pdf = pd.read_parquet(Path(folder) / "days" / f"shard={rank}")
    pdf = pdf.sort_values(["uidx", "date"], kind="stable")
    slots = np.stack(pdf.slots.to_numpy()).astype(np.int64)
    rows = np.searchsorted(loc_ids, slots).clip(0, len(loc_ids) - 1)
    unknown = loc_ids[rows] != slots
    if unknown.any():
        raise InputDataError(f"{int(unknown.sum())} slot(s) name location ids missing from "
                             f"{LOCATIONS}, e.g. {int(slots[unknown][0])}")
    uidx = pdf.uidx.to_numpy()
    cuts = np.flatnonzero(np.diff(uidx)) + 1
    days = np.split(rows, cuts)
    order = uidx[np.r_[0, cuts]]
    users = list(pdf.user_id.to_numpy()[np.r_[0, cuts]])
    return TrainData(days, coords, users), torch.as_tensor(order, dtype=torch.long), \
        int(meta["n_users"])

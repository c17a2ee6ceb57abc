"""Training input on Spark: the held-out split of slot days and the per-rank shards.

Split (`trajpriv_raw.slot_days_split`: dataset, split, user_id, date, slots; partitioned by
dataset and split). A user-day is held out when a keyed hash of (user, date) falls below
`train.holdout_fraction`: xxhash64 with a salt derived by HMAC from the raw zone's run key, so the
split is deterministic for a data root (every train run and the evaluation see the same split)
and cannot be recomputed from published data. Evaluation reads `split = 'holdout'`; training
reads `split = 'train'`. The table is rewritten (same rows) by every train run of the dataset.

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

from jobs.spark.tables import LOCATIONS, SLOT_DAYS, SLOT_DAYS_SPLIT
from models.data import TrainData
from udfs.derive import int_digest
from udfs.errors import InputDataError


def holdout_salt(cfg) -> int:
    from jobs.keys import run_key

    key = run_key(cfg.storage.secrets)
    return int_digest(key, "holdout", cfg.dataset, nbytes=8, signed=True)


def write_split(spark, cfg) -> dict:
    """Write the dataset's train/held-out split; returns counts of days and users per split."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import read_table, write_table

    days = read_table(spark, SLOT_DAYS).where(F.col("dataset") == cfg.dataset)
    bucket = F.pmod(F.xxhash64(F.lit(holdout_salt(cfg)), "user_id", F.col("date").cast("string")),
                    F.lit(1_000_000))
    split = F.when(bucket < F.lit(int(cfg.train.holdout_fraction * 1_000_000)), "holdout") \
        .otherwise("train")
    out = days.select("dataset", split.alias("split"), "user_id", "date", "slots")
    write_table(out, SLOT_DAYS_SPLIT,
                replace={"dataset": cfg.dataset})
    rows = (spark.table(SLOT_DAYS_SPLIT).where(F.col("dataset") == cfg.dataset).groupBy("split")
            .agg(F.count("*").alias("days"), F.countDistinct("user_id").alias("users")).collect())
    counts = {r["split"]: {"days": r["days"], "users": r["users"]} for r in rows}
    if "train" not in counts:
        raise InputDataError(f"dataset {cfg.dataset!r} has no training days in {SLOT_DAYS} "
                             "(run ingest first, or lower train.holdout_fraction)")
    return counts


def load_locations(spark, dataset: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted loc_ids, (L, 2) lat/lon) of the dataset's public location set."""
    from pyspark.sql import functions as F

    from jobs.spark.catalog import read_table

    pdf = (read_table(spark, LOCATIONS).where(F.col("dataset") == dataset)
           .select("loc_id", "lat", "lon").toPandas().sort_values("loc_id"))
    if len(pdf) < 2:
        raise InputDataError(f"{LOCATIONS} holds {len(pdf)} location(s) for {dataset!r}; "
                             "training needs at least 2 (run ingest first)")
    return pdf.loc_id.to_numpy(np.int64), pdf[["lat", "lon"]].to_numpy(np.float64)


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

"""The train/held-out split of slot days, and the public location table as arrays.

Split (`trajpriv_raw.slot_days_split`: dataset, split, user_id, date, slots; partitioned by
dataset and split). A user-day is held out when a keyed hash of (user, date) falls below
`train.holdout_fraction`: xxhash64 with a salt derived by HMAC from the raw zone's run key, so the
split is deterministic for a data root (every train run, the synthesis study and the evaluation
see the same split) and cannot be recomputed from published data. Evaluation reads
`split = 'holdout'`; training and the synthesis study read `split = 'train'`. The table is
rewritten (same rows) by every writer.
Here, in the adapter, because two stages write it (`study` and `train`) and one reads it
(`evaluate`): stages import one another only downwards.
"""

from __future__ import annotations

import numpy as np

from jobs.spark.tables import LOCATIONS, SLOT_DAYS, SLOT_DAYS_SPLIT
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

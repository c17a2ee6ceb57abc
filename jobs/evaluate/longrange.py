"""Long-range statistics of many sets of days in one Spark pass (`udfs.longrange`).

The numpy core summarises each group's days of each Arrow batch into integer counts (motif
classes, home-return buckets, days ending at home, packed next-place moves); Spark adds them up
per (group, kind, key), and the driver rebuilds one `LongRangeSummary` per group, so a group's
summary equals the core's on all its days at once. The metrics (`compare_longrange`) are then
computed on the driver: divergences from raw days, trusted-zone figures like the six of
`udfs.mobility`. The statistics do not depend on coordinates, so `evaluate.mode` does not
change them.
Row shapes: (part, slots, valid) one row per day -> (part, kind, key, w) per batch: a few
hundred rows plus one per distinct move -> summed per part, collected with Arrow.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.evaluate.summaries import valid_day
from udfs.errors import InputDataError, InvalidTrajectoryError
from udfs.longrange import (
    LongRangeSummary,
    summarize_longrange,
    summary_counts,
    summary_from_counts,
)
from udfs.mobility_bins import SLOTS

K_INVALID = -1  # rows counting the days of a group that are not 48 valid location ids
ROW_DDL = "part string, kind int, key long, w long"


def _rows(part: str, days: np.ndarray, n_invalid: int, n_loc: int) -> pd.DataFrame:
    kind, key, w = summary_counts(summarize_longrange(days, n_loc)) if len(days) else (
        np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return pd.DataFrame({"part": part, "kind": np.r_[np.int32(K_INVALID), kind],
                         "key": np.r_[0, key], "w": np.r_[n_invalid, w]})


def longrange_summaries(days_df: DataFrame, n_loc: int,
                        expected: list[str]) -> dict[str, LongRangeSummary]:
    """{part: LongRangeSummary} of the days (part string, slots array<int>) of every part in
    `expected`, in one Spark pass. A part with invalid days raises InvalidTrajectoryError, an
    expected part without days InputDataError."""

    def kernel(batches):
        for pdf in batches:
            if pdf.empty:
                continue
            ok = pdf["valid"].to_numpy(dtype=bool)
            slots = pdf["slots"].to_numpy()
            parts = pdf["part"].to_numpy()
            out = []
            for part in pd.unique(parts):
                mine = parts == part
                good = slots[mine & ok]
                days = np.stack(good).astype(np.int64) if good.size else np.zeros((0, SLOTS))
                out.append(_rows(part, days, int((mine & ~ok).sum()), n_loc))
            yield pd.concat(out, ignore_index=True)

    counts = (
        days_df.select("part", "slots", valid_day(F.col("slots"), n_loc).alias("valid"))
        .mapInPandas(kernel, ROW_DDL)
        .groupBy("part", "kind", "key")
        .agg(F.sum("w").alias("w"))
        .toPandas()
    )
    out = {}
    for part in expected:
        mine = counts[counts["part"] == part]
        bad = int(mine.loc[mine["kind"] == K_INVALID, "w"].sum())
        if bad:
            raise InvalidTrajectoryError(
                f"long-range statistics of {part!r}: {bad} days do not hold exactly {SLOTS} "
                f"non-null location ids in [0, {n_loc - 1}] (column `slots`)")
        mine = mine[mine["kind"] != K_INVALID]
        summary = summary_from_counts(*(mine[c].to_numpy() for c in ("kind", "key", "w")))
        if summary.n_days == 0:
            raise InputDataError(f"{part!r} holds no days (an empty table cannot be evaluated)")
        out[part] = summary
    return out

"""Mobility summaries of many sets of days in one Spark pass: the numpy core per Arrow batch.

Each group of days (column `slots` array<int>, 48 location ids) is reduced to a
`udfs.mobility_stats.DaySummary`: the numpy core (`udfs.mobility_stats.summarize_days`) runs per
Arrow batch in `mapInPandas` and Spark only adds up its integer bucket counts, so a group's
summary equals the core's on its days taken alone, bit for bit, with no logic mirrored in Spark
SQL; `udfs.mobility.compare_summaries` then computes the divergences on the driver.
`summary_rows` / `summaries_by_group` are the two halves for callers that build their days inside
their own task (jobs/evaluate/stage.py: perturbed and synthetic comparisons).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from udfs.errors import InputDataError, InvalidParameterError, InvalidTrajectoryError
from udfs.mobility_bins import IRANK_TOP_K, SLOTS, HistogramSpec, MetricBins
from udfs.mobility_stats import DaySummary, summarize_days

# Item kinds of the exploded per-day rows.
K_INVALID, K_DIST, K_RAD, K_DISTINCT, K_RUN, K_VISIT, K_RANK = range(7)


def summarize_days_pandas(
    days_df: DataFrame, coords: np.ndarray, bins: MetricBins, name: str
) -> DaySummary:
    """The DaySummary of `days_df` from the numpy core run per Arrow batch (mapInPandas)."""
    return summarize_groups_pandas(days_df, [], coords, bins, name)[()]


def summarize_groups_pandas(
    days_df: DataFrame,
    keys: list[str],
    coords: np.ndarray,
    bins: MetricBins,
    name: str,
    expected: list[tuple] | None = None,
) -> dict[tuple, DaySummary]:
    """{group: DaySummary} of every group of days (rows with equal `keys`), in one Spark pass.

    The numpy core summarises each group's days of each Arrow batch; Spark adds up the integer
    counts per (keys..., kind, key), so each group's summary equals `summarize_days` of its
    days taken alone (bit for bit: only integers are added). With keys=[] the one group is ().
    A group of `expected` (default: () when keys=[], else none) without days raises
    InputDataError; other groups without days are simply absent.
    Row shapes: (keys..., slots, valid) one row per day -> (keys..., kind, key, w) a few
    hundred rows per group and batch -> summed: a few thousand rows per group, collected.
    """
    n_loc = coords.shape[0]
    types = dict(days_df.dtypes)
    missing = [k for k in keys if k not in types]
    if missing:
        raise InvalidParameterError(f"{name}: no column {missing} to group the days by")

    def kernel(batches):
        for pdf in batches:
            if pdf.empty:
                continue
            ok = pdf["valid"].to_numpy(dtype=bool)
            slots = pdf["slots"].to_numpy()
            if keys:
                codes = pdf.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
                firsts = np.unique(codes, return_index=True)[1]
            else:
                codes, firsts = np.zeros(len(pdf), dtype=np.int64), np.zeros(1, dtype=np.int64)
            parts = []
            for g, first in enumerate(firsts):
                mine = codes == g
                good = slots[mine & ok]
                days = np.stack(good) if good.size else np.zeros((0, SLOTS), dtype=np.int64)
                part = summary_rows(days, int((mine & ~ok).sum()), coords, bins)
                for k in keys:
                    part[k] = pdf[k].iloc[first]
                parts.append(part)
            yield pd.concat(parts, ignore_index=True)[[*keys, "kind", "key", "w"]]

    schema = ", ".join([*(f"`{k}` {types[k]}" for k in keys), SUMMARY_ROW_DDL])
    rows = (
        days_df.select(*keys, "slots", valid_day(F.col("slots"), n_loc).alias("valid"))
        .mapInPandas(kernel, schema)
        .groupBy(*keys, "kind", "key")
        .agg(F.sum("w").alias("w"))
        .collect()
    )
    if expected is None:
        expected = [] if keys else [()]
    return summaries_by_group(rows, keys, n_loc, bins, name, expected)


#: The columns of summary rows (`summary_rows`), after any group columns.
SUMMARY_ROW_DDL = "kind int, key long, w long"


def summary_rows(
    days: np.ndarray, n_invalid: int, coords: np.ndarray, bins: MetricBins
) -> pd.DataFrame:
    """(kind, key, w) rows of the DaySummary of valid `days` ((n, 48) location ids, n >= 0)
    plus one K_INVALID row counting `n_invalid` rejected days: what Spark adds up."""
    parts = [pd.DataFrame({"kind": [K_INVALID], "key": [0], "w": [int(n_invalid)]})]
    if len(days):
        parts.append(_summary_rows(summarize_days(days.astype(np.int64), coords, bins)))
    return pd.concat(parts, ignore_index=True)


def summaries_by_group(
    rows: list,
    keys: list[str],
    n_loc: int,
    bins: MetricBins,
    name: str,
    expected: list[tuple] | None = None,
) -> dict[tuple, DaySummary]:
    """Summed (keys..., kind, key, w) rows -> {group: DaySummary}. A group of `expected`
    without rows raises InputDataError (it holds no days); a group with invalid days raises
    InvalidTrajectoryError (named by `name` and its key values)."""
    grouped: dict[tuple, list] = {tuple(g): [] for g in expected or []}
    for r in rows:
        grouped.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = {}
    for group, mine in grouped.items():
        label = f"{name} {dict(zip(keys, group, strict=True))}" if keys else name
        out[group] = _to_summary(mine, n_loc, bins.distance, bins.radius, label)
    return out


def _summary_rows(s: DaySummary) -> pd.DataFrame:
    """A DaySummary as (kind, key, w) rows (dropped values under key -1), zeros left out."""
    parts = [
        (K_DIST, s.distance, s.distance_dropped),
        (K_RAD, s.radius, s.radius_dropped),
        (K_DISTINCT, s.distinct_days, 0),
        (K_RUN, s.run_lengths, 0),
        (K_VISIT, s.visits, 0),
        (K_RANK, s.rank_slots, 0),
    ]
    kinds, keys, ws = [], [], []
    for kind, counts, dropped in parts:
        key = np.append(np.flatnonzero(counts), -1)
        w = np.append(counts[key[:-1]], dropped)
        kinds.append(np.full(key.size, kind))
        keys.append(key)
        ws.append(w)
    return pd.DataFrame(
        {"kind": np.concatenate(kinds), "key": np.concatenate(keys), "w": np.concatenate(ws)}
    )


def valid_day(slots: Column, n_loc: int) -> Column:
    """True for a day of exactly 48 non-null ids in [0, n_loc); never null."""
    in_range = F.forall(slots, lambda x: x.isNotNull() & (x >= 0) & (x < n_loc))
    return F.coalesce((F.size(slots) == SLOTS) & in_range, F.lit(False))


def _to_summary(
    rows: list, n_loc: int, dist_spec: HistogramSpec, rad_spec: HistogramSpec, name: str
) -> DaySummary:
    by_kind: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        by_kind.setdefault(r["kind"], []).append((r["key"], r["w"]))
    bad = sum(w for _, w in by_kind.get(K_INVALID, []))
    if bad:
        raise InvalidTrajectoryError(
            f"{name}: {bad} days do not hold exactly {SLOTS} non-null location ids in "
            f"[0, {n_loc - 1}] (column `slots`; ids index coords_df.loc_id)"
        )
    n_days = sum(w for _, w in by_kind.get(K_DISTINCT, []))
    if n_days == 0:
        raise InputDataError(f"{name} holds no days (an empty table cannot be evaluated)")

    def dense(kind: int, size: int) -> tuple[np.ndarray, int]:
        out, dropped = np.zeros(size, dtype=np.int64), 0
        for key, w in by_kind.get(kind, []):
            if key < 0:
                dropped += w
            else:
                out[key] += w
        return out, dropped

    dist, dist_drop = dense(K_DIST, dist_spec.n_bins)
    rad, rad_drop = dense(K_RAD, rad_spec.n_bins)
    if (dist_spec.overflow and dist_drop) or (rad_spec.overflow and rad_drop):
        raise InvalidParameterError("negative distance or radius met an overflow histogram")
    return DaySummary(
        n_days=n_days,
        distance=dist,
        distance_dropped=dist_drop,
        radius=rad,
        radius_dropped=rad_drop,
        distinct_days=dense(K_DISTINCT, SLOTS + 1)[0],
        run_lengths=dense(K_RUN, SLOTS + 1)[0],
        visits=dense(K_VISIT, n_loc)[0],
        rank_slots=dense(K_RANK, IRANK_TOP_K)[0],
    )

"""Utility of LDP output with Spark aggregations: NE, PRQ, ACD and Kendall tau.

The same definitions as `udfs.metrics` (the numpy reference; a test checks they agree):
- NE  = mean over trajectories of the mean per-point haversine error (km), / Delta_u;
- PRQ(delta) = share of all points within delta km of the truth (boundary inclusive);
- c(l) = number of trajectories visiting l at least once; top-k locations by true count
  (count desc, id asc), k = max(1, ceil(top * |P|)); ACD = mean |c_true - c_pert| over them;
- Kendall tau-b between c_true and c_pert over those locations (NaN if either is constant).
Distances are `jobs.spark.columns.haversine_km_col` (the haversine package's formula in Spark)
rounded to float32, like `LocationSpace.dist`, so both sides compare the same numbers.

Row shapes: pairs (group..., traj_key, true_ids array<int>, pert_ids array<int>)
-> per trajectory (group..., e = mean error km, m = points, w_i = points within delta_i) and
visit counts (group..., loc_id, c) -> metric rows (group..., metric, value). Point errors are
computed inside each trajectory row (coordinates as broadcast arrays indexed by loc_id), so no
point-level row is exploded or shuffled.

A set of pairs whose size the caller knows to be at most DRIVER_MAX_PAIRS is measured on the
driver instead: one collected copy, the numpy reference itself. Why: on a small release the
two Spark aggregations are nine jobs of scheduling (4.7 s of a 25 s collect in the test
suite's warm session) for kilobytes of work; at Telecom scale (1.1 M trajectories) the Spark
path is the one used.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.spark.columns import haversine_km_col
from udfs import metrics as M
from udfs.metrics import prq_name
from udfs.space import LocationSpace

GROUP = ("mechanism", "epsilon")
#: Up to this many pairs (trajectories), the figures are computed on the driver (module doc):
#: two int arrays of at most a few dozen points each, a few MB collected.
DRIVER_MAX_PAIRS = 100_000


def _km32(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Great-circle km rounded to float32 (the precision of `LocationSpace.dist`)."""
    return haversine_km_col(lat1, lon1, lat2, lon2).cast("float").cast("double")


def _with_coordinates(pairs: DataFrame, locations: DataFrame) -> DataFrame:
    """pairs + (lat_of, lon_of): arrays of P's coordinates indexed by loc_id (one broadcast row).

    Why arrays and not a join per point: every metric is then computed inside each trajectory
    row with higher-order functions, so no point-level row is ever exploded or shuffled.
    """
    coords = locations.agg(
        F.sort_array(F.collect_list(F.struct("loc_id", "lat", "lon"))).alias("c")
    ).select(F.col("c.lat").alias("lat_of"), F.col("c.lon").alias("lon_of"))
    return pairs.crossJoin(F.broadcast(coords))


def _errors(lat_of: Column, lon_of: Column) -> Column:
    """Per trajectory: the array of per-point errors in km (same-id pairs have error 0)."""

    def err(z: Column) -> Column:
        t, p = z["true_ids"], z["pert_ids"]
        return F.when(t == p, F.lit(0.0)).otherwise(
            _km32(lat_of[t], lon_of[t], lat_of[p], lon_of[p])
        )

    return F.transform(F.arrays_zip("true_ids", "pert_ids"), err)


def _within(delta_km: float):
    """x -> x <= delta (a one-argument lambda: Spark reads a second one as the index)."""
    limit = F.lit(float(delta_km))
    return lambda x: x <= limit


def _visit_counts(pairs: DataFrame, g: list[str], col: str, name: str) -> DataFrame:
    """c(l) per group: trajectories visiting l at least once (distinct ids inside each row)."""
    return (
        pairs.select(*g, F.explode(F.array_distinct(col)).alias("loc_id"))
        .groupBy(*g, "loc_id")
        .agg(F.count(F.lit(1)).alias(name))
    )


def ldp_metrics(
    pairs: DataFrame,
    locations: DataFrame,
    *,
    space: LocationSpace,
    prq_km: Sequence[float],
    top_fraction: float,
    group: Sequence[str] = GROUP,
    persist: bool = True,
    n_pairs: int | None = None,
) -> list[dict[str, Any]]:
    """NE, PRQ@delta, ACD and KendallTau per group (mechanism, epsilon) as metric rows.

    Returns dicts {**group values, "metric", "value"}; `locations` is the public set P with
    loc_id 0..|P|-1, the ids of `space`. `n_pairs`: how many rows `pairs` has, when the
    caller knows it; at most DRIVER_MAX_PAIRS measures them on the driver (module doc).
    Otherwise `pairs` (one row per trajectory) is read by two Spark aggregations:
    per-trajectory errors (NE, PRQ), then visit counts (ACD and Kendall's tau-b from them on
    the driver); it is persisted for them unless `persist=False` (the caller's pairs are a
    projection of a cached frame).
    """
    g = list(group)
    if n_pairs is not None and n_pairs <= DRIVER_MAX_PAIRS:
        return driver_metrics(pairs, space, prq_km=prq_km, top_fraction=top_fraction, group=g)
    return spark_metrics(pairs, locations, space=space, prq_km=prq_km,
                         top_fraction=top_fraction, group=g, persist=persist)


def driver_metrics(pairs: DataFrame, space: LocationSpace, *, prq_km: Sequence[float],
                   top_fraction: float, group: Sequence[str] = GROUP) -> list[dict[str, Any]]:
    """`ldp_metrics` of a small set of pairs: collected once, measured by `udfs.metrics`."""
    g = list(group)
    pdf = pairs.select(*g, "true_ids", "pert_ids").toPandas()
    rows: list[dict[str, Any]] = []
    for key, part in pdf.groupby(g, sort=True):
        named = {k: (v.item() if hasattr(v, "item") else v)
                 for k, v in zip(g, key, strict=True)}
        figures = M.utility([np.asarray(a, dtype=np.int64) for a in part["true_ids"]],
                            [np.asarray(a, dtype=np.int64) for a in part["pert_ids"]],
                            space, prq_km, top_fraction)
        rows += [{**named, "metric": m, "value": v} for m, v in figures.items()]
    return rows


def spark_metrics(
    pairs: DataFrame,
    locations: DataFrame,
    *,
    space: LocationSpace,
    prq_km: Sequence[float],
    top_fraction: float,
    group: Sequence[str] = GROUP,
    persist: bool = True,
) -> list[dict[str, Any]]:
    """`ldp_metrics` by two Spark aggregations, whatever the size of `pairs`."""
    g = list(group)
    diameter, n_locations = space.diameter, space.n
    pairs = pairs.select(*g, "traj_key", "true_ids", "pert_ids")
    if persist:
        pairs = pairs.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows: list[dict[str, Any]] = []
        # NE and PRQ in one job: per trajectory (mean error, points, points within delta).
        errs = _with_coordinates(pairs, locations).select(
            *g, _errors(F.col("lat_of"), F.col("lon_of")).alias("err")
        )
        size = F.size("err")
        per_traj = errs.select(
            *g,
            (F.aggregate("err", F.lit(0.0), lambda acc, x: acc + x) / size).alias("e"),
            size.alias("m"),
            *[F.size(F.filter("err", _within(d))).alias(f"w{i}") for i, d in enumerate(prq_km)],
        )
        totals = per_traj.groupBy(*g).agg(
            F.avg("e").alias("ne"),
            F.sum("m").alias("points"),
            *[F.sum(f"w{i}").alias(f"w{i}") for i in range(len(prq_km))],
        )
        settings = []
        for r in totals.collect():
            key = {k: r[k] for k in g}
            settings.append(tuple(key.values()))
            ne = r["ne"] / diameter if diameter > 0 else 0.0
            rows.append({**key, "metric": "NE", "value": float(ne)})
            for i, d in enumerate(prq_km):
                rows.append({**key, "metric": prq_name(d), "value": r[f"w{i}"] / r["points"]})
        rows += _ranking_metrics(pairs, g, settings, top_fraction, n_locations)
        return rows
    finally:
        if persist:
            pairs.unpersist()


def _ranking_metrics(
    pairs: DataFrame, g: list[str], settings: list[tuple], top_fraction: float,
    n_locations: int,
) -> list[dict[str, Any]]:
    """ACD and Kendall tau-b per group (`settings`: the groups' values, in `g`'s order) from
    the visit counts c_true(l), c_pert(l).

    The counts are the Spark aggregation (one job over the trajectories); what is left is a
    table of at most |P| rows per group, ranked and compared on the driver with integer
    arithmetic (a Spark job per step cost more in scheduling than the work).
    """
    k = max(1, math.ceil(top_fraction * n_locations))
    counts = (
        _visit_counts(pairs, g, "true_ids", "ct")
        .join(_visit_counts(pairs, g, "pert_ids", "cp"), [*g, "loc_id"], "full")
        .fillna(0, ["ct", "cp"])
        .collect()
    )
    by_setting: dict[tuple, list] = {key: [] for key in settings}
    for r in counts:
        by_setting[tuple(r[c] for c in g)].append((r["loc_id"], r["ct"], r["cp"]))
    rows = []
    for key, visits in by_setting.items():
        ct = np.zeros(n_locations, dtype=np.int64)  # locations nobody visits count 0
        cp = np.zeros(n_locations, dtype=np.int64)
        for loc, t, p in visits:
            ct[loc], cp[loc] = t, p
        top = np.lexsort((np.arange(n_locations), -ct))[:k]  # count desc, then id asc
        x, y = ct[top], cp[top]
        s = int((np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])).sum()) // 2
        named = dict(zip(g, key, strict=True))
        rows.append({**named, "metric": "ACD", "value": float(np.abs(x - y).mean())})
        rows.append({**named, "metric": "KendallTau",
                     "value": _tau_b(s, len(top), _ties(x), _ties(y))})
    return rows


def _ties(values: np.ndarray) -> int:
    """Pairs of equal values (the tie term of tau-b)."""
    m = np.unique(values, return_counts=True)[1]
    return int((m * (m - 1) // 2).sum())


def _tau_b(s: int, k: int, tie_x: int, tie_y: int) -> float:
    """Kendall tau-b from the concordant-minus-discordant sum and the tie counts."""
    n0 = k * (k - 1) // 2
    if k < 2 or n0 == tie_x or n0 == tie_y:
        return math.nan
    return float(s / math.sqrt((n0 - tie_x) * (n0 - tie_y)))

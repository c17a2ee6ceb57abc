"""Utility of LDP output with Spark aggregations: NE, PRQ, ACD and Kendall tau.

The same definitions as `udfs.metrics` (the numpy reference; a test checks they agree):
- NE  = mean over trajectories of the mean per-point haversine error (km), / Delta_u;
- PRQ(delta) = share of all points within delta km of the truth (boundary inclusive);
- c(l) = number of trajectories visiting l at least once; top-k locations by true count
  (count desc, id asc), k = max(1, ceil(top * |P|)); ACD = mean |c_true - c_pert| over them;
- Kendall tau-b between c_true and c_pert over those locations (NaN if either is constant).
Distances are the haversine package's formula evaluated in Spark and rounded to float32, like
`LocationSpace.dist`, so both sides compare the same numbers.

Row shapes: pairs (group..., traj_key, true_ids array<int>, pert_ids array<int>)
-> points (group..., traj_key, pos, t, p, err_km) -> metric rows (group..., metric, value).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

EARTH_RADIUS_KM = 6371.0088  # the haversine package's mean Earth radius
GROUP = ("mechanism", "epsilon")


def haversine_km(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Great-circle km in the haversine package's operation order, rounded to float32."""
    la1, lo1, la2, lo2 = (F.radians(c) for c in (lat1, lon1, lat2, lon2))
    d = F.pow(F.sin((la2 - la1) * 0.5), 2) + F.cos(la1) * F.cos(la2) * F.pow(
        F.sin((lo2 - lo1) * 0.5), 2
    )
    km = F.lit(EARTH_RADIUS_KM) * (F.lit(2.0) * F.asin(F.sqrt(d)))
    return km.cast("float").cast("double")


def point_errors(pairs: DataFrame, locations: DataFrame, group: Sequence[str] = GROUP) -> DataFrame:
    """One row per point: (group..., traj_key, pos, t, p, err_km); same-id pairs have err 0."""
    g = list(group)
    z = pairs.select(
        *g, "traj_key", F.posexplode(F.arrays_zip("true_ids", "pert_ids")).alias("pos", "z")
    ).select(*g, "traj_key", "pos", F.col("z.true_ids").alias("t"), F.col("z.pert_ids").alias("p"))
    loc = locations.select("loc_id", "lat", "lon")
    a = F.broadcast(loc.toDF("t", "t_lat", "t_lon"))
    b = F.broadcast(loc.toDF("p", "p_lat", "p_lon"))
    pts = z.join(a, "t").join(b, "p")
    err = F.when(F.col("t") == F.col("p"), F.lit(0.0)).otherwise(
        haversine_km(F.col("t_lat"), F.col("t_lon"), F.col("p_lat"), F.col("p_lon"))
    )
    return pts.select(*g, "traj_key", "pos", "t", "p", err.alias("err_km"))


def _visit_counts(pts: DataFrame, g: list[str], col: str, name: str) -> DataFrame:
    return (
        pts.select(*g, "traj_key", F.col(col).alias("loc_id"))
        .distinct()
        .groupBy(*g, "loc_id")
        .agg(F.count(F.lit(1)).alias(name))
    )


def ldp_metrics(
    pairs: DataFrame,
    locations: DataFrame,
    *,
    diameter: float,
    prq_km: Sequence[float],
    top_fraction: float,
    n_locations: int,
    group: Sequence[str] = GROUP,
) -> list[dict[str, Any]]:
    """NE, PRQ@delta, ACD and KendallTau per group (mechanism, epsilon) as metric rows.

    Returns dicts {**group values, "metric", "value"}; `locations` is the public set P with
    loc_id 0..n_locations-1 (the same ids as the LocationSpace). Two Spark jobs: the point
    errors (NE, PRQ), then visit counts, ranking and Kendall's pair sums.
    """
    g = list(group)
    pts = point_errors(pairs, locations, g).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows: list[dict[str, Any]] = []
        # NE and PRQ in one job: per trajectory (sum of errors, points, points within delta).
        within = [
            F.sum((F.col("err_km") <= F.lit(float(d))).cast("long")).alias(f"w{i}")
            for i, d in enumerate(prq_km)
        ]
        per_traj = pts.groupBy(*g, "traj_key").agg(
            F.avg("err_km").alias("e"), F.count(F.lit(1)).alias("m"), *within
        )
        totals = per_traj.groupBy(*g).agg(
            F.avg("e").alias("ne"),
            F.sum("m").alias("points"),
            *[F.sum(f"w{i}").alias(f"w{i}") for i in range(len(prq_km))],
        )
        for r in totals.collect():
            key = {k: r[k] for k in g}
            ne = r["ne"] / diameter if diameter > 0 else 0.0
            rows.append({**key, "metric": "NE", "value": float(ne)})
            for i, d in enumerate(prq_km):
                rows.append({**key, "metric": prq_name(d), "value": r[f"w{i}"] / r["points"]})
        rows += _ranking_metrics(pts, locations, g, top_fraction, n_locations)
        return rows
    finally:
        pts.unpersist()


def prq_name(delta_km: float) -> str:
    return f"PRQ@{float(delta_km):g}km"


def _ranking_metrics(
    pts: DataFrame, locations: DataFrame, g: list[str], top_fraction: float, n_locations: int
) -> list[dict[str, Any]]:
    k = max(1, math.ceil(top_fraction * n_locations))
    settings = pts.select(*g).distinct()
    full = (
        settings.crossJoin(F.broadcast(locations.select("loc_id")))
        .join(_visit_counts(pts, g, "t", "ct"), [*g, "loc_id"], "left")
        .join(_visit_counts(pts, g, "p", "cp"), [*g, "loc_id"], "left")
        .fillna(0, ["ct", "cp"])
    )
    w = Window.partitionBy(*g).orderBy(F.col("ct").desc(), F.col("loc_id").asc())
    top = full.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= k)
    top = top.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        acd = top.groupBy(*g).agg(F.avg(F.abs(F.col("ct") - F.col("cp"))).alias("acd"))
        a, b = top.alias("a"), top.alias("b")
        cond = [F.col(f"a.{c}").eqNullSafe(F.col(f"b.{c}")) for c in g]
        cond.append(F.col("a.loc_id") < F.col("b.loc_id"))
        s = (
            a.join(b, cond)
            .groupBy(*[F.col(f"a.{c}").alias(c) for c in g])
            .agg(
                F.sum(
                    F.signum(F.col("a.ct") - F.col("b.ct"))
                    * F.signum(F.col("a.cp") - F.col("b.cp"))
                )
                .cast("long")
                .alias("s")
            )
        )
        ties = {}
        for side in ("ct", "cp"):
            ties[side] = (
                top.groupBy(*g, side)
                .agg(F.count(F.lit(1)).alias("m"))
                .groupBy(*g)
                .agg(F.sum(F.col("m") * (F.col("m") - 1) / 2).cast("long").alias(f"tie_{side}"))
            )
        summary = (
            acd.join(s, g, "left")
            .join(ties["ct"], g, "left")
            .join(ties["cp"], g, "left")
            .join(top.groupBy(*g).agg(F.count(F.lit(1)).alias("k")), g, "left")
            .collect()
        )
    finally:
        top.unpersist()
    rows = []
    for r in summary:
        key = {c: r[c] for c in g}
        rows.append({**key, "metric": "ACD", "value": float(r["acd"])})
        rows.append(
            {
                **key,
                "metric": "KendallTau",
                "value": _tau_b(r["s"] or 0, r["k"], r["tie_ct"] or 0, r["tie_cp"] or 0),
            }
        )
    return rows


def _tau_b(s: int, k: int, tie_x: int, tie_y: int) -> float:
    """Kendall tau-b from the concordant-minus-discordant sum and the tie counts."""
    n0 = k * (k - 1) // 2
    if k < 2 or n0 == tie_x or n0 == tie_y:
        return math.nan
    return float(s / math.sqrt((n0 - tie_x) * (n0 - tie_y)))

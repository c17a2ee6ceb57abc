"""Spark twin of `udfs.mobility.jsd_metrics`: per-day statistics on executors, JSDs on the driver.

Each table of days (column `slots` array<int>, 48 location ids; other columns ignored) is reduced
in one Spark job to a `udfs.mobility_stats.DaySummary` (a few thousand numbers whatever the number
of days); `udfs.mobility.compare_summaries` then computes the divergences with the same numpy
binning and JSD as the numpy core. The bins come from `udfs.mobility.metric_bins`; the Spark
expressions below mirror `udfs.mobility_stats` operation for operation (same formulas, same order
of floating-point additions), so paper mode agrees bit for bit with numpy and geo mode up to the
last-ulp differences of the JVM's and numpy's sin/cos/asin (see tests/jobs/test_mobility_spark.py).
engine="pandas" instead runs the numpy core itself per Arrow batch (mapInPandas) and only the
bucket counts are added up by Spark: no mirrored logic at all, and about 5x faster.
`summarize_groups_pandas` does the same for many sets of days in one pass (one DaySummary per
value of some group columns), and `summary_rows` / `summaries_by_group` are its two halves for
callers that build their days inside their own task (jobs/evaluate.py, perturbed comparisons).

Row shapes (engine="sql"):
  days      (slots array<int>, valid)                           one row per day
  + consts  (lat_of, lon_of by loc id; dist_edges, rad_edges)   1-row broadcast cross join
  per day   (+ lat, lon [48], locs, cnt, moves, cx, cy, move_b, sq)   one row per day
  items     (kind int, key bigint, w bigint)                    ~10 rows per day (explode)
  grouped   (kind, key, w = sum)                                a few thousand rows, collected
Speed-ups that keep the values identical: a stay's distance is exactly 0 (bin 0), so only moves
are measured; a slot's squared distance to the centroid is computed once per distinct location
and looked up per slot, then averaged in the same pairwise order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from udfs.errors import InputDataError, InvalidParameterError, InvalidTrajectoryError
from udfs.mobility import compare_summaries, metric_bins, validate_coords
from udfs.mobility_bins import (
    GEOLIFE_MAX_DISTANCE_DEG2,
    IRANK_TOP_K,
    SLOTS,
    HistogramSpec,
    MetricBins,
    bucket_index,
)
from udfs.mobility_stats import EARTH_RADIUS_KM, SUM_LANES, DaySummary, summarize_days

# Item kinds of the exploded per-day rows.
K_INVALID, K_DIST, K_RAD, K_DISTINCT, K_RUN, K_VISIT, K_RANK = range(7)


def jsd_metrics_spark(
    real_df: DataFrame,
    generated_df: DataFrame,
    coords_df: DataFrame,
    mode: str,
    *,
    max_distance: float = GEOLIFE_MAX_DISTANCE_DEG2,
    engine: str = "sql",
) -> dict[str, float]:
    """Same result as `udfs.mobility.jsd_metrics` for days held in Spark (see module docstring).

    coords_df: loc_id (0..L-1, each once), lat, lon; collected to the driver (L is small).
    engine: "sql" computes the per-day statistics with Spark SQL array functions; "pandas" runs
    the numpy core (`udfs.mobility_stats.summarize_days`) on Arrow batches with mapInPandas and
    lets Spark add up the per-batch histograms (same result; about 5x faster on local[2]).
    Runtime: one pass over each table; the driver receives O(bins + L) rows per table.
    """
    bins = metric_bins(mode, max_distance)
    coords = collect_coords(coords_df, mode)
    if engine == "sql":
        real = summarize_days_spark(real_df, coords, mode, bins.distance, bins.radius, "real_df")
        gen = summarize_days_spark(
            generated_df, coords, mode, bins.distance, bins.radius, "generated_df"
        )
    elif engine == "pandas":
        real = summarize_days_pandas(real_df, coords, bins, "real_df")
        gen = summarize_days_pandas(generated_df, coords, bins, "generated_df")
    else:
        raise InvalidParameterError(f"engine must be 'sql' or 'pandas', got {engine!r}")
    return compare_summaries(real, gen, bins)


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
        days_df.select(*keys, "slots", _valid(F.col("slots"), n_loc).alias("valid"))
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


def _valid(slots: Column, n_loc: int) -> Column:
    """True for a day of exactly 48 non-null ids in [0, n_loc); never null."""
    in_range = F.forall(slots, lambda x: x.isNotNull() & (x >= 0) & (x < n_loc))
    return F.coalesce((F.size(slots) == SLOTS) & in_range, F.lit(False))


def collect_coords(coords_df: DataFrame, mode: str) -> np.ndarray:
    """(L, 2) lat/lon by loc id; loc ids must be exactly 0..L-1."""
    rows = coords_df.select("loc_id", "lat", "lon").orderBy("loc_id").collect()
    ids = np.array([r["loc_id"] for r in rows], dtype=np.int64)
    if ids.size == 0 or not np.array_equal(ids, np.arange(ids.size)):
        raise InputDataError(
            f"coords_df must hold each loc_id 0..L-1 exactly once (row i = location id i); got "
            f"{ids.size} rows with ids {ids[:5].tolist()}..."
        )
    coords = np.array([[r["lat"], r["lon"]] for r in rows], dtype=np.float64)
    return validate_coords(coords, mode)


def summarize_days_spark(
    days_df: DataFrame,
    coords: np.ndarray,
    mode: str,
    dist_spec: HistogramSpec,
    rad_spec: HistogramSpec,
    name: str,
) -> DaySummary:
    """One Spark job: the DaySummary of `days_df` (mirrors `udfs.mobility_stats.summarize_days`)."""
    if bucket_index(np.zeros(1), dist_spec)[0] != 0:
        raise InvalidParameterError("distance bins must start at 0 (a stay is bin 0)")
    n_loc = coords.shape[0]
    arrays = ("lat_of", "lon_of", "dist_edges", "rad_edges")
    const_schema = T.StructType(
        [T.StructField(c, T.ArrayType(T.DoubleType(), False), False) for c in arrays]
    )
    values = (coords[:, 0], coords[:, 1], dist_spec.edges, rad_spec.edges)
    consts = days_df.sparkSession.createDataFrame([tuple(v.tolist() for v in values)], const_schema)
    slots, lat_of, lon_of = F.col("slots"), F.col("lat_of"), F.col("lon_of")
    days = days_df.select(slots, _valid(slots, n_loc).alias("valid")).crossJoin(F.broadcast(consts))
    # (slots, valid, lat_of, lon_of, dist_edges, rad_edges): one row per day
    # Values used more than once are bound once with _let: Spark's optimizer inlines a column
    # that is referenced once, even inside a lambda evaluated for every element.
    ok = F.col("valid")  # invalid days get null arrays here and one K_INVALID item below
    moves = F.filter(F.sequence(F.lit(0), F.lit(SLOTS - 2)), lambda i: slots[i] != slots[i + 1])
    days = days.select(
        "*",
        F.when(ok, F.transform(slots, lambda x: lat_of[x])).alias("lat"),
        F.when(ok, F.transform(slots, lambda x: lon_of[x])).alias("lon"),
        F.when(ok, F.array_distinct(slots)).alias("locs"),
        F.when(ok, moves).alias("moves"),
    )
    # + (lat, lon per slot; locs: distinct ids; moves: t with slot t != slot t+1)
    lat, lon, locs = F.col("lat"), F.col("lon"), F.col("locs")
    cnt = F.transform(locs, lambda x: F.size(F.filter(slots, lambda y: y == x)))
    days = days.select("*", cnt.alias("cnt"), _mean48(lat).alias("cx"), _mean48(lon).alias("cy"))
    # + (cnt: slots at each distinct id; cx, cy: centroid)
    sq_by_loc = F.map_from_arrays(
        locs,
        F.transform(
            locs, lambda x: _sq_to_centroid(mode, lat_of[x], lon_of[x], F.col("cx"), F.col("cy"))
        ),
    )
    sq = _let(sq_by_loc, lambda m: F.transform(slots, lambda x: m[x]))
    move_bins = F.transform(
        F.col("moves"), lambda i: _bucket(_step(mode, lat, lon, i), dist_spec, F.col("dist_edges"))
    )
    days = days.select(
        "valid",
        "slots",
        "locs",
        "cnt",
        "moves",
        "rad_edges",
        move_bins.alias("move_b"),
        sq.alias("sq"),
    )
    # (..., move_b: bin of each move's distance, sq: squared distance to the centroid per slot)
    radius = _mean48(F.col("sq")) if mode == "paper" else F.sqrt(_mean48(F.col("sq")))
    # A stay (slot t == slot t+1) has distance exactly 0 in both modes, hence bin 0.
    stays = F.lit(SLOTS - 1) - F.size(F.col("moves"))
    items = F.when(
        F.col("valid"),
        F.concat(
            F.array(_item(K_DIST, F.lit(0), stays)),
            F.transform(F.col("move_b"), lambda b: _item(K_DIST, b, F.lit(1))),
            F.array(_item(K_RAD, _bucket(radius, rad_spec, F.col("rad_edges")), F.lit(1))),
            F.array(_item(K_DISTINCT, F.size(locs), F.lit(1))),
            _tally(K_RUN, _run_lengths(slots)),
            F.zip_with(locs, F.col("cnt"), lambda x, n: _item(K_VISIT, x, n)),
            F.transform(
                F.slice(F.sort_array(F.col("cnt"), asc=False), 1, IRANK_TOP_K),
                lambda n, r: _item(K_RANK, r, n),
            ),
        ),
    ).otherwise(F.array(_item(K_INVALID, F.lit(0), F.lit(1))))
    rows = (
        days.select(F.explode(items).alias("it"))
        .groupBy("it.kind", "it.key")
        .agg(F.sum("it.w").alias("w"))
        .collect()
    )
    # (kind, key, w): a few thousand rows on the driver
    return _to_summary(rows, n_loc, dist_spec, rad_spec, name)


def _let(value: Column, body) -> Column:
    """body(v) with `value` evaluated once per row (bound as a lambda variable)."""
    return F.transform(F.array(value), body)[0]


def _item(kind: int, key: Column, w: Column) -> Column:
    return F.struct(
        F.lit(kind).alias("kind"), key.cast("bigint").alias("key"), w.cast("bigint").alias("w")
    )


def _tally(kind: int, values: Column) -> Column:
    """One item per distinct value of an array, weighted by its multiplicity."""
    return _let(
        values,
        lambda v: F.transform(
            F.array_distinct(v), lambda b: _item(kind, b, F.size(F.filter(v, lambda y: y == b)))
        ),
    )


def _run_lengths(slots: Column) -> Column:
    """Lengths of the runs of equal consecutive ids (mirrors mobility_stats.run_length_counts)."""
    cuts = F.filter(F.sequence(F.lit(1), F.lit(SLOTS - 1)), lambda i: slots[i] != slots[i - 1])
    starts = F.concat(F.array(F.lit(0)), cuts)
    ends = F.concat(cuts, F.array(F.lit(SLOTS)))
    return F.zip_with(starts, ends, lambda s, e: e - s)


def _mean48(x: Column) -> Column:
    """Mean of a 48-element array in the order of mobility_stats.row_mean48 (numpy pairwise)."""
    lanes = []
    for j in range(SUM_LANES):
        acc = x[j]
        for k in range(1, SLOTS // SUM_LANES):
            acc = acc + x[j + k * SUM_LANES]
        lanes.append(acc)
    r = lanes
    return (((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))) / F.lit(SLOTS)


def _haversine(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Mirrors mobility_stats.haversine_km."""
    p1, p2 = F.radians(lat1), F.radians(lat2)
    sp = F.sin((p2 - p1) / 2)
    sl = F.sin((F.radians(lon2) - F.radians(lon1)) / 2)
    a = sp * sp + F.cos(p1) * F.cos(p2) * (sl * sl)
    return F.lit(2 * EARTH_RADIUS_KM) * F.asin(F.sqrt(F.least(a, F.lit(1.0))))


def _step(mode: str, lat: Column, lon: Column, i: Column) -> Column:
    """Distance between slots i and i+1 (paper: deg^2, geo: km)."""
    if mode == "paper":
        dx, dy = lat[i] - lat[i + 1], lon[i] - lon[i + 1]
        return dx * dx + dy * dy
    return _haversine(lat[i], lon[i], lat[i + 1], lon[i + 1])


def _sq_to_centroid(mode: str, lat: Column, lon: Column, cx: Column, cy: Column) -> Column:
    """Squared distance of (lat, lon) to the centroid: paper deg^2, geo haversine km^2."""
    if mode == "paper":
        return (lat - cx) * (lat - cx) + (lon - cy) * (lon - cy)
    d = _haversine(cx, cy, lat, lon)
    return d * d


def _bucket(v: Column, spec: HistogramSpec, edges: Column) -> Column:
    """Bin index of v as `udfs.mobility_bins.bucket_index`; -1 = dropped (paper semantics).

    A first guess floor((v - lo) / step) is within one bin of the true one (edges are
    np.arange values, i * step up to i ulps), so one comparison with the exact edges on each
    side gives edges[idx] <= v < edges[idx + 1], as np.searchsorted does.
    """
    m = spec.edges.size - 1
    lo, hi = float(spec.edges[0]), float(spec.edges[-1])

    def guess(x: Column) -> Column:
        clipped = F.least(F.greatest(x, F.lit(lo)), F.lit(hi))
        return F.least(F.floor((clipped - F.lit(lo)) / F.lit(spec.step)).cast("int"), F.lit(m - 1))

    def index(x: Column, g: Column) -> Column:
        idx = F.when(x < edges[g], g - 1).when(x >= edges[g + 1], g + 1).otherwise(g)
        if spec.overflow:
            return idx  # m = overflow bin; -1 impossible for v >= 0 (checked on the driver)
        return F.when(idx < m, idx).when(x == F.lit(hi), F.lit(m - 1)).otherwise(F.lit(-1))

    return _let(v, lambda x: _let(guess(x), lambda g: index(x, g)))


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

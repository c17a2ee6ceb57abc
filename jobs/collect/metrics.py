"""Utility of LDP output on Spark: NE, PRQ, ACD and Kendall tau of a set of (true, perturbed)
pairs, one job whatever its size.

The definitions are `udfs.metrics` (the numpy reference; tests check the figures equal it).
Each task sums the `udfs.metrics.UtilityCounts` of its rows (per group: trajectories, summed
per-trajectory mean errors, points, points within each delta, both visit-count vectors) with
`udfs.metrics.flat_counts` on the Arrow batches; the driver adds the partitions' counts and
computes the figures once. Why: every figure is a function of sums that add up over any split
of the pairs, so no point-level row is exploded or shuffled, and the job is a single pass over
the (cached) release with no join, where separate Spark aggregations would each schedule
jobs of their own. Distances are P's float32
haversine numbers (`udfs.space.distances_from_coords`): a task holds P's coordinates only.

Row shapes: pairs (group..., true_ids array<int>, pert_ids array<int>, ...) -> per task and
group one counts row (COUNT_FIELDS) -> metric rows {group..., metric, value} on the driver.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from udfs.errors import InvalidTrajectoryError
from udfs.metrics import UtilityCounts, flat_counts
from udfs.space import LocationSpace

GROUP = ("mechanism", "epsilon")
#: The counts row of one group in one task (after the group's own columns).
COUNT_FIELDS = [
    T.StructField("trajectories", T.LongType()),
    T.StructField("error_km", T.DoubleType()),
    T.StructField("points", T.LongType()),
    T.StructField("within", T.ArrayType(T.LongType())),
    T.StructField("true_visits", T.ArrayType(T.LongType())),
    T.StructField("pert_visits", T.ArrayType(T.LongType())),
]


def ldp_metrics(
    pairs: DataFrame,
    *,
    space: LocationSpace,
    prq_km: Sequence[float],
    top_fraction: float,
    group: Sequence[str] = GROUP,
) -> list[dict[str, Any]]:
    """NE, PRQ@delta, ACD and KendallTau per group (mechanism, epsilon) as metric rows.

    Returns dicts {**group values, "metric", "value"}, groups in sorted order; none for no
    pairs. `pairs` has one row per trajectory with `true_ids` and `pert_ids` (ids of `space`);
    it is read once (module doc).
    """
    g = list(group)
    deltas = [float(d) for d in prq_km]
    totals = _group_counts(pairs, g, space.coords, deltas)
    rows: list[dict[str, Any]] = []
    for key in sorted(totals):
        figures = totals[key].figures(space.diameter, deltas, top_fraction)
        named = dict(zip(g, key, strict=True))
        rows += [{**named, "metric": m, "value": v} for m, v in figures.items()]
    return rows


def _group_counts(pairs: DataFrame, g: list[str], coords: np.ndarray,
                  deltas: list[float]) -> dict[tuple, UtilityCounts]:
    """Per group, the UtilityCounts of every row of `pairs`: one mapInArrow pass, tasks' counts
    summed on the driver."""
    source = pairs.select(*g, "true_ids", "pert_ids")
    schema = T.StructType([source.schema[c] for c in g] + COUNT_FIELDS)
    totals: dict[tuple, UtilityCounts] = {}
    for r in source.mapInArrow(counts_fn(g, coords, deltas), schema).collect():
        key = tuple(r[c] for c in g)
        part = counts_of_row(r)
        totals[key] = totals[key] + part if key in totals else part
    return totals


def counts_of_row(r) -> UtilityCounts:
    """The UtilityCounts of one counts row (a Spark Row or a dict of COUNT_FIELDS)."""
    return UtilityCounts(r["trajectories"], r["error_km"], r["points"],
                         np.asarray(r["within"], dtype=np.int64),
                         np.asarray(r["true_visits"], dtype=np.int64),
                         np.asarray(r["pert_visits"], dtype=np.int64))


def counts_fn(g: list[str], coords: np.ndarray, deltas: list[float]):
    """The task function: Arrow batches of pairs -> one batch of counts rows, one per group
    the task saw (none for an empty task). Also the local backend of the tests."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc: dict[tuple, UtilityCounts] = {}
        types = None
        for b in batches:
            if b.num_rows == 0:
                continue
            types = [b.schema.field(c).type for c in g]
            keys = list(zip(*(b.column(c).to_pylist() for c in g), strict=True))
            codes: dict[tuple, int] = {}
            code = np.fromiter((codes.setdefault(k, len(codes)) for k in keys), np.int64,
                               len(keys))
            for key, c in codes.items():
                part = b if len(codes) == 1 else b.take(pa.array(np.flatnonzero(code == c)))
                t, p = part.column("true_ids"), part.column("pert_ids")
                lens = t.value_lengths()
                if t.null_count or p.null_count or not lens.equals(p.value_lengths()):
                    raise InvalidTrajectoryError(
                        f"utility of {key}: a trajectory's true_ids and pert_ids are missing "
                        "or of different lengths; pass one perturbed id per true point")
                counts = flat_counts(t.flatten().to_numpy(), p.flatten().to_numpy(),
                                     lens.to_numpy(), coords, deltas)
                acc[key] = acc[key] + counts if key in acc else counts
        if not acc:
            return
        keys = list(acc)
        cols = {c: pa.array([k[i] for k in keys], type=types[i]) for i, c in enumerate(g)}
        cols.update(
            trajectories=pa.array([acc[k].trajectories for k in keys], pa.int64()),
            error_km=pa.array([acc[k].error_km for k in keys], pa.float64()),
            points=pa.array([acc[k].points for k in keys], pa.int64()),
            within=pa.array([acc[k].within.tolist() for k in keys], pa.list_(pa.int64())),
            true_visits=pa.array([acc[k].true_visits.tolist() for k in keys],
                                 pa.list_(pa.int64())),
            pert_visits=pa.array([acc[k].pert_visits.tolist() for k in keys],
                                 pa.list_(pa.int64())),
        )
        yield pa.RecordBatch.from_pydict(cols)

    return run

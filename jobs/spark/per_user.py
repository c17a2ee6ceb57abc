"""The one per-user operator: run a pure kernel over whole users, on Spark or on plain pandas.

Why one operator: the collect planner and release, the epsilon study and the evaluation of
trajectory pairs must each see every row of a user in one call (a user's budget, noise stream
and trajectory pairs are per user); a user cut in two would be planned twice and charged
twice. The guarantee is made here once, for every stage:

1. `repartition(key)` and `sortWithinPartitions(key, *order)`: each user's rows are in one
   task, contiguous, in a fixed order;
2. Arrow cuts a partition into batches of `maxRecordsPerBatch` rows wherever it likes, so the
   batches are re-cut (`whole_groups`): the last user of a batch is held back and joined to the
   next, and a key out of order stops the task (it would mean a user seen twice);
3. the kernel is called on a pandas DataFrame (or a pyarrow Table) of one or more whole users,
   with the broadcast value (`shared`), deserialised once per Python worker process and kept
   for the tasks it runs.

Two backends run the same re-cutting code: `per_user` (Spark `mapInPandas` / `mapInArrow`) and
`per_user_local` (plain pandas, batches cut at a chosen size), so a kernel is unit-tested
without a JVM and the Spark backend is tested once for all (tests/jobs/test_per_user.py).
`per_partition` is the other operator: one call per task with all of its (whole) users, no
order and no re-cutting. A value the kernels share travels as an explicit `Shared` handle
that its creator frees.

Kernel: `kernel(frame, shared) -> pandas.DataFrame | pyarrow.Table | iterable of them`, where
`frame` holds whole users sorted by (key, *order), with at most `max_rows` rows unless one user
alone has more.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

Kernel = Callable[[Any, Any], Any]

_SHARED: dict[str, Any] = {}  # broadcast token -> value, per Python worker process


def _keys(frame, key: str) -> np.ndarray:
    if isinstance(frame, pd.DataFrame):
        return frame[key].to_numpy()
    return frame.column(key).to_numpy(zero_copy_only=False)


def _slice(frame, a: int, b: int):
    if isinstance(frame, pd.DataFrame):
        return frame.iloc[a:b].reset_index(drop=True)
    return frame.slice(a, b - a)


def _concat(a, b):
    if isinstance(a, pd.DataFrame):
        return pd.concat([a, b], ignore_index=True)
    return pa.concat_tables([a, b])


def whole_groups(batches: Iterable[Any], key: str) -> Iterator[Any]:
    """Re-cut sorted batches (pandas DataFrames or pyarrow Tables) so no group of equal `key`
    straddles two.

    The last group of each batch is held back and prepended to the next; a key smaller than
    the one before stops the task (AssertionError): a user would be seen twice.
    """
    carry = None
    last = None
    for frame in batches:
        if isinstance(frame, pa.RecordBatch):
            frame = pa.Table.from_batches([frame])
        if carry is not None:
            frame = _concat(carry, frame)
            carry = None
        if not len(frame):
            continue
        keys = _keys(frame, key)
        if (len(keys) > 1 and (keys[1:] < keys[:-1]).any()) or (
                last is not None and keys[0] < last):
            raise AssertionError(f"rows are not sorted by {key} within the partition: a user "
                                 "would be split across kernel calls")
        last = keys[-1]
        cut = int(np.searchsorted(keys, keys[-1], side="left"))
        carry = _slice(frame, cut, len(frame))
        if cut:
            yield _slice(frame, 0, cut)
    if carry is not None and len(carry):
        yield carry


def bounded(frames: Iterable[Any], key: str, max_rows: int | None) -> Iterator[Any]:
    """Each frame of whole users cut into pieces of at most `max_rows` rows, at user bounds
    (a single user with more rows stays whole)."""
    for frame in frames:
        if max_rows is None or len(frame) <= max_rows:
            yield frame
            continue
        starts = np.array([a for a, _ in user_bounds(_keys(frame, key))] + [len(frame)])
        a = 0
        while a < len(frame):
            fits = starts[(starts > a) & (starts <= a + max_rows)]
            b = int(fits[-1]) if fits.size else int(starts[starts > a][0])
            yield _slice(frame, a, b)
            a = b


def user_bounds(keys: np.ndarray) -> list[tuple[int, int]]:
    """[(start, stop)] of each run of equal keys in sorted `keys`: one per user."""
    cuts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    edges = [0, *cuts.tolist(), len(keys)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _outputs(result: Any, arrow: bool) -> Iterator[Any]:
    """A kernel's result as batches of the backend's kind (None: nothing)."""
    if result is None:
        return
    if isinstance(result, (pd.DataFrame, pa.Table, pa.RecordBatch)):
        result = [result]
    for out in result:
        if isinstance(out, pd.DataFrame):
            if arrow:
                yield from pa.Table.from_pandas(out, preserve_index=False).to_batches()
            else:
                yield out
        else:
            table = out if isinstance(out, pa.Table) else pa.Table.from_batches([out])
            if arrow:
                yield from table.to_batches()
            else:
                yield table.to_pandas()


def _apply(batches: Iterable[Any], kernel: Kernel, shared: Any, key: str,
           max_rows: int | None, arrow: bool) -> Iterator[Any]:
    for frame in bounded(whole_groups(batches, key), key, max_rows):
        yield from _outputs(kernel(frame, shared), arrow)


class Shared:
    """An explicit handle on a value broadcast once to the workers of per-user kernels.

    Pass it as `shared=` to :func:`per_user` or :func:`per_partition`; the kernel receives the
    value, deserialised once per worker process and kept for the tasks it runs. The caller
    owns the broadcast: `free()` it after the last action that reads a result built with it,
    or use the handle as a context manager (`with Shared(spark, space) as shared: ...`)."""

    def __init__(self, spark, value: Any):
        self._broadcast = spark.sparkContext.broadcast(value)
        self._token = uuid.uuid4().hex

    def value(self) -> Any:
        """The value (on a worker: deserialised on first use in the process, then cached)."""
        if self._token not in _SHARED:
            _SHARED[self._token] = self._broadcast.value
        return _SHARED[self._token]

    def free(self) -> None:
        """Destroy the broadcast (no result built with it may be computed afterwards)."""
        self._broadcast.destroy()

    def __enter__(self) -> Shared:
        return self

    def __exit__(self, *exc) -> None:
        self.free()


def _partitioned(df, key: str, partitions: int | None):
    """`df` hash-partitioned by `key` into an explicit number of partitions (None:
    spark.sql.shuffle.partitions). Always explicit: adaptive execution coalesces a
    repartition by column alone by shuffle bytes, and the kernels here are CPU-bound Python
    on few bytes, so fewer tasks than cores would run."""
    n_parts = partitions or int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return df.repartition(n_parts, key)


def _value_of(shared: Shared | None) -> Callable[[], Any]:
    return (lambda: None) if shared is None else shared.value


def per_user(df, kernel: Kernel, schema, *, key: str = "user_id", order: Sequence[str] = (),
             partitions: int | None = None, shared: Shared | None = None,
             max_rows: int | None = None, arrow: bool = False):
    """Spark backend: `kernel` over whole users of `df` sorted by (key, *order), at most
    `max_rows` rows a call unless one user alone has more; returns the DataFrame of `schema`.

    `shared`: a :class:`Shared` value the kernel receives (None: the kernel gets None).
    `arrow=True` hands the kernel pyarrow Tables (mapInArrow; the kernel may return pyarrow or
    pandas) instead of pandas DataFrames. `partitions`: the number of user partitions (None:
    spark.sql.shuffle.partitions).
    """
    grouped = _partitioned(df, key, partitions).sortWithinPartitions(key, *order)
    value = _value_of(shared)

    def run(batches):
        yield from _apply(batches, kernel, value(), key, max_rows, arrow)

    return (grouped.mapInArrow if arrow else grouped.mapInPandas)(run, schema)


def per_partition(df, kernel: Kernel, schema, *, key: str = "user_id",
                  partitions: int | None = None, shared: Shared | None = None,
                  arrow: bool = False):
    """Spark backend, one kernel call per task with all of its rows: every user of the task
    whole by the hash partitioning on `key` alone, in no particular order. For kernels whose
    cost is per call (the evaluation's vectorised slot-day building, ingestion's shaping)."""
    grouped = _partitioned(df, key, partitions)
    value = _value_of(shared)

    def run(batches):
        got = list(batches)
        if not got or not sum(len(b) for b in got):
            return
        frame = pa.Table.from_batches(got) if arrow else pd.concat(got, ignore_index=True)
        yield from _outputs(kernel(frame, value()), arrow)

    return (grouped.mapInArrow if arrow else grouped.mapInPandas)(run, schema)


def per_user_local(
    pdf: pd.DataFrame,
    kernel: Kernel,
    *,
    key: str = "user_id",
    order: Sequence[str] = (),
    shared: Any = None,
    max_rows: int | None = None,
    arrow: bool = False,
    batch_rows: int = 7,
) -> pd.DataFrame:
    """Local backend: the same contract on plain pandas, without a JVM.

    Rows are sorted by (key, *order) and cut into batches of `batch_rows` (small by default,
    so users straddle batches as they do under Arrow) before the same re-cutting runs.
    """
    rows = pdf.sort_values([key, *order], kind="stable").reset_index(drop=True)
    if arrow:
        table = pa.Table.from_pandas(rows, preserve_index=False)
        batches = (table.slice(i, batch_rows) for i in range(0, len(rows), batch_rows))
    else:
        batches = (rows.iloc[i:i + batch_rows] for i in range(0, len(rows), batch_rows))
    outs = [o if isinstance(o, pd.DataFrame) else pa.Table.from_batches([o]).to_pandas()
            for o in _apply(batches, kernel, shared, key, max_rows, arrow)]
    return pd.concat(outs, ignore_index=True) if outs else pd.DataFrame()

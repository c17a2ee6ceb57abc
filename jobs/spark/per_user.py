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


def per_user(
    df,
    kernel: Kernel,
    schema,
    *,
    key: str = "user_id",
    order: Sequence[str] = (),
    partitions: int | None = None,
    shared: Any = None,
    max_rows: int | None = None,
    arrow: bool = False,
    whole_partition: bool = False,
):
    """Spark backend: `kernel` over whole users of `df`; returns the DataFrame of `schema`.

    `whole_partition=True` calls the kernel once per task with all of its rows (every user of
    the task whole, by the hash partitioning alone; no sort): for kernels whose cost is per
    call, such as the evaluation's vectorised slot-day building.

    `shared` is broadcast once (None: nothing) and reaches the kernel deserialised, once per
    worker process. `arrow=True` hands the kernel pyarrow Tables (mapInArrow; the kernel may
    return pyarrow or pandas) instead of pandas DataFrames. `partitions`: the number of
    user partitions (None: spark.sql.shuffle.partitions). Always an explicit number: adaptive
    execution coalesces a repartition by column alone by shuffle bytes, and the kernels here
    are CPU-bound Python on few bytes (collect's release at Telecom scale ran 3 tasks on 2
    cores instead of 8).
    """
    spark = df.sparkSession
    bc = spark.sparkContext.broadcast(shared) if shared is not None else None
    token = uuid.uuid4().hex
    n_parts = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    grouped = df.repartition(n_parts, key)
    if not whole_partition:
        grouped = grouped.sortWithinPartitions(key, *order)

    def value() -> Any:
        if bc is None:
            return None
        if token not in _SHARED:
            _SHARED[token] = bc.value
        return _SHARED[token]

    if whole_partition:
        def run_whole(batches):
            got = list(batches)
            if not got or not sum(len(b) for b in got):
                return
            frame = pa.Table.from_batches(got) if arrow else pd.concat(got, ignore_index=True)
            yield from _outputs(kernel(frame, value()), arrow)

        runner = grouped.mapInArrow if arrow else grouped.mapInPandas
        out = runner(run_whole, schema)
    elif arrow:
        def run_arrow(batches):
            yield from _apply(batches, kernel, value(), key, max_rows, True)

        out = grouped.mapInArrow(run_arrow, schema)
    else:
        def run_pandas(batches):
            yield from _apply(batches, kernel, value(), key, max_rows, False)

        out = grouped.mapInPandas(run_pandas, schema)
    out._per_user_broadcast = bc  # kept alive with the plan; `release(out)` frees it
    return out


def release(df) -> None:
    """Free the broadcast a `per_user` result shipped (after its last action)."""
    bc = getattr(df, "_per_user_broadcast", None)
    if bc is not None:
        bc.destroy()


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

"""The one per-user operator (jobs/spark/per_user.py): every kernel call sees whole users, on
the local pandas backend and on Spark, pandas and Arrow batches alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jobs.spark.per_user import bounded, per_user_local, user_bounds, whole_groups

USERS = ["a"] * 3 + ["b"] * 5 + ["c"] + ["d"] * 4


def test_whole_groups_never_split_a_user_over_two_batches():
    frame = pd.DataFrame({"user_id": USERS, "row": range(len(USERS))})
    cuts = [0, 2, 2, 7, 9, 10, len(USERS)]  # Arrow's arbitrary batch edges, an empty one too
    batches = [frame.iloc[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    out = list(whole_groups(iter(batches), "user_id"))
    assert pd.concat(out)["row"].tolist() == list(range(len(USERS)))
    seen = [set(b["user_id"]) for b in out]
    assert all(not (x & y) for i, x in enumerate(seen) for y in seen[i + 1:])


def test_whole_groups_on_arrow_batches():
    table = pa.table({"user_id": USERS, "row": list(range(len(USERS)))})
    batches = [table.slice(a, 4).to_batches()[0] for a in range(0, len(USERS), 4)]
    out = list(whole_groups(iter(batches), "user_id"))
    assert all(isinstance(t, pa.Table) for t in out)
    assert [sorted(set(t.column("user_id").to_pylist())) for t in out] == [
        ["a"], ["b", "c"], ["d"]]


def test_whole_groups_stop_on_rows_out_of_order():
    within = [pd.DataFrame({"user_id": ["b", "a"]})]
    across = [pd.DataFrame({"user_id": ["a", "b"]}), pd.DataFrame({"user_id": ["a"]})]
    for batches in (within, across):
        with pytest.raises(AssertionError, match="not sorted by user_id"):
            list(whole_groups(iter(batches), "user_id"))


def test_bounded_cuts_at_user_bounds_and_keeps_a_long_user_whole():
    frame = pd.DataFrame({"user_id": USERS})
    pieces = list(bounded([frame], "user_id", 4))
    assert [p["user_id"].tolist() for p in pieces] == [
        ["a"] * 3, ["b"] * 5, ["c"], ["d"] * 4]
    assert user_bounds(np.array(USERS)) == [(0, 3), (3, 8), (8, 9), (9, 13)]


@pytest.mark.parametrize("arrow", [False, True])
def test_local_backend_gives_each_call_whole_sorted_users_and_the_shared_value(arrow):
    rng = np.random.default_rng(0)
    rows = pd.DataFrame({"user_id": rng.choice(list("pqrstu"), 60), "t": rng.permutation(60)})
    calls = []

    def kernel(frame, shared):
        pdf = frame.to_pandas() if arrow else frame
        calls.append(pdf)
        assert shared == {"offset": 100}
        return pdf.groupby("user_id", as_index=False).agg(n=("t", "size"), first=("t", "min"))

    out = per_user_local(rows, kernel, order=("t",), shared={"offset": 100}, arrow=arrow,
                         batch_rows=7, max_rows=20)
    want = rows.groupby("user_id", as_index=False).agg(n=("t", "size"), first=("t", "min"))
    pd.testing.assert_frame_equal(out.sort_values("user_id", ignore_index=True), want)
    users = [set(c["user_id"]) for c in calls]
    assert all(not (x & y) for i, x in enumerate(users) for y in users[i + 1:])
    for c in calls:  # each user's rows in (key, order) order
        assert c.equals(c.sort_values(["user_id", "t"], ignore_index=True))


@pytest.mark.spark
@pytest.mark.parametrize("arrow", [False, True])
def test_spark_backend_whole_users_across_tiny_arrow_batches(spark, arrow):
    from jobs.spark.per_user import Shared, per_user

    rng = np.random.default_rng(1)
    pdf = pd.DataFrame({"user_id": [f"u{i}" for i in rng.integers(0, 40, 2000)],
                        "t": rng.permutation(2000).astype(np.int64)})
    df = spark.createDataFrame(pdf).repartition(5)  # rows of a user spread over partitions

    def kernel(frame, shared):
        f = frame.to_pandas() if arrow else frame
        ts = f["t"].to_numpy()
        bounds = user_bounds(f["user_id"].to_numpy())
        return pd.DataFrame({
            "user_id": [f["user_id"].iloc[a] for a, _ in bounds],
            "n": [b - a for a, b in bounds],
            "ordered": [bool((np.diff(ts[a:b]) > 0).all()) for a, b in bounds],
            "calls": 1,
            "tag": shared,
        })

    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        with Shared(spark, "S") as shared:
            out = per_user(df, kernel, "user_id string, n long, ordered boolean, calls long, "
                           "tag string", order=("t",), partitions=3, shared=shared,
                           arrow=arrow)
            got = out.toPandas()
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)
    want = pdf.groupby("user_id").size()
    assert got["user_id"].is_unique  # no user reached two kernel calls
    assert got.set_index("user_id")["n"].sort_index().tolist() == want.sort_index().tolist()
    assert got["ordered"].all() and (got["tag"] == "S").all()


@pytest.mark.spark
def test_spark_backend_keeps_every_user_partition_under_adaptive_execution(spark):
    """Adaptive execution coalesces a repartition by column alone by shuffle bytes: a CPU-bound
    kernel on few bytes then ran in fewer tasks than cores (collect's release at Telecom
    scale: 3 tasks on local[2] instead of 8). Without `partitions` the operator must still
    keep spark.sql.shuffle.partitions user partitions."""
    from pyspark.sql import functions as F

    from jobs.spark.per_user import per_user

    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"
    wanted = int(spark.conf.get("spark.sql.shuffle.partitions"))
    pdf = pd.DataFrame({"user_id": [f"u{i}" for i in range(64)], "t": np.arange(64)})
    out = per_user(spark.createDataFrame(pdf), lambda frame, _: frame, "user_id string, t long")
    tasks = out.select(F.spark_partition_id().alias("p")).distinct().count()
    assert wanted > 1 and tasks == wanted

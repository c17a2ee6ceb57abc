"""Shared fixtures: where the real data lives (skip cleanly without it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Every JVM the suite starts (the shared session, each stage's subprocess, spark-submit under
# Airflow) runs seconds of work on kilobytes of data: JIT-compiling for the long run costs more
# than it saves. C1 only and the serial collector halve a session's start-plus-small-write on
# this 2-core machine (measured 41-49 s -> 24 s at load 3.5). Tests only: a real job keeps the
# JVM's defaults. spark-submit's launcher reads SPARK_SUBMIT_OPTS (prints nothing, unlike
# JAVA_TOOL_OPTIONS, so the tests of one-line error output are unaffected); set it to override.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files marked `slow` first, each file's tests together, otherwise collection order.

    Under `make test` (pytest-xdist, `--dist loadfile --no-loadscope-reorder`) each worker takes
    the next file from this order when it is free: the files of several minutes start at once
    and the many short files fill the gaps, so no long file starts last (xdist's own order, most
    tests first, started the 20-minute DAG run 18 minutes in). A serial run is unaffected in
    substance: the same tests, heavy files first.
    """
    first_index: dict[str, int] = {}
    slow_file: dict[str, bool] = {}
    for index, item in enumerate(items):
        path = item.nodeid.split("::", 1)[0]
        first_index.setdefault(path, index)
        slow_file[path] = slow_file.get(path, False) or item.get_closest_marker("slow") is not None
    items.sort(key=lambda item: (not slow_file[item.nodeid.split("::", 1)[0]],
                                 first_index[item.nodeid.split("::", 1)[0]]))


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data; tests marked `realdata` skip with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} does not exist")
    return SHARED_DATA


@pytest.fixture(scope="session")
def spark_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data root (warehouse + metastore) of the one SparkSession the test session shares."""
    return tmp_path_factory.mktemp("trajpriv_data")


@pytest.fixture(scope="session")
def spark_config(spark_root: Path):
    """The Config the shared session was built with (DESIGN.md section 9: local[2], 2 shuffles)."""
    from jobs.config import load_config

    return load_config(
        None,
        [
            f"storage.root={spark_root}",
            "spark.master=local[2]",
            "spark.conf.spark.sql.shuffle.partitions=2",
            "spark.conf.spark.sql.execution.arrow.pyspark.fallback.enabled=false",
            "spark.conf.spark.driver.memory=2g",
        ],
    )


@pytest.fixture(scope="session")
def spark(spark_config):
    """One session-scoped SparkSession with the project catalog (Hive metastore under tmp)."""
    from jobs.spark.session import get_spark

    session = get_spark(spark_config)
    yield session
    session.stop()

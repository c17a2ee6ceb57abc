"""Shared fixtures: where the real data lives (skip cleanly without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

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

"""The SparkSession and the two databases every stage reads and writes.

One place builds the session so that every stage, test and `trajpriv sql` sees the same catalog:
a Hive metastore (embedded Derby, one Spark process at a time) and a Parquet warehouse, both under
`storage.root`. The raw database's folder is created with mode 0700: it holds personal data.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.config import Config
from jobs.metastore_lock import check_metastore_free

log = logging.getLogger(__name__)

RAW_DB = "trajpriv_raw"
PUB_DB = "trajpriv_pub"

# Settings every trajpriv session needs; config `spark.conf` may override any of them.
_BASE_CONF = {
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "6g",
    "spark.sql.adaptive.enabled": "true",
    # List a table's partition folders on the driver up to this many (a parallel listing is a
    # Spark job of one task per folder: seconds for a 182-day table on a local disk). Clusters
    # with remote storage and huge tables may lower it again through `spark.conf`.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
    # A barrier stage (TorchDistributor) that cannot get its slots fails fast, not after 10 min.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "1",
}


def catalog_conf(cfg: Config) -> dict[str, str]:
    """The settings that point a Spark session at this project's catalog.

    Data engineers pass the same settings to `pyspark` or `spark-sql` (README, "Query the
    published tables") to open the catalog without trajpriv.
    """
    storage = cfg.storage
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": str(storage.warehouse),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={storage.metastore};create=true"
        ),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={storage.root.resolve()}",
    }


def get_spark(cfg: Config) -> SparkSession:
    """Build (or return the active) session for `cfg` and make sure both databases exist.

    PYSPARK_PYTHON is set to this interpreter so Python workers find pandas and the project.
    """
    root = cfg.storage.root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    check_metastore_free(cfg.storage.metastore, cfg.storage.metastore_wait_s)  # Derby: 1 JVM
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(cfg.spark.master).appName(cfg.spark.app_name)
    settings = {**_BASE_CONF, **catalog_conf(cfg), **{k: str(v) for k, v in cfg.spark.conf.items()}}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    ensure_databases(spark, cfg)
    return spark


def ensure_databases(spark: SparkSession, cfg: Config) -> None:
    """Create `trajpriv_raw` (folder mode 0700) and `trajpriv_pub` when missing."""
    warehouse = cfg.storage.warehouse
    warehouse.mkdir(parents=True, exist_ok=True)
    for db in (RAW_DB, PUB_DB):
        location = warehouse / f"{db}.db"
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db} LOCATION '{location}'")
    raw_dir = warehouse / f"{RAW_DB}.db"
    raw_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(raw_dir, 0o700)
    secrets = cfg.storage.secrets
    secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(secrets, 0o700)


def stop_spark(spark: SparkSession | None) -> None:
    """Stop the session so the embedded Derby metastore is released for the next process."""
    if spark is not None:
        spark.stop()


def project_root() -> Path:
    return Path(__file__).resolve().parents[1]

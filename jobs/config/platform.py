"""The sections of where the pipeline runs: storage, the metastore, Spark and the analysts'
endpoints. None of them changes a figure: they say where data lives and who reaches it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from jobs.config.types import Section


class StorageConfig(Section):
    """Where every table, landing file, model artefact and report lives. `load_config` makes
    `root` absolute (`resolve_root`); a relative default means data/ beside conf/."""

    root: Path = Path("../data")
    # seconds a job waits for another process to release the embedded Derby metastore of this
    # root (one JVM at a time) before it fails saying which process holds it
    metastore_wait_s: float = Field(60.0, ge=0)
    # a stage refuses to start on a disk with less free space than this (MiB)
    min_free_mb: float = Field(256.0, ge=0)

    @property
    def warehouse(self) -> Path:
        return self.root.resolve() / "warehouse"

    @property
    def metastore(self) -> Path:
        return self.root.resolve() / "metastore_db"

    @property
    def landing(self) -> Path:
        return self.root.resolve() / "landing"

    @property
    def runs_dir(self) -> Path:
        return self.root.resolve() / "runs"

    @property
    def secrets(self) -> Path:
        """Keys (pseudonym key, run seeds) kept inside the raw zone's reach, mode 0700."""
        return self.root.resolve() / "secrets"


class CatalogConfig(Section):
    """Where the Hive metastore lives. `embedded` (default): Derby under `storage.root`, one
    Spark process at a time. `postgres`: a PostgreSQL database (`postgres_url`, one database per
    data root), so `trajpriv sql` and other Spark sessions read while a stage writes; stages on
    one root still run one at a time (the ledger's plan-then-charge must not race).
    `postgres_password_env` names the environment variable holding the password (never the
    password itself in a config); `jdbc_jar` is the PostgreSQL JDBC driver Spark loads."""

    metastore: Literal["embedded", "postgres"] = "embedded"
    postgres_url: str = "jdbc:postgresql://127.0.0.1:5433/trajpriv_metastore"
    postgres_user: str = "postgres"
    postgres_password_env: str | None = None
    jdbc_jar: Path = Path("/usr/share/java/postgresql.jar")
    # The database role of analysts' sessions and the endpoints (`trajpriv serve`): it reads the
    # metastore and sees the published database only (`python -m jobs.spark.metastore_pg
    # analyst` creates it); its password, if any, in the environment variable named here.
    analyst_user: str = "trajpriv_analyst"
    analyst_password_env: str | None = None

    @field_validator("postgres_url")
    @classmethod
    def _jdbc(cls, value: str) -> str:
        if not value.startswith("jdbc:postgresql://"):
            raise ValueError("must be a PostgreSQL JDBC URL: jdbc:postgresql://host:port/db")
        return value


class SparkConfig(Section):
    """Spark master and any `spark.*` setting; local[2] on a laptop, a cluster URL in production."""

    master: str = "local[2]"
    app_name: str = "trajpriv"
    conf: dict[str, str | int | float | bool] = Field(default_factory=dict)

    @field_validator("conf")
    @classmethod
    def _only_spark_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if not k.startswith("spark.")]
        if bad:
            raise ValueError(f"only spark.* settings belong here, got {bad}")
        return {k: str(v) for k, v in value.items()}


class ServeConfig(Section):
    """The analysts' endpoints of `trajpriv serve` over the published zone: Spark's Thrift
    JDBC/ODBC server (HiveServer2 protocol) on `host:port` and Spark Connect on
    `host:connect_port`. `auth` is HiveServer2's `hive.server2.authentication` (NONE: a user
    name, no password; LDAP, KERBEROS or CUSTOM with their settings in `hiveconf`).
    `query_timeout_s`: a query running longer is cancelled (its error names this setting);
    `max_result_mb`: the most a query's collected result may hold on the driver
    (spark.driver.maxResultSize); `scratch`: the endpoints' own writable folder (logs, Hive
    scratch, pid file), 0700, default `/tmp/trajpriv-<uid>`."""

    host: str = "localhost"
    port: int = Field(10000, ge=1, le=65535)
    connect_port: int = Field(15002, ge=1, le=65535)
    auth: Literal["NONE", "NOSASL", "LDAP", "KERBEROS", "CUSTOM"] = "NONE"
    hiveconf: dict[str, str] = Field(default_factory=dict)
    query_timeout_s: int = Field(900, ge=1)
    max_result_mb: int = Field(256, ge=1)
    scratch: Path | None = None

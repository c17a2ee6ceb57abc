"""Session, catalog and idempotent writes: the ground every stage stands on."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jobs.spark.catalog import RunRecord, read_table, record_run, write_table
from udfs.errors import InputDataError

pytestmark = pytest.mark.spark


def test_databases_exist_and_raw_zone_is_private(spark, spark_config) -> None:
    names = {db.name for db in spark.catalog.listDatabases()}
    assert {"trajpriv_raw", "trajpriv_pub"} <= names
    raw_dir = spark_config.storage.warehouse / "trajpriv_raw.db"
    assert stat.S_IMODE(os.stat(raw_dir).st_mode) == 0o700


def test_write_table_replaces_scope_and_never_duplicates(spark) -> None:
    table = "trajpriv_pub.t_idempotent"
    first = spark.createDataFrame(
        [("a", "r1", 1), ("a", "r1", 2), ("a", "r2", 3), ("b", "r1", 4)],
        "dataset string, run string, v int",
    )
    write_table(first, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    write_table(first, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    assert spark.table(table).count() == 4

    # Rerun of dataset a that no longer has run r2: r2 disappears, dataset b untouched.
    second = spark.createDataFrame([("a", "r1", 10)], "dataset string, run string, v int")
    write_table(second, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    rows = sorted(tuple(r) for r in spark.table(table).select("dataset", "run", "v").collect())
    assert rows == [("a", "r1", 10), ("b", "r1", 4)]


def test_write_with_another_partition_layout_is_refused(spark) -> None:
    table = "trajpriv_pub.t_layout"
    df = spark.createDataFrame([("a", "r1", 1)], "dataset string, run string, v int")
    write_table(df, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    with pytest.raises(InputDataError, match=r"partitioned by \['dataset', 'run'\], this write by"):
        write_table(df, table, partition_by=["dataset"], replace={"dataset": "a"})
    assert spark.table(table).count() == 1


def test_read_missing_table_names_the_stage(spark) -> None:
    with pytest.raises(InputDataError, match=r"trajpriv_raw\.nope does not exist: run the stage"):
        read_table(spark, "trajpriv_raw.nope")


def test_record_run_appends_one_row_per_execution(spark) -> None:
    import datetime as dt

    now = dt.datetime(2026, 1, 1, 12, 0)
    before = (  # other tests of the session record runs of other stages: count this one's
        spark.table("trajpriv_pub.runs").where("stage = 'test'").count()
        if spark.catalog.tableExists("trajpriv_pub.runs")
        else 0
    )
    for run_id in ("r-a", "r-b"):
        record_run(spark, RunRecord(
            run_id=run_id,
            stage="test",
            config_yaml="x: 1\n",
            started_at=now,
            finished_at=now,
            status="ok",
            figures={"n": 3},
        ))
    runs = spark.table("trajpriv_pub.runs").where("stage = 'test'")
    assert runs.count() - before == 2
    assert runs.where("run_id = 'r-b'").first()["figures"] == '{"n": 3}'


def test_catalog_round_trip_across_two_processes(tmp_path: Path) -> None:
    """A table written by one Spark process is read back by the next (the metastore persists)."""
    root = tmp_path / "data"
    writer = textwrap.dedent(
        f"""
        from jobs.config import load_config
        from jobs.spark.session import get_spark
        from jobs.spark.catalog import write_table
        cfg = load_config(None, ["storage.root={root}", "spark.conf.spark.driver.memory=1g"])
        spark = get_spark(cfg)
        df = spark.createDataFrame([("d", 1), ("d", 2)], "dataset string, v int")
        write_table(df, "trajpriv_pub.round_trip", partition_by=["dataset"],
                    replace={{"dataset": "d"}})
        spark.stop()
        """
    )
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=240)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jobs.cli",
            "sql",
            "SELECT sum(v) AS total FROM trajpriv_pub.round_trip",
            "--no-server",  # the reading process itself, and no warm server left behind
            "--set",
            f"storage.root={root}",
            "--set",
            "spark.conf.spark.driver.memory=1g",
            "--config",
            str(Path(__file__).resolve().parents[2] / "conf" / "default.yaml"),
        ],
        check=True,
        timeout=240,
        capture_output=True,
        text=True,
    )
    assert "|3    |" in out.stdout, out.stdout + out.stderr


def test_stale_partitions_are_found_from_covers_and_escaped_values(spark) -> None:
    """`covers` stands in for a pass over the data; values Hive escapes (':' '/') still match."""
    table = "trajpriv_pub.t_covers"
    schema = "dataset string, run string, v int"
    first = spark.createDataFrame(
        [("a", "r:1", 1), ("a", "r/2", 2), ("a", "r3", 3), ("b", "r:1", 4)], schema
    )
    write_table(first, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    second = spark.createDataFrame([("a", "r:1", 10), ("a", "r/2", 20)], schema)
    write_table(
        second,
        table,
        partition_by=["dataset", "run"],
        replace={"dataset": "a"},
        covers=[{"dataset": "a", "run": "r:1"}, {"dataset": "a", "run": "r/2"}],
    )
    rows = sorted(tuple(r) for r in spark.table(table).select("dataset", "run", "v").collect())
    assert rows == [("a", "r/2", 20), ("a", "r:1", 10), ("b", "r:1", 4)]
    # Without covers the same write finds the partitions itself: nothing changes.
    write_table(second, table, partition_by=["dataset", "run"], replace={"dataset": "a"})
    assert spark.table(table).count() == 3


def test_a_first_write_over_a_leftover_folder_heals_instead_of_wedging(spark, caplog) -> None:
    """Defect: a kill during a table's first write left its folder without a catalog entry,
    and every later run failed with LOCATION_ALREADY_EXISTS."""
    from jobs.spark.catalog import managed_location

    table = "trajpriv_raw.t_first_write"
    location = managed_location(spark, table)
    (location / "part=1").mkdir(parents=True)
    (location / "part=1" / "part-00000.parquet").write_bytes(b"half-written")  # what a kill leaves
    assert not spark.catalog.tableExists(table)
    df = spark.createDataFrame([(1, "x")], "part int, v string")
    write_table(df, table, partition_by=["part"])
    assert spark.table(table).count() == 1
    aside = [p for p in location.parent.iterdir() if p.name.startswith(location.name + ".orphan-")]
    assert len(aside) == 1 and (aside[0] / "part=1" / "part-00000.parquet").exists()
    assert any("moved aside" in r.getMessage() for r in caplog.records)


def test_staging_left_by_a_killed_stage_is_removed_by_the_next(spark, spark_config) -> None:
    from jobs.spark.session import ensure_databases

    leftover = spark_config.storage.root / "staging" / "ingest-killed-run"
    leftover.mkdir(parents=True)
    (leftover / "part-0.parquet").write_bytes(b"raw copy")
    ensure_databases(spark, spark_config)  # what every stage's session start runs
    assert not leftover.exists()


def test_the_analyst_query_check_reads_only_the_published_zone(spark) -> None:
    from jobs.spark.zones import ZoneError, check_analyst_query

    spark.createDataFrame([(1,)], "a int").write.mode("overwrite").saveAsTable(
        "trajpriv_pub.t_zone")
    spark.createDataFrame([(1,)], "a int").write.mode("overwrite").saveAsTable(
        "trajpriv_raw.t_zone")
    check_analyst_query(spark, "SELECT a FROM trajpriv_pub.t_zone")
    check_analyst_query(spark, "WITH x AS (SELECT * FROM trajpriv_pub.t_zone) SELECT * FROM x")
    check_analyst_query(spark, "SHOW TABLES IN trajpriv_pub")
    spark.sql("CREATE OR REPLACE VIEW trajpriv_pub.v_zone_leak AS SELECT * FROM "
              "trajpriv_raw.t_zone")
    for query, why in [
        ("SELECT * FROM trajpriv_raw.t_zone", "reads spark_catalog.trajpriv_raw.t_zone"),
        ("SELECT * FROM trajpriv_pub.v_zone_leak", "trajpriv_raw"),  # a view over raw data
        ("SELECT * FROM trajpriv_pub.t_zone JOIN trajpriv_raw.t_zone USING (a)", "trajpriv_raw"),
        ("DROP TABLE trajpriv_pub.t_zone", "read-only"),
        ("INSERT INTO trajpriv_pub.t_zone VALUES (2)", "read-only"),
        ("SHOW PARTITIONS trajpriv_raw.t_zone", "restricted database"),
    ]:
        with pytest.raises(ZoneError, match=why):
            check_analyst_query(spark, query)
    raw_dir = next(iter(spark.sql("DESCRIBE TABLE EXTENDED trajpriv_raw.t_zone")
                        .where("col_name = 'Location'").collect()))["data_type"]
    with pytest.raises(ZoneError, match="reads files directly"):
        check_analyst_query(spark, f"SELECT * FROM parquet.`{raw_dir}`")
    assert spark.table("trajpriv_pub.t_zone").count() == 1  # the refused writes never ran


def test_a_view_is_recreated_only_when_its_definition_changes(spark) -> None:
    """ensure_view: the first call creates, an identical one is a no-op (no metastore write),
    another query text or column list replaces the view; the digest is in TBLPROPERTIES."""
    from jobs.spark.catalog import VIEW_DEFINITION, ensure_view
    from jobs.spark.relocation import stored_table_names
    from jobs.spark.tables import Table

    base = "trajpriv_pub.t_view_base"
    write_table(spark.createDataFrame([("a", 1), ("a", 2)], "dataset string, v int"), base,
                partition_by=["dataset"], replace={"dataset": "a"})
    view = Table("trajpriv_pub.t_view", view=True, columns="dataset string, v int",
                 holds="test view", notes={"v": "a value"})
    assert ensure_view(spark, view, f"SELECT dataset, v FROM {base}") is True
    assert ensure_view(spark, view, f"SELECT  dataset, v\n FROM {base}") is False  # same text
    assert spark.table(view).count() == 2
    assert ensure_view(spark, view, f"SELECT dataset, v FROM {base} WHERE v > 1") is True
    assert spark.table(view).count() == 1
    stored = spark.sql(f"SHOW TBLPROPERTIES {view} ('{VIEW_DEFINITION}')").first()["value"]
    assert len(stored) == 16
    # the comments travel with it, and the view is not counted among the stored tables
    described = {r["col_name"]: r["comment"] for r in spark.sql(f"DESCRIBE {view}").collect()}
    assert described["v"] == "a value"
    names = stored_table_names(spark, "trajpriv_pub")
    assert "t_view_base" in names and "t_view" not in names

"""The table catalogue (jobs/spark/tables.py) is the one home of every table's name and layout,
and a write that drifts from it is refused before anything is written."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from jobs.spark import tables
from jobs.spark.tables import ALL, DATABASES, LOCATIONS, Table, schema_differences

ROOT = Path(__file__).resolve().parents[2]
TABLE_NAME = re.compile(r"^trajpriv_(raw|trusted|pub)\.[a-z_]+$")


def test_every_entry_is_whole_and_unique():
    assert len(ALL) == len({str(t) for t in ALL.values()})
    for table in ALL.values():
        cols = table.column_types()
        assert table.db in DATABASES
        assert set(table.partition_by) <= set(cols), table  # partition columns are columns
        assert not (table.view and table.partition_by), table
        assert all(re.fullmatch(r"[a-z_]+", c) for c in cols), table
    # the nested types parse whole: array<...> stays one column
    assert POINTS_TYPES == tables.TRAJECTORIES.column_types()


POINTS_TYPES = {"user_id": "string", "traj_id": "int", "loc_ids": "array<int>",
                "ts": "array<timestamp>", "n": "int", "dataset": "string", "date": "date"}


def test_no_other_module_spells_a_table_name():
    """Outside the catalogue a table name appears only in docstrings and messages' prose: no
    string constant in code is exactly a qualified table name."""
    offenders = []
    for path in sorted((ROOT / "jobs").rglob("*.py")):
        if path.name == "tables.py" and path.parent.name == "spark":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and TABLE_NAME.match(node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value}")
            if isinstance(node, ast.JoinedStr) and len(node.values) == 2:  # f"{RAW_DB}.points"
                db, rest = node.values
                if isinstance(db, ast.FormattedValue) and isinstance(db.value, ast.Name) \
                        and db.value.id.endswith("_DB") and isinstance(rest, ast.Constant):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def test_schema_differences_name_each_drift():
    got = schema_differences(LOCATIONS, {"loc_id": "bigint", "lat": "double",
                                         "dataset": "string", "extra": "int"})
    assert got == ["missing column lon double", "unexpected column extra int",
                   "column loc_id is bigint, the catalogue says int"]
    assert schema_differences(LOCATIONS, LOCATIONS.column_types()) == []


def test_a_table_is_a_str_for_spark_and_sql():
    assert isinstance(LOCATIONS, str) and LOCATIONS == "trajpriv_pub.locations"
    assert f"SELECT * FROM {LOCATIONS}" == "SELECT * FROM trajpriv_pub.locations"
    assert LOCATIONS.short == "locations"
    with pytest.raises(ValueError, match="database must be one of"):
        Table("elsewhere.t", columns="a int", holds="-")


@pytest.mark.spark
def test_a_write_that_drifts_from_the_catalogue_is_refused(spark):
    from jobs.spark.catalog import write_table

    bad = spark.createDataFrame([(1, 31.2, 121.4, "drift")],
                                "loc_id bigint, lat double, lon double, dataset string")
    with pytest.raises(ValueError, match=r"loc_id is bigint, the catalogue says int"):
        write_table(bad, LOCATIONS, replace={"dataset": "drift"})
    with pytest.raises(ValueError, match="partitioned by"):
        write_table(bad, LOCATIONS, partition_by=["dataset", "loc_id"])
    assert not spark.catalog.tableExists(LOCATIONS) or \
        spark.table(LOCATIONS).where("dataset = 'drift'").count() == 0


@pytest.mark.spark
def test_a_catalogue_table_named_as_a_plain_string_is_still_the_catalogue_entry(
        spark, monkeypatch):
    """Measured defect: `write_table(df, "trajpriv_pub.locations", ...)` (a str, as tests and
    bench_collect wrote it) skipped the catalogue: no column check, and a first write created
    the table without comments, so DESCRIBE showed NULL for whoever wrote it next."""
    import uuid

    from jobs.spark import catalog

    bad = spark.createDataFrame([(1, 31.2, 121.4, "drift")],
                                "loc_id bigint, lat double, lon double, dataset string")
    with pytest.raises(ValueError, match=r"loc_id is bigint, the catalogue says int"):
        catalog.write_table(bad, str(LOCATIONS), partition_by=["dataset"],
                            replace={"dataset": "drift"})
    probe = Table(f"trajpriv_pub.comment_probe_{uuid.uuid4().hex[:8]}", partition_by=("dataset",),
                  columns="loc_id int, lat double, dataset string", holds="a test probe")
    monkeypatch.setitem(catalog.ALL, str(probe), probe)
    try:
        catalog.write_table(bad.select(bad.loc_id.cast("int").alias("loc_id"), "lat", "dataset"),
                            str(probe), partition_by=["dataset"])
        got = {c.name: c.description for c in spark.catalog.listColumns(probe)}
        assert got == probe.comments()
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {probe}")


def test_every_column_of_every_table_has_a_comment():
    """DESCRIBE showed `comment NULL` everywhere; the catalogue now holds one per column."""
    from jobs.spark.tables import ALL

    for table in ALL.values():
        comments = table.comments()
        assert list(comments) == list(table.column_types()), table
        assert all(text.strip() for text in comments.values()), table
    view = ALL["trajpriv_pub.perturbed_points"].view_columns()
    assert view.startswith("(release_id COMMENT '") and view.endswith("')")


def test_ledger_and_evaluation_schemas_are_the_catalogues_columns():
    """Their row schemas are typed from the catalogue, not declared a second time."""
    from jobs.spark.catalog import spark_schema
    from jobs.spark.evaluation import EVALUATION_SCHEMA
    from jobs.spark.ledger import LEDGER_SCHEMA

    for schema, table in ((LEDGER_SCHEMA, tables.PRIVACY_LEDGER),
                          (EVALUATION_SCHEMA, tables.EVALUATION)):
        assert {f.name: f.dataType.simpleString() for f in schema.fields} == table.column_types()
    assert LEDGER_SCHEMA.fieldNames() == list(tables.PRIVACY_LEDGER.column_types())
    nullable = {f.name for f in EVALUATION_SCHEMA.fields if f.nullable}
    assert nullable == {"setting", "value"}
    with pytest.raises(ValueError, match="no columns"):
        spark_schema(tables.EVALUATION, order=("run_id", "nope"))

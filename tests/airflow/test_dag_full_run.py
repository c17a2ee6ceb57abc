"""One whole `airflow dags test trajpriv_pipeline` run on the (small) embedded default: every
stage through spark-submit, every table written as the catalogue says, every file private.

Its own file so that `--dist loadfile` runs it beside the multi-date DAG tests (each worker
its own AIRFLOW_HOME).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from af_support import TASK_IDS, table_counts
from test_dag_run import SMALL, STAGE_TABLES, _expect_all_tasks_succeeded, _private_modes

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def test_run_on_embedded_default_every_stage_with_private_files(airflow, tmp_path: Path):
    root = tmp_path / "data"
    # The embedded default, made small: the orchestration is under test here, not the scale
    # (`make run` and the stage tests run the full default); attacks stay on.
    params = {"storage_root": str(root), "collect_interval": "all", "overrides": SMALL}

    first = airflow.dags_test("2026-01-05", params)
    _expect_all_tasks_succeeded(first)
    assert set(first.task_states) == {"collection.choose_source", *TASK_IDS.values()}
    counts, ledger = table_counts(root)
    assert counts.pop("__drift__") == []  # every table and view as jobs/spark/tables.py says
    for stage, tables in STAGE_TABLES.items():
        for table in tables:
            assert counts.get(table, 0) > 0, f"{stage} left {table} empty or missing: {counts}"
    assert list(root.rglob("report.html")), f"no report.html under {root}"
    # Zones: every file under the data root (landing CSVs, warehouse, metastore, keys, run
    # folders, the report with raw points) is private to its owner: 0600 files, 0700 folders.
    assert _private_modes(root) == []
    assert not (root / "staging").exists() or not any((root / "staging").iterdir())

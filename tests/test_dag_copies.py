"""The Airflow DAG's copies of project facts equal the project's.

The DAG file imports nothing from the project (it must parse with Airflow alone,
tests/airflow/test_dag_structure.py), so it spells out a few facts itself: the mechanisms its
`mechanism` param accepts, the exit code of a user error, the stages it runs and the published
tables each stage writes. This test reads those literals from the file's syntax tree (no
Airflow needed) and compares them with their homes in the project: a copy that drifts (the
param once accepted tp, atp and exp only, while collect published six mechanisms) fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from jobs import harness
from jobs.config import STAGES
from jobs.spark import tables
from udfs.collect import PUBLISHED_MECHANISMS

ROOT = Path(__file__).resolve().parents[1]
DAG_FILE = ROOT / "airflow_dags" / "trajpriv_pipeline.py"
WRITERS = ("write_table", "append_table", "ensure_view")


def _dag() -> ast.Module:
    return ast.parse(DAG_FILE.read_text(encoding="utf-8"))


def _assigned(name: str):
    """The literal value of the DAG file's module-level `name = ...`."""
    for node in _dag().body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    raise AssertionError(f"the DAG file assigns no {name}")


def _param(name: str) -> dict:
    """The literal keyword arguments of PARAMS[name] = Param(...)."""
    params = _assigned("PARAMS")
    for key, value in zip(params.keys, params.values, strict=True):
        if isinstance(key, ast.Constant) and key.value == name:
            return {kw.arg: ast.literal_eval(kw.value) for kw in value.keywords}
    raise AssertionError(f"the DAG has no param {name}")


def _published_tables_written_by(stage: str) -> set[str]:
    """The published tables and views the stage's own code writes: a catalogue constant that is
    a direct argument of a writer call, or the first item of a (table, frame, ...) tuple in a
    function that calls a writer (ingest writes its tables from such a list)."""
    published = {name: str(value) for name, value in vars(tables).items()
                 if isinstance(value, tables.Table) and value.db == tables.PUB_DB}
    found = set()
    for path in sorted((ROOT / "jobs" / stage).rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)
                     and getattr(n.func, "id", getattr(n.func, "attr", None)) in WRITERS]
            if not calls:
                continue
            names = [a for c in calls for a in c.args if isinstance(a, ast.Name)]
            names += [t.elts[0] for t in ast.walk(fn)
                      if isinstance(t, ast.Tuple) and t.elts and isinstance(t.elts[0], ast.Name)]
            found |= {published[n.id] for n in names if n.id in published}
    return found


def test_the_mechanism_param_accepts_the_published_mechanisms():
    assert _param("mechanism")["enum"] == [None, *PUBLISHED_MECHANISMS]


def test_the_user_error_exit_code_is_the_harness_one():
    assert ast.literal_eval(_assigned("EXIT_USER_ERROR")) == harness.EXIT_USER_ERROR


def test_the_dag_runs_every_stage_once():
    staged = [n.args[0].value for n in ast.walk(_dag()) if isinstance(n, ast.Call)
              and getattr(n.func, "id", None) == "_stage"]
    assert sorted(staged) == sorted(STAGES)


def test_each_stage_declares_the_published_tables_it_writes():
    declared = ast.literal_eval(_assigned("STAGE_TABLES"))
    written = {stage: sorted(_published_tables_written_by(stage)) for stage in STAGES}
    assert {s: sorted(t) for s, t in declared.items()} == {s: t for s, t in written.items() if t}


def test_the_table_scan_sees_every_kind_of_write():
    """The companion of the test above: the scan finds a direct write (collect's releases), a
    view (collect's perturbed_points) and a write from a list of tuples (ingest's locations)."""
    assert {str(tables.RELEASES), str(tables.PERTURBED_POINTS)} <= _published_tables_written_by(
        "collect")
    assert str(tables.LOCATIONS) in _published_tables_written_by("ingest")
    assert _published_tables_written_by("report") == set()

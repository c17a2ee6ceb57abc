"""`trajpriv sql` without Spark: script splitting, output formats, the --config default."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import harness
from jobs.sql.render import render
from jobs.sql.script import split_statements
from udfs.errors import InputDataError

ROOT = Path(__file__).resolve().parents[2]


def test_a_script_splits_on_semicolons_outside_quotes_and_comments():
    script = ("SELECT 'a;b' AS x;\n-- a comment; not a statement\n"
              "/* block; /* nested; */ */ SELECT `c;d`, \"e\\\";f\" FROM t;\n;\n  ;"
              "SELECT 3")
    got = split_statements(script)
    assert [s.text.splitlines()[-1] for s in got] == [
        "SELECT 'a;b' AS x", "/* block; /* nested; */ */ SELECT `c;d`, \"e\\\";f\" FROM t",
        "SELECT 3"]
    assert [s.line for s in got] == [1, 3, 5]
    with pytest.raises(InputDataError, match=r"q.sql, line 2: unterminated string"):
        split_statements("SELECT 1;\nSELECT 'open", "q.sql")


RESULT = {"columns": ["name", "n", "ids"], "rows": [["a,b", 1, [1, 2]], [None, 2.5, []]],
          "truncated": False}


def test_csv_and_json_formats():
    out = io.StringIO()
    render(RESULT, "csv", out)
    assert list(csv.reader(io.StringIO(out.getvalue()))) == [
        ["name", "n", "ids"], ["a,b", "1", "[1, 2]"], ["", "2.5", "[]"]]
    out = io.StringIO()
    render({**RESULT, "rows": [*RESULT["rows"], ["x", float("nan"), None]]}, "json", out)
    assert json.loads(out.getvalue()) == [{"name": "a,b", "n": 1, "ids": [1, 2]},
                                          {"name": None, "n": 2.5, "ids": []},
                                          {"name": "x", "n": None, "ids": None}]


def test_table_format_is_sparks_show_layout():
    out = io.StringIO()
    render({**RESULT, "truncated": True}, "table", out)
    assert out.getvalue().splitlines() == [
        "+----+---+------+", "|name|n  |ids   |", "+----+---+------+",
        "|a,b |1  |[1, 2]|", "|NULL|2.5|[]    |", "+----+---+------+",
        "only showing top 2 rows"]


def test_config_default_is_the_projects_not_the_working_directorys(tmp_path):
    """Defect: `--config conf/default.yaml` relative to the working directory: from another
    folder every command failed (or opened that folder's config)."""
    assert harness.DEFAULT_CONFIG == ROOT / "conf" / "default.yaml"
    parser = harness.build_parser("collect")
    assert Path(parser.parse_args([]).config) == ROOT / "conf" / "default.yaml"
    # From another folder, `trajpriv sql --stop` loads the default config (no server: says so).
    out = subprocess.run([sys.executable, "-m", "jobs.cli", "sql", "--stop", "--set",
                          f"storage.root={tmp_path / 'root'}"], cwd=tmp_path, capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == f"trajpriv sql: no server running for {tmp_path / 'root'}"


def test_a_write_or_a_bad_script_is_one_line_before_any_session(tmp_path, capsys):
    from jobs.cli import main

    root = ["--set", f"storage.root={tmp_path / 'root'}"]
    assert main(["sql", "SELECT 1; DROP TABLE trajpriv_pub.runs", *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused: `trajpriv sql` runs read-only queries" in err[0]
    script = tmp_path / "s.sql"
    script.write_text("SELECT 1;\nSELECT 'open\n")
    assert main(["sql", "-f", str(script), *root]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"trajpriv sql: error: {script}, line 2: unterminated string opened by ': "
                   "close it with '"]
    assert not (tmp_path / "root").exists()  # nothing started, nothing written

"""`trajpriv sql` through its warm server, as a user runs it (one process per command).

Measured defects: every query started a JVM (20-39 s); a missing table printed ~10 KB of JSON
log and a Java stack trace before the error; no --format, no -f script. The server is always
stopped by the fixture's finalizer (and its pid checked gone), whatever a test did.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.sql import client

pytestmark = pytest.mark.slow  # a server JVM and stage subprocesses

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ["spark.master=local[1]", "spark.conf.spark.sql.shuffle.partitions=1",
            "spark.conf.spark.driver.memory=1g"]
BUILD = """
import sys
from jobs.config import load_config
from jobs.spark.session import get_spark, stop_spark
from jobs.spark.catalog import write_table
from jobs.spark.tables import LOCATIONS
cfg = load_config(None, sys.argv[1:])
spark = get_spark(cfg)
df = spark.createDataFrame([(1, 31.0, 121.0, "a"), (2, 31.5, 121.5, "a"), (3, 30.0, 120.0, "b")],
                           "loc_id int, lat double, lon double, dataset string")
write_table(df, LOCATIONS)
stop_spark(spark)
"""


def _overrides(root: Path) -> list[str]:
    return [f"storage.root={root}", *SETTINGS]


def sql(root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "jobs.cli", "sql", *args]
    for item in _overrides(root):
        cmd += ["--set", item]
    env = {**os.environ, client.IDLE_ENV: "300"}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("sqlroot").resolve()
    subprocess.run([sys.executable, "-c", BUILD, *_overrides(root)], cwd=ROOT, check=True,
                   timeout=600)
    yield root
    pid = client.stop_server(root)  # the finalizer: no server outlives the tests
    assert pid is None or not client._alive(pid)


def test_queries_reuse_one_warm_server(root):
    first = sql(root, "SELECT dataset, count(*) AS n FROM trajpriv_pub.locations "
                      "GROUP BY dataset ORDER BY dataset")
    assert first.returncode == 0, first.stderr
    assert "|a      |2  |" in first.stdout and "|b      |1  |" in first.stdout, first.stdout
    pid = client.request(root, {"op": "ping"})["pid"]
    path = client.socket_path(root)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # only the owner may connect
    second = sql(root, "SELECT max(loc_id) AS m FROM trajpriv_pub.locations")
    assert second.returncode == 0 and "|3  |" in second.stdout, second.stderr
    assert client.request(root, {"op": "ping"})["pid"] == pid  # the same session answered
    assert second.stderr == ""  # no Spark log on the console


def test_a_missing_table_is_one_line(root):
    out = sql(root, "SELECT * FROM trajpriv_pub.no_such_table")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr[:3000]
    assert lines[0].startswith("trajpriv sql: error: AnalysisException: [TABLE_OR_VIEW_NOT_FOUND]")
    assert "`trajpriv_pub`.`no_such_table`" in lines[0] and out.stdout == ""


def test_formats_and_a_script(root, tmp_path):
    query = "SELECT loc_id, lat FROM trajpriv_pub.locations WHERE dataset = 'a' ORDER BY loc_id"
    out = sql(root, query, "--format", "csv")
    assert out.returncode == 0 and out.stdout == "loc_id,lat\n1,31.0\n2,31.5\n", out.stderr
    out = sql(root, query, "--format", "json")
    assert json.loads(out.stdout) == [{"loc_id": 1, "lat": 31.0}, {"loc_id": 2, "lat": 31.5}]
    script = tmp_path / "two.sql"
    script.write_text("-- two statements; one file\nSELECT count(*) AS n FROM "
                      "trajpriv_pub.locations;\n\nSELECT 'x;y' AS s;\nSELECT * FROM nope;\n")
    out = sql(root, "-f", str(script), "--format", "json")
    assert [json.loads(line) for line in out.stdout.splitlines()] == [[{"n": 3}], [{"s": "x;y"}]]
    assert out.returncode == 2
    err = out.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"trajpriv sql: error: statement 3 of 3 ({script}, line 5): AnalysisException"), err


def test_the_zone_check_holds_in_the_server(root):
    out = sql(root, "SELECT * FROM trajpriv_raw.points")
    assert out.returncode == 2 and "refused:" in out.stderr
    out = sql(root, "SHOW TABLES IN trajpriv_raw", "--trusted")
    assert out.returncode == 0, out.stderr


def test_a_stage_taking_the_root_stops_the_server(root):
    """Embedded Derby admits one JVM: a stage asks the server to stop and takes the root."""
    assert sql(root, "SELECT 1 AS one").returncode == 0
    pid = client.request(root, {"op": "ping"})["pid"]
    code = ("import sys; from pathlib import Path; from jobs.spark.session import acquire_root;"
            " acquire_root(Path(sys.argv[1])); print('held')")
    out = subprocess.run([sys.executable, "-c", code, str(root)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "held", out.stderr
    assert not client._alive(pid) and client.request(root, {"op": "ping"}) is None


def test_describe_shows_the_catalogues_column_comments(root):
    """Measured defect: `comment NULL` on every column. A table created by write_table carries
    each column's comment from jobs/spark/tables.py (LOCATIONS here, partition column too)."""
    from jobs.spark.tables import LOCATIONS

    out = sql(root, f"DESCRIBE {LOCATIONS}", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = {r["col_name"]: r["comment"] for r in json.loads(out.stdout)
            if r["col_name"] and not r["col_name"].startswith("#")}
    assert rows == LOCATIONS.comments()


def test_exports_are_whole_and_a_cut_says_so(root):
    """Measured defect: `--format csv` printed the first 100 rows of 3,377 and said nothing.
    csv and json print every row unless --limit is given; a cut names its count on stderr."""
    query = ("SELECT l.loc_id, r.id FROM trajpriv_pub.locations l CROSS JOIN range(50) r "
             "ORDER BY l.loc_id, r.id")
    out = sql(root, query, "--format", "csv")
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert len(out.stdout.splitlines()) == 1 + 150  # the header and all 150 rows
    out = sql(root, query, "--format", "json")
    assert out.returncode == 0 and len(json.loads(out.stdout)) == 150, out.stderr
    out = sql(root, query, "--format", "csv", "--limit", "7")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1 + 7
    assert "printed 7 of 150 rows (--limit 7)" in out.stderr, out.stderr


@pytest.mark.parametrize("command", ["sql", "budget"])
def test_a_reader_on_a_missing_root_fails_and_creates_nothing(tmp_path, command):
    """Measured defect: a mistyped storage.root became a new empty root (metastore, warehouse,
    socket) and the query answered "table or view not found"."""
    missing = tmp_path / "no" / "such_root"
    args = [command, "SELECT 1"] if command == "sql" else [command]
    out = subprocess.run([sys.executable, "-m", "jobs.cli", *args, "--set",
                          f"storage.root={missing}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"storage.root {missing} does not exist" in lines[0], out.stderr
    assert not (tmp_path / "no").exists()

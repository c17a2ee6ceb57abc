"""Root errors in one line, before any JVM starts (issue 21): a root that is a file, not
writable, on a full disk, or whose catalog does not match its folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from jobs.spark.relocation import RootError, check_catalog_in_root, rewrite_sql, uri_prefix
from jobs.spark.session import check_root

ROOT = Path(__file__).resolve().parents[2]


def test_a_root_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "data"
    path.write_text("not a folder")
    with pytest.raises(RootError, match=r"is a file, not a folder: point storage.root"):
        check_root(path, 0)


def test_a_root_this_user_cannot_write_is_refused(tmp_path, monkeypatch):
    # root may write anywhere, so the permission itself is what is checked
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(RootError, match=r"is not writable by this user: choose a root"):
        check_root(tmp_path / "data", 0)


def test_a_root_on_a_full_disk_is_refused(tmp_path):
    with pytest.raises(RootError, match=r"MiB free on its disk, below storage.min_free_mb"):
        check_root(tmp_path / "data", 1e15)
    check_root(tmp_path / "data", 0)  # and a disk with room passes


def test_the_command_line_says_it_in_one_line_and_exits_2(tmp_path):
    path = tmp_path / "data"
    path.write_text("x")
    out = subprocess.run(
        [sys.executable, "-m", "jobs.cli", "budget", "--set", f"storage.root={path}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "is a file, not a folder" in lines[0], out.stderr


class _Catalog:
    def __init__(self, locations: dict[str, str], tables: dict[str, list[str]]):
        self.locations, self.tables = locations, tables

    def getDatabase(self, db):  # noqa: N802 (pyspark's name)
        return SimpleNamespace(locationUri=self.locations[db])


class _Session(SimpleNamespace):
    """What check_catalog_in_root asks of a session: database locations and SHOW TABLES/VIEWS
    (the tables here have no views beside them)."""

    def sql(self, text: str):
        verb, _, db = text.split()[1:4]
        if verb == "VIEWS":
            return _Rows([])
        return _Rows([{"tableName": t, "isTemporary": False}
                      for t in self.catalog.tables.get(db, [])])


class _Rows(list):
    def collect(self):
        return list(self)


def test_a_catalog_that_names_another_root_is_refused(tmp_path):
    root = tmp_path / "data_B"
    (root / "warehouse" / "raw.db").mkdir(parents=True)
    spark = _Session(catalog=_Catalog({"raw": "file:/elsewhere/data_A/warehouse/raw.db"}, {}))
    with pytest.raises(RootError, match=r"does not match its folders: database raw lies at "
                                        r"file:/elsewhere/data_A"):
        check_catalog_in_root(spark, root, ("raw",))


def test_a_catalog_whose_table_folders_are_gone_is_refused(tmp_path):
    root = tmp_path / "data"
    (root / "warehouse" / "raw.db").mkdir(parents=True)  # empty: the tables' files are gone
    spark = _Session(catalog=_Catalog({"raw": f"file:{root}/warehouse/raw.db"},
                                      {"raw": ["privacy_ledger", "points"]}))
    with pytest.raises(RootError, match=r"lists 2 table\(s\) of raw .* is missing or empty"):
        check_catalog_in_root(spark, root, ("raw",))
    (root / "warehouse" / "raw.db" / "points").mkdir()
    check_catalog_in_root(spark, root, ("raw",))  # folders present: fine, marker written
    assert (root / "catalog_root.json").exists()


def test_the_rewrite_matches_the_old_prefix_literally():
    sql = rewrite_sql(Path("/r/metastore_db"), "file:/a_b%c/it's/", uri_prefix(Path("/n ew")))
    # LIKE wildcards in the old path are escaped, quotes doubled, the new path URI-escaped
    assert "LIKE 'file:/a!_b!%c/it''s/%' ESCAPE '!'" in sql
    assert "'file:/n%20ew/' || SUBSTR(LOCATION, 18)" in sql
    assert sql.count("UPDATE") == 3 and "commit;" in sql


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()  # hold until told, then exit (the kernel drops the lock)
"""


def test_a_stage_waits_for_the_lock_of_the_sql_server_it_stopped(tmp_path, monkeypatch):
    """Measured in a full suite at load 8: the stopped server's pid read as gone while the lock
    was still held (its last threads were exiting), and the stage failed with "data root ...
    is in use". The lock is now taken as soon as it is released."""
    from jobs.spark import session

    lock = tmp_path / session.ROOT_LOCK
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"

        def stop(root):  # the server "stopped": its lock goes a moment later, not at once
            holder.stdin.write("go\n")
            holder.stdin.flush()
            return True

        monkeypatch.setattr(session, "_stop_sql_server", stop)
        session.acquire_root(tmp_path)
        assert tmp_path in session._held_locks
    finally:
        holder.kill()
        holder.communicate()  # reaps it and closes its pipes
        fd = session._held_locks.pop(tmp_path, None)
        if fd is not None:
            os.close(fd)

"""A copied data root reads and writes only inside itself (issue 21).

`cp -a data_A data_B`, then a collection on data_B: before, the embedded metastore's absolute
locations sent every write into data_A. Now the copy's catalog is re-pointed at data_B when it
is first opened (`jobs.spark.relocation`): data_A's files stay as they were (names, sizes,
modification times), data_B ends with both collections, and the catalog of data_B names no
location in data_A. Also for a copy of a root made before the catalog marker existed (its
prefix is read from the metastore). A moved root is the same case (the rewrite never reads the
old path). Subprocesses, one root (one Derby metastore) each.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobs.spark.metastore_lock import check_metastore_free
from jobs.spark.relocation import MARKER, run_ij
from tests.reliability.test_collect_faults import _run_session

pytestmark = [pytest.mark.slow, pytest.mark.spark]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """relative path -> (size, mtime_ns) of every file under root (the lock file aside)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if name != ".trajpriv.lock":
                st = path.stat()
                out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    """data_A: raw data and collection A, in one session."""
    root = tmp_path_factory.mktemp("root") / "data_A"
    _run_session(root, "local[2]", "raw,A")
    return root


@pytest.mark.parametrize("with_marker", [True, False], ids=["copy", "copy-of-an-older-root"])
def test_a_copied_root_writes_only_inside_itself(original, tmp_path, with_marker):
    copy = tmp_path / "data_B"
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    if not with_marker:
        (copy / MARKER).unlink()
    for leftover in copy.glob("*.pkl"):
        leftover.unlink()
    before = _tree(original)

    snap = _run_session(copy, "local[2]", "B,snapB")["snapB"]

    assert _tree(original) == before  # not one file of data_A added, removed or touched
    pub = snap["pub"]["perturbed_trajectories"]
    assert set(pub["mechanism"]) == {"atp", "exp"}  # A (copied) and B (written in the copy)
    led = snap["ledger"]
    assert set(led[led["state"] == "spent"]["mechanism"]) == {"atp", "exp"}
    check_metastore_free(copy / "metastore_db", 120)  # the session's JVM may still be exiting
    lines = run_ij(copy / "metastore_db", (
        f"connect 'jdbc:derby:{copy / 'metastore_db'}';\n"
        "SELECT COUNT(*) AS N FROM APP.SDS;\n"
        f"SELECT COUNT(*) AS N FROM APP.SDS WHERE LOCATION LIKE '%{original}/%';\n"
        f"SELECT COUNT(*) AS N FROM APP.SERDE_PARAMS WHERE PARAM_VALUE LIKE '%{original}/%';\n"
        f"SELECT COUNT(*) AS N FROM APP.DBS WHERE DB_LOCATION_URI LIKE '%{original}%';\n"
        f"connect 'jdbc:derby:{copy / 'metastore_db'};shutdown=true';\nexit;\n"))
    counts = [int(x) for x in lines if x.strip().isdigit()]
    assert counts[0] > 10 and counts[1:] == [0, 0, 0], counts
    assert (copy / MARKER).exists()

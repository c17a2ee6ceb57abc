"""`publish.group`: the published zone group-readable, everything else under the root its
owner's only (`jobs.spark.session.harden_tree`). No JVM: the modes of a small tree."""

from __future__ import annotations

import grp
import os
import stat
from pathlib import Path

import pytest

from jobs.spark.relocation import RootError
from jobs.spark.session import harden_tree

PUB = "warehouse/trajpriv_pub.db/perturbed_points/dataset=a"
PRIVATE = ["warehouse/trajpriv_raw.db/points/dataset=a", "warehouse/trajpriv_trusted.db/t",
           "runs/r1", "landing/synthetic", "staging/x", "secrets", "metastore_db/seg0"]


def _tree(root: Path) -> None:
    for folder in [PUB, *PRIVATE]:
        (root / folder).mkdir(parents=True, mode=0o755)
        (root / folder / "part-0.parquet").write_bytes(b"x")
        os.chmod(root / folder / "part-0.parquet", 0o644)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_with_a_group_only_the_published_zone_opens_to_it(tmp_path):
    root = tmp_path / "data"
    _tree(root)
    group = grp.getgrgid(os.getgid()).gr_name
    harden_tree(root, group)
    for folder in (root, root / "warehouse"):  # passed through, not listed by others
        assert _mode(folder) == 0o710
    for path in (root / PUB).parents:
        if root / "warehouse" in path.parents:
            assert _mode(path) == 0o750, path
    assert _mode(root / PUB) == 0o750 and _mode(root / PUB / "part-0.parquet") == 0o640
    for folder in PRIVATE:
        for path in (root / folder, root / folder / "part-0.parquet"):
            assert _mode(path) & 0o077 == 0, f"{path}: {oct(_mode(path))}"
    assert _mode(root / "warehouse" / "trajpriv_raw.db") == 0o700
    assert harden_tree(root, group) == 0  # nothing left to change


def test_without_a_group_everything_is_the_owners_again(tmp_path):
    root = tmp_path / "data"
    _tree(root)
    harden_tree(root, grp.getgrgid(os.getgid()).gr_name)
    harden_tree(root)
    for path in [root, *root.rglob("*")]:
        assert _mode(path) & 0o077 == 0, path


def test_an_unknown_group_is_one_line(tmp_path):
    with pytest.raises(RootError, match="publish.group 'no_such_group_x' is not a group"):
        harden_tree(tmp_path, "no_such_group_x")

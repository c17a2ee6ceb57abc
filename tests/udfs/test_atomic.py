"""`udfs.atomic.atomic_open`: all or nothing, owner-only, no temp file left after a failure."""

from __future__ import annotations

import stat

import pytest

from udfs.atomic import atomic_open


def test_replaces_the_file_in_one_step(tmp_path):
    path = tmp_path / "sub" / "out.json"
    with atomic_open(path) as fh:
        fh.write("new\n")
        assert not path.exists()  # nothing visible before the block ends
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["out.json"]


def test_failure_keeps_the_old_file_and_removes_the_temp(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(path, binary=True, prefix=".ckpt-") as fh:
        fh.write(b"half")
        assert [p.name for p in tmp_path.glob(".ckpt-*.tmp")]  # the named temp exists meanwhile
        raise RuntimeError("boom")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]

"""The fault-seam registry (udfs/faults.py): one naming scheme, every seam listed in the developer
guide (docs/development.md),
all off unless the environment sets one, and no self-kill outside the registry."""

from __future__ import annotations

import io
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from udfs import faults

ROOT = Path(__file__).resolve().parents[2]


def test_one_naming_scheme_and_every_seam_documented():
    guide = (ROOT / "docs" / "development.md").read_text()
    doc = faults.__doc__ or ""
    for name, seam in faults.SEAMS.items():
        assert seam.env == faults.PREFIX + name.upper(), name
        assert f"`{seam.env}" in guide, seam.env
        assert f"`{seam.env}" in doc, seam.env


def test_every_seam_is_off_without_its_variable(monkeypatch, tmp_path):
    for seam in faults.SEAMS.values():
        monkeypatch.delenv(seam.env, raising=False)
    assert faults.active() == {}
    faults.on_release_group(lambda: pytest.fail("no seam on: the task is not asked for"))
    for point in faults.CRASH_POINTS:
        faults.crash_point(point)
    faults.ingest_written("trajpriv_raw.points")
    faults.on_first_write("db.t", lambda: pytest.fail("no seam on: nothing written"))
    assert faults.train_hook(0) is None
    fh = io.BytesIO(b"x" * 10)
    fh.seek(10)
    faults.checkpoint_write(fh, 2, "shared")
    assert fh.getvalue() == b"x" * 10


def test_crash_point_raise_and_unknown_point(monkeypatch):
    monkeypatch.setenv(faults.CRASH_AT, "after_ledger:raise")
    faults.crash_point("before_ledger")  # another point: passes
    with pytest.raises(faults.InjectedCrash):
        faults.crash_point("after_ledger")
    with pytest.raises(ValueError, match="unknown crash point"):
        faults.crash_point("nowhere")


def test_train_hook_raises_on_its_rank_and_round_only(monkeypatch):
    monkeypatch.setenv(faults.TRAIN, "1:2")
    assert faults.train_hook(0) is None
    hook = faults.train_hook(1)
    hook(SimpleNamespace(round=1))
    with pytest.raises(RuntimeError, match="injected fault on rank 1 at round 2"):
        hook(SimpleNamespace(round=2))


def test_no_self_kill_outside_the_registry():
    pattern = re.compile(r"os\.kill\(\s*os\.getpid\(\)|signal\.SIGKILL|os\.kill\([^)]*,\s*9\)")
    hits = [f"{p.relative_to(ROOT)}:{i}"
            for top in ("jobs", "models", "udfs", "bench")
            for p in sorted((ROOT / top).rglob("*.py")) if p.name != "faults.py"
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []

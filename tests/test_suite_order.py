"""The suite's file order (tests/conftest.py) names files that exist: a renamed or deleted file
left in `FILE_SECONDS` would silently fall back to the end of the order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FILE_SECONDS

ROOT = Path(__file__).resolve().parents[1]


def test_every_timed_file_exists():
    assert [f for f in FILE_SECONDS if not (ROOT / f).is_file()] == []

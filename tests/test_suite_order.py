"""The suite's file order (tests/conftest.py) names files that exist: a renamed or deleted file
left in `FILE_SECONDS` would silently fall back to the end of the order."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FILE_SECONDS

ROOT = Path(__file__).resolve().parents[1]


def test_every_timed_file_exists_and_the_order_is_longest_first():
    assert [f for f in FILE_SECONDS if not (ROOT / f).is_file()] == []
    assert list(FILE_SECONDS.values()) == sorted(FILE_SECONDS.values(), reverse=True)

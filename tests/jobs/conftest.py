"""Fixtures of the jobs tests that more than one file needs.

`dist`: what `make dist` builds (the wheel, the sdist, and the wheel's bytes as trajpriv.zip),
built once per test session. Under pytest-xdist the files that use it may run on different
workers; they share one build through a lock in the session's temporary folder, so the build
(which writes trajpriv.egg-info into the checkout) never runs twice nor twice at once.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build(out: Path) -> None:
    """The Makefile's `dist` recipe into `out`: `python -m build --no-isolation`, then the wheel
    copied to trajpriv.zip (the name pyspark puts on the executors' sys.path)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                           str(ROOT)], capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("trajpriv-*.whl")
    shutil.copyfile(wheel, out / "trajpriv.zip")


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder like `make dist`'s dist/: trajpriv-*.whl, trajpriv-*.tar.gz, trajpriv.zip."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp("dist")
        _build(out)
        return out
    # the workers' temporary folders share this session's parent (never an earlier session's)
    shared = tmp_path_factory.getbasetemp().parent / "dist"
    with open(shared.parent / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / ".built").is_file():
            _build(shared)
            (shared / ".built").touch()
    return shared

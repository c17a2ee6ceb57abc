"""`make test` builds its two environments side by side (Makefile target `envs`), then tests.

`.venv` and `.venv-airflow` share nothing, so on a fresh machine the sub-make runs them with
-j2 (measured with empty pip caches: 91-116 s instead of 139-167 s one after the other). The
check runs the real Makefile in a scratch folder with a stand-in interpreter: `-m venv DIR`
creates DIR/bin/python (which answers every other call, the suite's `-m pytest` included,
with success), whose first `pip install` writes a file and then waits for the other
environment's file. Built side by side, both files appear and both proceed at once; built one
after the other, the first waits alone and, after a bound, fails the build saying so. So the
outcome never depends on which build starts first or how fast the machine is.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 120  # how long a build waits for the other one (bounds a serial make, not a pass)

# Stand-in for an environment's python: the first pip call meets the other build, later ones
# (and any other call) succeed at once.
ENV_PYTHON = """#!/bin/bash
here=$(cd "$(dirname "$0")/.." && pwd); name=$(basename "$here"); meet=$(dirname "$here")/meet
if [ "$1 $2" = "-m pip" ] && [ ! -e "$here/met" ]; then
  touch "$meet/$name"
  for _ in $(seq 1 {ticks}); do
    [ "$(ls -A "$meet" | wc -l)" -ge 2 ] && {{ touch "$here/met"; exit 0; }}
    sleep 0.5
  done
  echo "$name was built alone: the other environment never started beside it" >&2; exit 1
fi
exit 0
"""
# Stand-in for python3.11: `-m venv DIR` makes DIR/bin/python the script above.
BASE_PYTHON = """#!/bin/bash
[ "$1 $2" = "-m venv" ] || exit 0
mkdir -p "$3/bin" && cp "{env_python}" "$3/bin/python" && chmod +x "$3/bin/python"
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")
def test_make_builds_the_two_environments_side_by_side(tmp_path: Path):
    for name in ("Makefile", "pyproject.toml", "setup.py", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "meet").mkdir()
    env_python = _script(tmp_path / "env_python", ENV_PYTHON.format(ticks=WAIT_S * 2))
    base = _script(tmp_path / "python3.11", BASE_PYTHON.format(env_python=env_python))
    # Targets whose recipes are not under test (apt installs) are made no-ops by their guards
    # where the tools exist; make them no-ops everywhere by overriding them on the command line.
    result = subprocess.run(
        ["make", "--no-print-directory", "-f", "Makefile", "-o", "browser", "-o",
         "postgres-deps", f"PYTHON={base}", "test"],
        cwd=tmp_path, capture_output=True, text=True, timeout=WAIT_S * 3,
        env={**os.environ, "MAKEFLAGS": ""})
    assert result.returncode == 0, result.stdout + result.stderr
    assert sorted(p.name for p in (tmp_path / "meet").iterdir()) == [".venv", ".venv-airflow"]
    assert (tmp_path / ".venv" / ".installed").exists()
    assert (tmp_path / ".venv-airflow" / ".installed").exists()


def test_the_stand_in_fails_a_build_one_after_the_other(tmp_path: Path):
    """Companion: the same stand-in, one environment alone, fails with its message (so the
    test above can tell side by side from one after the other)."""
    (tmp_path / "meet").mkdir()
    env_python = _script(tmp_path / "env_python", ENV_PYTHON.format(ticks=2))
    venv = tmp_path / ".venv" / "bin"
    venv.mkdir(parents=True)
    shutil.copy(env_python, venv / "python")
    result = subprocess.run([str(venv / "python"), "-m", "pip", "install", "x"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert ".venv was built alone" in result.stderr

"""`trajpriv serve --print-systemd-unit`, the endpoints' own folder and the analysts' page (no
Spark, no JVM)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.config import load_config
from jobs.sql import endpoint

ROOT = Path(__file__).resolve().parents[2]


def _unit(tmp_path: Path, *sets: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", "serve", "--print-systemd-unit",
                           f"--set=storage.root={tmp_path / 'data'}", *sets], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120, check=False)


def _directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_the_unit_sandboxes_the_endpoints(tmp_path):
    out = _unit(tmp_path, f"--set=serve.scratch={tmp_path / 'scratch'}", "--set=serve.port=10123")
    assert out.returncode == 0, out.stderr
    unit = _directives(out.stdout)
    for key, value in {"NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectSystem": "strict",
                       "ProtectHome": "yes", "Restart": "on-failure", "UMask": "0077"}.items():
        assert unit[key] == [value], (key, out.stdout)
    assert unit["ReadOnlyPaths"] == [str((tmp_path / "data").resolve())]
    assert unit["ReadWritePaths"] == [str((tmp_path / "scratch").resolve())]
    exec_start = unit["ExecStart"][0]
    assert " serve --wait " in exec_start and "--set=serve.port=10123" in exec_start
    assert f"--set=serve.scratch={(tmp_path / 'scratch').resolve()}" in exec_start
    assert "StateDirectory" not in unit


def test_without_a_scratch_setting_systemd_makes_a_private_state_directory(tmp_path):
    unit = _directives(_unit(tmp_path).stdout)
    assert unit["StateDirectory"] == ["trajpriv-serve"]
    assert unit["StateDirectoryMode"] == ["0700"]
    assert unit["ReadWritePaths"] == ["/var/lib/trajpriv-serve"]


def test_systemd_accepts_the_unit(tmp_path):
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed: the unit cannot be checked here")
    out = _unit(tmp_path, f"--set=serve.scratch={tmp_path / 'scratch'}")
    unit = tmp_path / "trajpriv-serve.service"
    unit.write_text(out.stdout)
    checked = subprocess.run([verify, "verify", str(unit)], capture_output=True, text=True,
                             timeout=120, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_endpoints_scratch_is_private(tmp_path):
    cfg = load_config(None, [f"storage.root={tmp_path / 'data'}",
                             f"serve.scratch={tmp_path / 'scratch'}"])
    folder = endpoint.scratch_dir(cfg)
    assert folder == (tmp_path / "scratch").resolve()
    assert folder.stat().st_mode & 0o777 == 0o700
    assert endpoint.log_path(cfg).parent == folder and endpoint.pid_path(cfg).parent == folder


def test_the_analysts_page_lists_every_construct_of_the_catalogue():
    """docs/operations/analysts.md names what the red-team catalogue sends, case for case."""
    from tests.jobs.endpoint_attacks import CONNECT_ATTACKS, SQL_ATTACKS

    page = (ROOT / "docs" / "operations" / "analysts.md").read_text()
    missing = [a.name for a in (*SQL_ATTACKS, *CONNECT_ATTACKS) if f"- {a.name}\n" not in page]
    assert missing == []

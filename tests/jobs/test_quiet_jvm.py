"""Spark's start-up warnings stay off the terminal of a JVM-starting command at the default
verbosity, and land in the stage log (`<root>/logs/spark.log`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

STARTUP_LINES = (
    "resolves to a loopback address", "Set SPARK_LOCAL_IP", "Using incubator modules",
    "Using Spark's default log4j profile", "Setting default log level",
    "To adjust logging level", "NativeCodeLoader",
)


def test_startup_warnings_go_to_the_stage_log_not_the_terminal(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir(mode=0o700)
    trajpriv = [sys.executable, "-m", "jobs.cli"]
    where = ["--set", f"storage.root={root}"]
    # `budget` starts its JVM in this process (`sql` leaves it to a server with its own log)
    done = subprocess.run([*trajpriv, "budget", *where], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    terminal = done.stdout + done.stderr
    assert "window_start" in done.stdout
    assert [line for line in STARTUP_LINES if line in terminal] == []
    logged = (root / "logs" / "spark.log").read_text()
    # the launcher's warning and log4j's banner are printed by every JVM start
    assert "Using incubator modules" in logged
    assert "Using Spark's default log4j profile" in logged

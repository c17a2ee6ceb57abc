"""A Spark standalone cluster on this machine for the tests: a master and workers started from
pyspark's own `bin/spark-class`, and a Python that cannot see the checkout (so a job imports the
project from `dist/trajpriv.zip` alone).

Cheap as it can be: 256 MiB daemons with the suite's C1-only flags (SPARK_SUBMIT_OPTS,
tests/conftest.py), one core per worker. Readiness is read from the daemons' own log lines,
polled with a generous deadline; every daemon (and the executors it started) is killed by
process group at the end.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 240  # a daemon's JVM start on a loaded 2-core machine: seconds, not minutes


def _wait_for(log: Path, proc: subprocess.Popen, pattern: str) -> re.Match[str]:
    """The first match of `pattern` in the daemon's log; fails with the log's tail if the daemon
    exits or the line does not come within START_TIMEOUT_S."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        match = re.search(pattern, text)
        if match:
            return match
        if proc.poll() is not None or time.monotonic() > deadline:
            state = f"exited {proc.returncode}" if proc.poll() is not None else "timed out"
            pytest.fail(f"{log.name}: {state} before {pattern!r}:\n{text[-4000:]}")
        time.sleep(0.5)


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """`spark-class <args>` in its own process group (its children, the executor and its
    Python workers, stay in that group), output to `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    """TERM to the daemon's process group (the worker stops its executor); once the daemon has
    exited, or after 30 s, KILL whatever is left of the group. The daemon is reaped only after
    that, so its group id cannot have been reused by an unrelated process meanwhile."""
    if proc.returncode is not None:  # reaped already: it died while starting, its group with it
        return
    os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    flags = os.WEXITED | os.WNOHANG | os.WNOWAIT  # has it exited? (without reaping it)
    while os.waitid(os.P_PID, proc.pid, flags) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):  # the group is gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


@contextlib.contextmanager
def standalone_cluster(tmp_path: Path, workers: int = 1
                       ) -> Iterator[tuple[str, Path, Path, dict[str, str]]]:
    """A standalone master and `workers` workers on 127.0.0.1 (ports picked by the OS), each
    worker one core and 1 GiB for executors, all sharing one work folder (an executor's folder
    there is app-<id>/<executor id>/, unique per application): the master URL, the master's
    log, the work folder, and the environment the daemons run with. Every daemon is stopped
    (its process group killed) on the way out, also when a start fails."""
    jit = os.environ.get("SPARK_SUBMIT_OPTS", "")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TRAJPRIV_HOME", "SPARK_CONF_DIR")}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", SPARK_DAEMON_MEMORY="256m",
               SPARK_DAEMON_JAVA_OPTS=jit, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
               SPARK_LOCAL_DIRS=str(tmp_path / "spark-local"),
               SPARK_LOG_DIR=str(tmp_path / "spark-logs"))
    work = tmp_path / "worker"
    procs: list[subprocess.Popen] = []
    try:
        master_log = tmp_path / "master.log"
        procs.append(_daemon(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", "0", "--webui-port", "0"], master_log, env))
        url = _wait_for(master_log, procs[0], r"Starting Spark master at (spark://[\d.]+:\d+)")[1]
        started = []
        for i in range(workers):  # all started, then each awaited: their JVMs start together
            worker_log = tmp_path / ("worker.log" if i == 0 else f"worker{i}.log")
            procs.append(_daemon(["org.apache.spark.deploy.worker.Worker", url, "--host",
                                  "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "1",
                                  "--memory", "1g", "--work-dir", str(work)], worker_log, env))
            started.append((worker_log, procs[-1]))
        for worker_log, proc in started:
            _wait_for(worker_log, proc, "Successfully registered with master")
        yield url, master_log, work, env
    finally:
        for proc in reversed(procs):
            _stop(proc)


def python_without_checkout(tmp_path: Path) -> Path:
    """.venv's interpreter with site-packages but no .pth files (`-S`): the editable install of
    the project is invisible, so `jobs` can come only from the zip."""
    wrapper = tmp_path / "python"
    site = sysconfig.get_paths()["purelib"]
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" '
                       f'exec {sys.executable} -S "$@"\n')
    wrapper.chmod(0o755)
    return wrapper

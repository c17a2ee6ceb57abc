"""A class-data-sharing archive of Spark's JVM for the test suite (tests only; jobs untouched).

Why: the suite starts many JVMs (the shared sessions, every stage subprocess,
spark-submit under Airflow), each on kilobytes of data, and the machine is CPU-bound while it
runs. Most of a start is loading and verifying the same ~20,000 classes of Spark, Hive and Derby.
Java 17 can dump the classes one run loaded into an archive (`-XX:ArchiveClassesAtExit`) that
later JVMs map instead of loading (`-XX:SharedArchiveFile`): a session's start plus a small
write went from 32-38 s to 18-20 s wall at load 3 on this 2-core machine.

The archive is built once per test session, started before any worker, by one small session
(start, a table write, an Arrow round trip through a pandas UDF). A JVM whose class path or
options do not match the archive (another checkout's `.venv`, a standalone worker) ignores it;
`-Xlog:cds=off,cds+dynamic=off` keeps that from printing a warning into a job's output, which
tests of one-line error messages read. If the build fails, the suite runs without it.

The build runs in the background (`start`, about 45 s, one core) while the tests that start no
JVM run: the JVM options name the archive's final path from the start, the build dumps under
another name and renames the file when it is complete, so a JVM sees the whole archive or none
(Java then starts without sharing, silently), and `wait` holds a test that starts a JVM until
the build has ended, one way or the other.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What the archive's JVM runs: the classes of a session's start, a catalog write, a read and
# an Arrow-batched Python UDF, which nearly every JVM of the suite loads.
_WARM_UP = """
import sys
import pandas as pd
from jobs.config import load_config
from jobs.spark.catalog import write_table
from jobs.spark.session import get_spark, stop_spark

cfg = load_config(None, ["storage.root=" + sys.argv[1], "spark.master=local[2]",
                         "spark.conf.spark.sql.shuffle.partitions=2",
                         "spark.conf.spark.driver.memory=1g"])
spark = get_spark(cfg)
df = spark.createDataFrame(pd.DataFrame({"dataset": ["x"], "loc_id": [1], "lat": [31.2],
                                         "lon": [121.4]}))
write_table(df, "trajpriv_pub.locations", partition_by=["dataset"], replace={"dataset": "x"})
spark.table("trajpriv_pub.locations").mapInPandas(lambda it: it, df.schema).toPandas()
stop_spark(spark)
"""

QUIET = "-Xlog:cds=off,cds+dynamic=off"


ARCHIVE = "spark-classes.jsa"
#: Written by the background build when it has ended (its content: "built" or "failed").
DONE = "done"
#: Where the background build writes (set by `start` for the workers and every subprocess).
FOLDER_ENV = "TRAJPRIV_TESTS_JVM_ARCHIVE"


def build(folder: Path, jvm_opts: str, timeout_s: float = 600) -> Path | None:
    """Dump the archive into `folder` with a JVM run under `jvm_opts`; its path, or None (and
    the reason on stderr) when Java could not write one. Java writes it under a temporary
    name; it gets its final name only once complete."""
    archive, partial = folder / ARCHIVE, folder / f"building-{ARCHIVE}"
    env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{jvm_opts} -XX:ArchiveClassesAtExit={partial}",
           "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run([sys.executable, "-c", _WARM_UP, str(folder / "root")], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"tests: no JVM class archive ({exc}); JVMs start without one", file=sys.stderr)
        return None
    if proc.returncode != 0 or not partial.is_file():
        print(f"tests: no JVM class archive (exit {proc.returncode}): {proc.stderr[-500:]}",
              file=sys.stderr)
        return None
    os.replace(partial, archive)
    return archive


def start(folder: Path, jvm_opts: str) -> tuple[subprocess.Popen, str]:
    """Build the archive in a background process; (the process, the JVM options naming the
    archive) for every later JVM. Its output goes to `folder`/build.log; the process leads a
    session of its own, so `stop` ends its JVM with it."""
    with open(folder / "build.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.jvm_archive", str(folder),
                                 jvm_opts], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    os.environ[FOLDER_ENV] = str(folder)
    return proc, options(jvm_opts, folder / ARCHIVE)


def stop(proc: subprocess.Popen) -> None:
    """End a build still running (the test session ended first), its JVM included."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait(timeout_s: float = 900) -> None:
    """Return once the background build has ended (at once when none was started). A build
    that takes longer than `timeout_s` is not waited for: JVMs then start without it."""
    folder = os.environ.get(FOLDER_ENV)
    if not folder:
        return
    done, deadline = Path(folder) / DONE, time.monotonic() + timeout_s
    while not done.exists() and Path(folder).is_dir() and time.monotonic() < deadline:
        time.sleep(0.5)


def options(jvm_opts: str, archive: Path | None) -> str:
    """`jvm_opts` plus the archive (and the switch that keeps a mismatch or a missing file
    quiet)."""
    return f"{jvm_opts} -XX:SharedArchiveFile={archive} {QUIET}" if archive else jvm_opts


if __name__ == "__main__":  # the background build of `start`
    target = Path(sys.argv[1])
    built = build(target, sys.argv[2])
    (target / DONE).write_text("built" if built else "failed")

"""Shared fixtures: where the real data lives (skip cleanly without it)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# Nearly every JVM the suite starts (each stage's subprocess, spark-submit under Airflow) runs
# seconds of work on kilobytes of data: JIT-compiling for the long run costs more than it saves
# (the shared session of each worker, which lives for the whole run, is the exception below).
# C1 only and the serial collector halve a session's start-plus-small-write on
# this 2-core machine (measured 41-49 s -> 24 s at load 3.5). Tests only: a real job keeps the
# JVM's defaults. spark-submit's launcher reads SPARK_SUBMIT_OPTS (prints nothing, unlike
# JAVA_TOOL_OPTIONS, so the tests of one-line error output are unaffected); set it to override
# (which also turns off the class archive below).
# A C1-only JVM reserves only 48 MiB for compiled code (all tiers: 240 MiB). One that lives
# long (a standalone worker's executor, an endpoint's server) can fill it, and then dies the
# first time it needs a new adapter ("Out of space in CodeCache for adapters"); the full
# reservation costs no memory until code is compiled into it.
C1_ONLY = "-XX:TieredStopAtLevel=1"
JVM_OPTS = f"{C1_ONLY} -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC"
# What the suite itself put into SPARK_SUBMIT_OPTS: xdist workers inherit the controlling
# process's environment, so without this mark a worker would take the suite's own options for
# a user's and keep its shared session C1-only.
SUITE_JVM_OPTS = "TRAJPRIV_SUITE_JVM_OPTS"


def user_jvm_opts(environ) -> str | None:
    """SPARK_SUBMIT_OPTS as whoever runs the suite set it; None when unset or the suite's own."""
    opts = environ.get("SPARK_SUBMIT_OPTS")
    return None if opts is None or opts == environ.get(SUITE_JVM_OPTS) else opts


def _set_suite_jvm_opts(opts: str) -> None:
    os.environ["SPARK_SUBMIT_OPTS"] = os.environ[SUITE_JVM_OPTS] = opts


_USER_JVM_OPTS = user_jvm_opts(os.environ)
if _USER_JVM_OPTS is None and SUITE_JVM_OPTS not in os.environ:
    _set_suite_jvm_opts(JVM_OPTS)


_ARCHIVE_BUILD = pytest.StashKey[tuple[Path, subprocess.Popen]]()
_JVM_MARKERS = ("spark", "airflow", "slow")


def _starts_a_jvm(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in _JVM_MARKERS)


def _use_jvm_archive(config: pytest.Config) -> None:
    """A class-data-sharing archive of Spark's JVM for the rest of the session
    (tests/jvm_archive.py: about half of each JVM start), unless SPARK_SUBMIT_OPTS was set by
    whoever runs the suite. Built in the background while the tests that start no JVM run;
    subprocesses and xdist workers inherit its options through the environment."""
    if _USER_JVM_OPTS is not None or _ARCHIVE_BUILD in config.stash:
        return
    from tests import jvm_archive

    folder = Path(tempfile.mkdtemp(prefix="trajpriv-jvm-"))
    proc, opts = jvm_archive.start(folder, JVM_OPTS)
    config.stash[_ARCHIVE_BUILD] = (folder, proc)
    _set_suite_jvm_opts(opts)


def pytest_configure(config: pytest.Config) -> None:
    # Every test leaves the process as it found it (tests/process_guard.py).
    from tests.process_guard import ProcessGuard

    config.pluginmanager.register(ProcessGuard(), "process_guard")
    from tests.suite_timing import CpuMeter, FileTimes

    config.pluginmanager.register(CpuMeter(), "cpu_meter")  # where tests run
    if not hasattr(config, "workerinput"):  # the reporting process: per-file seconds
        config.pluginmanager.register(FileTimes(), "suite_timing")
    # Under pytest-xdist, the controlling process starts it before the workers start.
    if (config.getoption("numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER")
            and not config.option.collectonly):
        _use_jvm_archive(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    build = config.stash.get(_ARCHIVE_BUILD, None)
    if build is not None:
        from tests import jvm_archive

        folder, proc = build
        jvm_archive.stop(proc)  # when the session ended first (an early failure, -x, Ctrl-C)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that starts a JVM waits for the archive's build to end (before its fixtures)."""
    if _starts_a_jvm(item):
        from tests import jvm_archive

        jvm_archive.wait()


# Wall seconds of the longest test files in a full `make test` (three workers on two cores,
# fresh clone: the seconds-per-file table `make test` prints). They only order the files
# (longest first): a stale figure costs minutes of imbalance at the end, never a wrong result.
FILE_SECONDS = {
    "tests/airflow/test_dag_run.py": 360,
    "tests/reliability/test_collect_crash_sweep.py": 300,
    "tests/jobs/test_endpoints.py": 260,
    "tests/reliability/test_standalone_pipeline.py": 230,
    "tests/jobs/test_collect_spark.py": 225,
    "tests/reliability/test_train_faults.py": 200,
    "tests/jobs/test_ingest.py": 200,
    "tests/jobs/test_train_spark.py": 175,
    "tests/reliability/test_root_copy.py": 175,
    "tests/reliability/test_collect_faults.py": 145,
    "tests/reliability/test_postgres_metastore.py": 145,
    "tests/reliability/test_first_write_kill.py": 110,
    "tests/jobs/test_sql_server.py": 75,
    "tests/jobs/test_evaluate_attacks.py": 65,
    "tests/jobs/test_train_markov_spark.py": 55,
    "tests/jobs/test_catalog.py": 40,
    "tests/jobs/test_evaluate_longrange.py": 35,
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shuffle-files", type=int, default=None, metavar="SEED",
        help="shuffle the files within each of the suite's scheduling classes with this seed "
             "(`make test` draws a new one each run and prints it: replay a failure with "
             "`make test SHUFFLE_SEED=N`)")


def pytest_report_header(config: pytest.Config) -> str | None:
    seed = config.getoption("shuffle_files")
    return None if seed is None else f"file order: shuffled with seed {seed}"


def size_class(seconds: int) -> int:
    """The scheduling class of a file from its measured seconds: the files over 5 minutes,
    those over 100 s, the rest. A shuffle reorders files within a class only, so the longest
    still start first (a 10-minute file started last would add its length to the wall time)."""
    return 2 if seconds >= 300 else 1 if seconds >= 100 else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files that start no JVM first; then the others, longest first (`FILE_SECONDS`), then
    the rest of the files marked `slow`, then the rest; each file's tests together, otherwise
    collection order. With `--shuffle-files SEED` the files of each class (no JVM; JVM by
    `size_class`, slow or not) come in an order drawn from SEED instead: which files precede
    which on a worker changes from run to run, so a test that depends on another file's
    leftovers fails on some seed (and tests/process_guard.py names what was left).

    Under `make test` (pytest-xdist, `--dist loadfile --no-loadscope-reorder`) each worker takes
    the next file from this order when it is nearly done with its own. The JVM-free files run
    while the JVM class archive is built in the background (one core for about 45 s, which the
    suite used to wait for); then the longest files start first and the many short JVM files
    fill the gaps at the end (greedy longest-first scheduling). xdist's own order, most tests
    first, started the 20-minute DAG run 18 minutes in; slow files in collection order left a
    worker with a 150 s file starting 14 minutes in while the others finished 60-100 s before
    it. A serial run is unaffected in substance: the same tests, in that order.
    """
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    first_index: dict[str, int] = {}
    slow_file: set[str] = set()
    jvm_file: set[str] = set()
    for index, item in enumerate(items):
        first_index.setdefault(file_of(item), index)
        if item.get_closest_marker("slow") is not None:
            slow_file.add(file_of(item))
        if _starts_a_jvm(item):
            jvm_file.add(file_of(item))

    seed = config.getoption("shuffle_files", None)
    if seed is not None:
        files = sorted(first_index)
        random.Random(seed).shuffle(files)
        drawn = {f: i for i, f in enumerate(files)}

        def order(item: pytest.Item) -> tuple:
            f = file_of(item)
            if f not in jvm_file:
                return (0, 0, False, drawn[f])
            return (1, -size_class(FILE_SECONDS.get(f, 0)), f not in slow_file, drawn[f])
    else:
        def order(item: pytest.Item) -> tuple:
            f = file_of(item)
            if f not in jvm_file:
                return (0, 0, False, first_index[f])
            return (1, -FILE_SECONDS.get(f, 0), f not in slow_file, first_index[f])

    items.sort(key=order)
    # A serial run builds the JVM archive when it will start a JVM at all.
    if (not os.environ.get("PYTEST_XDIST_WORKER") and not config.option.collectonly
            and jvm_file):
        _use_jvm_archive(config)


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ../shared/data; tests marked `realdata` skip with a reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} does not exist")
    return SHARED_DATA


@pytest.fixture(scope="session")
def spark_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data root (warehouse + metastore) of the one SparkSession the test session shares."""
    return tmp_path_factory.mktemp("trajpriv_data")


@pytest.fixture(scope="session")
def spark_config(spark_root: Path):
    """The Config the shared session was built with (DESIGN.md section 9: local[2], 2 shuffles)."""
    from jobs.config import load_config

    return load_config(
        None,
        [
            f"storage.root={spark_root}",
            "spark.master=local[2]",
            "spark.conf.spark.sql.shuffle.partitions=2",
            "spark.conf.spark.sql.execution.arrow.pyspark.fallback.enabled=false",
            "spark.conf.spark.driver.memory=2g",
        ],
    )


@pytest.fixture(scope="session")
def spark(spark_config):
    """One session-scoped SparkSession with the project catalog (Hive metastore under tmp)."""
    from jobs.spark.session import get_spark

    # This JVM lives as long as the worker (hundreds of queries), unlike the short stage JVMs:
    # there the optimising compiler pays for itself, so it runs without the C1-only cap (same
    # class archive). Measured quiet: a small warm collect 15-20 s C1-only, 11-13 s with all
    # tiers; the crash-sweep file 268 s / 471 CPU-s C1-only, 248 s / 443 CPU-s with all tiers.
    from tests import jvm_archive

    jvm_archive.wait()
    with pytest.MonkeyPatch.context() as env:
        if _USER_JVM_OPTS is None:
            opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
            env.setenv("SPARK_SUBMIT_OPTS", opts.replace(C1_ONLY, "").strip())
        session = get_spark(spark_config)
    yield session
    session.stop()

"""The process guard: a test that leaves the test process changed fails, naming the change.

Under pytest-xdist one worker process runs many files one after another, so whatever a test
changes in its process and does not put back reaches every later test of that worker. Which
tests those are depends on scheduling: a leak then fails some other test by chance. The guard
takes the process's state before each test (after the fixtures of wider scope are set up) and
again after its function fixtures are torn down (monkeypatch's undo included); for each file
it does the same around the file's first and last test, so a module fixture's leak is caught
too. What it watches:

- `os.environ` (set, changed, removed variables);
- the working directory, the umask;
- logging: every logger's level and `logging.disable`;
- `sys.path`;
- child processes still running (zombies excepted: nothing runs in them);
- an active SparkContext;
- at a file's end, a warm `trajpriv sql` server on one of the worker's tmp roots (detached by
  design, so no one's child; idle, it would hold a JVM for ten more minutes).

State that a *session* fixture sets up (the shared SparkSession, its JVM, the umask and
PYSPARK_PYTHON that `get_spark` sets for its process) lives for the whole session by design:
what a session fixture changes while it is set up becomes part of the expected state.

After a leak is reported the guard puts the state back (kills a leaked child, stops a leaked
SparkContext), so one defect fails one test, not the rest of the worker's run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest


@dataclass(frozen=True)
class ProcessState:
    """What one test may not leave changed."""

    environ: dict[str, str]
    cwd: str
    umask: int
    log_levels: dict[str, int]
    log_disable: int
    sys_path: tuple[str, ...]
    children: dict[int, str] = field(default_factory=dict)  # pid -> command line
    spark_context: int | None = None  # id() of the active SparkContext
    # pid -> command line of the detached `trajpriv sql` servers on this worker's tmp roots
    sql_servers: dict[int, str] = field(default_factory=dict)


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def _log_levels() -> dict[str, int]:
    levels = {"<root>": logging.getLogger().level}
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            levels[name] = logger.level
    return levels


def _processes() -> list[tuple[int, int, str, str]]:
    """(pid, parent pid, state, command line) of every process, from one pass over /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # the command name is in parentheses and may hold spaces: fields follow the last ')'
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue  # it ended while being read
        found.append((int(entry.name), int(ppid), state, cmd.strip()))
    return found


def running_children(pid: int | None = None, procs=None) -> dict[int, str]:
    """The running (not zombie) child processes of `pid` (this process): pid -> command line."""
    pid = os.getpid() if pid is None else pid
    return {p: cmd[:200] for p, ppid, state, cmd in (procs if procs is not None else _processes())
            if ppid == pid and state != "Z" and LIBRARY_CHILD not in cmd}


def sql_servers(basetemp: str | None, procs=None) -> dict[int, str]:
    """The warm `trajpriv sql` servers (jobs/sql/client.py starts them detached, so they are
    no one's children) whose config lies under `basetemp`, this worker's tmp folder: pid ->
    command line. An idle one lives `--idle-timeout` seconds after its last query."""
    if basetemp is None:
        return {}
    return {p: cmd[:200] for p, _, _, cmd in (procs if procs is not None else _processes())
            if "jobs.sql.server" in cmd and basetemp in cmd}


def _spark_context() -> int | None:
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return None if sc is None else id(sc)


#: The project's logger namespaces (jobs.harness.apply_verbose sets the first three).
OWN_LOGGERS = frozenset({"trajpriv", "jobs", "models", "udfs", "tests", "bench"})

#: Variables that pytest itself sets and changes between phases.
PYTEST_OWN = frozenset({"PYTEST_CURRENT_TEST"})

#: Process-wide state a library sets up once, on first use, for the rest of the process: it is
#: the same whichever test comes first, so the guard takes it into its baseline instead of
#: blaming (and undoing) the first test that happened to use the library. torch's inductor
#: names its cache folder in the environment, and scikit-learn's import sets two Intel OpenMP
#: variables (sklearn/__init__.py, setdefault); multiprocessing starts one resource tracker per
#: process (killing it broke the next test that spawned ranks); every stage quiets py4j and
#: pyspark to WARNING (jobs/harness.py configure_logging).
LIBRARY_ENV = frozenset({"TORCHINDUCTOR_CACHE_DIR", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"})
LIBRARY_CHILD = "multiprocessing.resource_tracker"
LIBRARY_LOGGERS = {"py4j": logging.WARNING, "pyspark": logging.WARNING}


def snapshot(basetemp: str | None = None) -> ProcessState:
    procs = _processes()
    return ProcessState(
        environ={k: v for k, v in os.environ.items()
                 if k not in PYTEST_OWN and k not in LIBRARY_ENV},
        cwd=os.getcwd(),
        umask=_umask(),
        log_levels=_log_levels(),
        log_disable=logging.root.manager.disable,
        sys_path=tuple(sys.path),
        children=running_children(procs=procs),
        spark_context=_spark_context(),
        sql_servers=sql_servers(basetemp, procs),
    )


def changes(before: ProcessState, after: ProcessState) -> list[str]:
    """Each difference from `before` to `after` that a test must not leave, one line each."""
    found: list[str] = []
    for name in sorted(before.environ.keys() | after.environ.keys()):
        old, new = before.environ.get(name), after.environ.get(name)
        if old != new:
            was = "unset" if old is None else repr(old)
            now = "unset" if new is None else repr(new)
            found.append(f"os.environ[{name!r}] is {now} (was {was})")
    if before.cwd != after.cwd:
        found.append(f"working directory is {after.cwd} (was {before.cwd})")
    if before.umask != after.umask:
        found.append(f"umask is {after.umask:04o} (was {before.umask:04o})")
    for name in sorted(after.log_levels):
        old = before.log_levels.get(name, logging.NOTSET)
        # a library's import may give its new loggers levels (torch does): only loggers that
        # existed before, and new ones of the project's own packages, are the test's doing
        new_foreign = name not in before.log_levels and name.split(".")[0] not in OWN_LOGGERS
        library_quieted = LIBRARY_LOGGERS.get(name) == after.log_levels[name]
        if after.log_levels[name] != old and not new_foreign and not library_quieted:
            found.append(f"logger {name!r} level is {logging.getLevelName(after.log_levels[name])}"
                         f" (was {logging.getLevelName(old)})")
    if before.log_disable != after.log_disable:
        found.append(f"logging.disable({after.log_disable}) (was {before.log_disable})")
    if before.sys_path != after.sys_path:
        added = [p for p in after.sys_path if p not in before.sys_path]
        removed = [p for p in before.sys_path if p not in after.sys_path]
        found.append(f"sys.path changed (added {added}, removed {removed}"
                     + (", reordered" if not added and not removed else "") + ")")
    for pid in sorted(after.children.keys() - before.children.keys()):
        found.append(f"child process {pid} still running: {after.children[pid]}")
    if after.spark_context is not None and after.spark_context != before.spark_context:
        found.append("a SparkContext it started is still active (stop the session it opened)")
    for pid in sorted(after.sql_servers.keys() - before.sql_servers.keys()):
        found.append(f"trajpriv sql server {pid} still running (stop it: "
                     f"jobs.sql.client.stop_server(root), or run sql --no-server): "
                     f"{after.sql_servers[pid]}")
    return found


def restore(before: ProcessState, after: ProcessState) -> None:
    """Put the process back to `before` after a leak was reported."""
    for name in list(os.environ):
        if name not in PYTEST_OWN and name not in before.environ:
            del os.environ[name]
    os.environ.update(before.environ)
    with contextlib.suppress(OSError):
        os.chdir(before.cwd)
    os.umask(before.umask)
    for name in after.log_levels:
        logger = logging.getLogger() if name == "<root>" else logging.getLogger(name)
        logger.setLevel(before.log_levels.get(name, logging.NOTSET))
    logging.disable(before.log_disable)
    sys.path[:] = before.sys_path
    for pid in after.children.keys() - before.children.keys():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    for pid in after.sql_servers.keys() - before.sql_servers.keys():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # not our child: init reaps it
    if after.spark_context is not None and after.spark_context != before.spark_context:
        from pyspark import SparkContext

        with contextlib.suppress(Exception):
            SparkContext._active_spark_context.stop()


class ProcessGuard:
    """The plugin: one expected state per open test and per open file."""

    def __init__(self) -> None:
        self.expected: dict[str, ProcessState] = {}  # "test" / "file" -> state
        self.current_file: Path | None = None
        self.basetemp: str | None = None  # this worker's tmp folder, from the first test on

    def _check(self, key: str, where: str) -> None:
        before = self.expected.pop(key, None)
        if before is None:
            return
        after = snapshot(self.basetemp)
        if key == "test":
            # a module fixture may keep a warm server for its tests (tests/jobs/
            # test_sql_server.py): servers count at the file's end only
            after = replace(after, sql_servers=before.sql_servers)
        found = changes(before, after)
        if found:
            restore(before, after)
            pytest.fail(f"process guard: {where} left the test process changed: "
                        + "; ".join(found), pytrace=False)

    def _accept_session_state(self) -> None:
        """A session fixture was set up: what it changed is expected from now on."""
        now = snapshot(self.basetemp)
        for key, before in self.expected.items():
            self.expected[key] = replace(
                now, children={**before.children, **now.children})

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        result = yield
        if fixturedef.scope == "session":
            self._accept_session_state()
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        if item.path != self.current_file:
            self.current_file = item.path
            self.expected["file"] = snapshot(self.basetemp)
        return (yield)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None):
        result = yield
        if nextitem is None:
            # The run's last test also tears the session fixtures down, which may put back
            # what they changed: no file check there.
            self.expected.pop("file", None)
        elif nextitem.path != item.path:
            self._check("file", f"{item.path.name} (its module fixtures or its tests)")
        return result

    @pytest.fixture(autouse=True)
    def _process_guard(self, request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory):
        """Autouse, function scope: set up after every wider fixture, torn down after every
        other function fixture of the test (those it requested come after it)."""
        self.basetemp = str(tmp_path_factory.getbasetemp())
        self.expected["test"] = snapshot(self.basetemp)
        yield
        self._check("test", request.node.nodeid)

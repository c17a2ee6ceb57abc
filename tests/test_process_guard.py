"""The process guard (tests/process_guard.py) catches what a test leaves changed, and the one
leak the suite had is gone.

Each case runs a small pytest session in a fresh interpreter (pytester's subprocess mode), so a
planted leak never touches this process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.process_guard import ProcessState, changes, running_children, snapshot

ROOT = Path(__file__).resolve().parents[1]

GUARD_CONFTEST = textwrap.dedent("""
    from tests.process_guard import ProcessGuard

    def pytest_configure(config):
        config.pluginmanager.register(ProcessGuard(), "process_guard")
""")


def run_inner(tmp_path: Path, tests: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(GUARD_CONFTEST)
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(tests))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-W", "error", str(tmp_path / "test_inner.py"), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)


PLANTED = """
    import logging, os, subprocess, sys
    import pytest

    KEPT = []   # a reference kept, so the leaked child raises no ResourceWarning of its own

    def test_leaks_an_environment_variable():
        os.environ["TRAJPRIV_PLANTED_LEAK"] = "1"

    def test_sees_no_leak():
        assert "TRAJPRIV_PLANTED_LEAK" not in os.environ   # the guard put it back

    def test_leaks_a_child_process(tmp_path):
        KEPT.append(subprocess.Popen(["sleep", "300"]))
        (tmp_path.parent / "child.pid").write_text(str(KEPT[-1].pid))

    def test_leaks_the_working_directory(tmp_path):
        os.chdir(tmp_path)

    def test_leaks_a_logging_level():
        logging.getLogger("jobs").setLevel(logging.DEBUG)

    def test_leaks_the_umask():
        os.umask(0o002)

    def test_leaks_sys_path():
        sys.path.append("/nonexistent-planted")

    def test_clean_with_monkeypatch(monkeypatch, tmp_path):
        monkeypatch.setenv("TRAJPRIV_PLANTED_LEAK", "2")
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
"""


def test_the_guard_names_each_planted_leak_and_puts_the_state_back(tmp_path):
    proc = run_inner(tmp_path, PLANTED, "--basetemp", str(tmp_path / "base"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "8 passed, 6 errors" in out, out  # each leak: its call passes, its teardown errs
    expected = {
        "test_leaks_an_environment_variable": "os.environ['TRAJPRIV_PLANTED_LEAK'] is '1' "
                                              "(was unset)",
        "test_leaks_a_child_process": "still running: sleep 300",
        "test_leaks_the_working_directory": "working directory is",
        "test_leaks_a_logging_level": "logger 'jobs' level is DEBUG (was NOTSET)",
        "test_leaks_the_umask": "umask is 0002",
        "test_leaks_sys_path": "sys.path changed (added ['/nonexistent-planted']",
    }
    for test, change in expected.items():
        line = next((ln for ln in out.splitlines()
                     if f"test_inner.py::{test} left the test process changed" in ln), None)
        assert line is not None and change in line, (test, out)
    # the leaked child was killed, not left running after the session
    pid = int((tmp_path / "base" / "child.pid").read_text())
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_the_guard_catches_a_module_fixture_that_leaks(tmp_path):
    proc = run_inner(tmp_path, """
        import os
        import pytest

        @pytest.fixture(scope="module")
        def configured():
            os.environ["TRAJPRIV_MODULE_LEAK"] = "1"
            yield

        def test_uses_it(configured):
            pass

        def test_uses_it_too(configured):
            pass
    """, "--basetemp", str(tmp_path / "base"))
    # pytest puts an inner file's module fixtures down when the run ends, where no file check
    # is made; a second file after it makes the first file's end a file boundary
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out  # alone, the last file of a run is not checked
    (tmp_path / "test_later.py").write_text("def test_later():\n    pass\n")
    proc = run_inner(tmp_path, (tmp_path / "test_inner.py").read_text(),
                     str(tmp_path / "test_later.py"), "--basetemp", str(tmp_path / "base2"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "test_inner.py (its module fixtures or its tests) left the test process changed: " \
           "os.environ['TRAJPRIV_MODULE_LEAK'] is '1' (was unset)" in out, out


def test_state_that_a_session_fixture_sets_up_is_expected(tmp_path):
    (tmp_path / "conftest.py").write_text(GUARD_CONFTEST)
    proc = run_inner(tmp_path, """
        import os, subprocess
        import pytest

        @pytest.fixture(scope="session")
        def server():
            os.environ["TRAJPRIV_SESSION_STATE"] = "1"
            proc = subprocess.Popen(["sleep", "300"])
            yield proc
            proc.kill()
            proc.wait()

        def test_first(server):
            pass

        def test_second(server):
            pass
    """)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_changes_lists_each_difference():
    before = snapshot()
    after = ProcessState(
        environ={**before.environ, "X_NEW": "1"}, cwd="/", umask=0o022,
        log_levels={**before.log_levels, "models": 10}, log_disable=before.log_disable,
        sys_path=(*before.sys_path, "/x"), children={**before.children, 1: "init"},
        spark_context=before.spark_context)
    found = changes(before, after)
    assert any("X_NEW" in c for c in found)
    assert any("'models' level is DEBUG" in c for c in found)
    assert any("child process 1 still running: init" in c for c in found)
    assert changes(before, before) == []


def test_running_children_sees_a_child_and_not_a_zombie():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert proc.pid in running_children()
    finally:
        proc.kill()
    # killed but not yet waited for: a zombie, which runs nothing
    for _ in range(200):
        if proc.pid not in running_children():
            break
        os.sched_yield()
    proc.wait()
    assert proc.pid not in running_children()


VERBOSE_TEST = "tests/jobs/test_logs.py::test_verbose_is_an_option_of_every_stage"


@pytest.mark.parametrize("node", [VERBOSE_TEST])
def test_the_verbose_test_leaves_no_verbose_behind(tmp_path, node):
    """Measured defect: test_verbose_is_an_option_of_every_stage set TRAJPRIV_VERBOSE outside
    monkeypatch, and every later test of its xdist worker ran verbose (JVM start-up lines on
    the terminal: tests/jobs/test_quiet_jvm.py failed by scheduling chance). Here it runs
    before a probe in one session, without the guard."""
    probe = tmp_path / "test_probe.py"
    probe.write_text("import os\n\ndef test_not_verbose():\n"
                     "    assert os.environ.get('TRAJPRIV_VERBOSE') is None\n")
    env = {k: v for k, v in os.environ.items() if k != "TRAJPRIV_VERBOSE"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
         "--rootdir", str(ROOT), node, str(probe)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout


def test_a_detached_sql_server_on_a_tmp_root_is_named_at_the_files_end(tmp_path):
    """Measured defect: tests/reliability/test_metastore_busy.py's `trajpriv sql` left its warm
    server (detached, so no one's child) holding a JVM for ten minutes after the suite."""
    import signal

    from tests.process_guard import sql_servers

    # a stand-in with the server's command line, detached the way jobs/sql/client.py does it
    cmd = (f"{sys.executable} -c 'import time; time.sleep(120)' jobs.sql.server "
           f"--config {tmp_path}/conf.yaml > /dev/null 2>&1 & echo $!")
    pid = int(subprocess.run(["sh", "-c", cmd], capture_output=True, text=True,
                             check=True).stdout)
    try:
        before = snapshot(str(tmp_path))
        assert pid in before.sql_servers and pid not in running_children()
        assert sql_servers(str(tmp_path / "elsewhere")) == {}  # another worker's roots
        found = changes(snapshot(str(tmp_path / "elsewhere")), before)
        assert len(found) == 1 and f"trajpriv sql server {pid} still running" in found[0]
    finally:
        os.kill(pid, signal.SIGKILL)

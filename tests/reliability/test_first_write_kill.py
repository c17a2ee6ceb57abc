"""A kill during any table's first write, then reruns: each succeeds up to the next table, and
the last one publishes the whole release, each trajectory charged once (issue 21).

A process killed inside a CTAS leaves the table's files in its location and no catalog entry;
Spark then refuses that location on every later CTAS (LOCATION_ALREADY_EXISTS), which wedged
the stage for good. `TRAJPRIV_FAULT_KILL_FIRST_WRITE` makes a session write those files and
die at the first write of each table in turn (once per table), so one root passes through a
crash at the first write of every table that raw data and a collection create, in the order
they are created; each rerun is the same steps again, as Airflow's retry starts them.

Two processes, not one per table (each JVM start is half a minute of a loaded suite): the first
is SIGKILLed at the first table's first write, as a machine loss would (a real kill: no
`finally`, the Derby metastore left as the kill found it); the second starts on that root and
reruns the steps in one session, each attempt ending in an `InjectedCrash` at the next table's
first write (`:raise`: the same durable state, files written and no catalog entry, as
`udfs/faults.py` says), until an attempt goes through.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.config import load_config
from tests.reliability.test_collect_faults import LIMIT_S, _conf_file, _env, _published, _spend

pytestmark = [pytest.mark.slow, pytest.mark.spark]

STEPS = "raw,A,snapA"
# what raw data and one collection create (the test fails if a crash missed one of them)
TABLES = ("trajpriv_pub.locations", "trajpriv_raw.trajectories", "trajpriv_raw.privacy_ledger",
          "trajpriv_pub.perturbed_trajectories", "trajpriv_pub.releases",
          "trajpriv_trusted.evaluation", "trajpriv_pub.runs")


def _sweep(conf: str, steps: str, out: str) -> None:
    """(subprocess) `steps` again and again in one session until an attempt goes through; each
    attempt that dies at a table's first write (`InjectedCrash`) is recorded and rerun."""
    from jobs.spark.session import get_spark
    from tests.reliability.test_collect_faults import _run_steps
    from udfs.faults import InjectedCrash

    spark = get_spark(load_config(conf))
    crashes: list[str] = []
    results = None
    try:
        for _ in range(len(TABLES) + 2):
            try:
                results = _run_steps(spark, conf, steps)
                break
            except InjectedCrash as crash:
                crashes.append(str(crash).removeprefix("first write of "))
    finally:
        spark.stop()
    Path(out).write_bytes(pickle.dumps({"crashes": crashes, "results": results}))


def _process(root: Path, env: dict, name: str, module: str, function: str
             ) -> tuple[int, Path, Path]:
    """(exit code, results pickle, log) of `module.function(conf, STEPS, out)` in a
    subprocess on `root`."""
    conf = _conf_file(root, root, "local[2]")
    out, log = root / f"{name}.pkl", root / f"{name}.log"
    code = f"import sys; from {module} import {function}; {function}(*sys.argv[1:])"
    with open(log, "w") as fh:
        rc = subprocess.run([sys.executable, "-c", code, str(conf), STEPS, str(out)], cwd=root,
                            env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=LIMIT_S,
                            check=False).returncode
    return rc, out, log


def test_a_kill_during_each_tables_first_write_then_reruns_succeed(tmp_path):
    root, markers = tmp_path / "killed", tmp_path / "markers"
    markers.mkdir()
    # 1. a real SIGKILL at the first table's first write
    rc, _, log = _process(root, _env(TRAJPRIV_FAULT_KILL_FIRST_WRITE=str(markers)), "killed",
                          "tests.reliability.test_collect_faults", "_session")
    killed = sorted(p.name for p in markers.iterdir())
    assert rc == -9 and killed == [TABLES[0]], (rc, killed, log.read_text()[-3000:])
    # 2. a new process on that root: a crash at each later table's first write, rerun in place
    rc, out, log = _process(root, _env(TRAJPRIV_FAULT_KILL_FIRST_WRITE=f"{markers}:raise"),
                            "reruns", "tests.reliability.test_first_write_kill", "_sweep")
    assert rc == 0, log.read_text()[-3000:]
    got = pickle.loads(out.read_bytes())
    assert got["results"] is not None, f"still failing after its reruns; crashed at {got}"
    # a marker per table whose first write died (an attempt's crash can also end in the run
    # record's first write, which the stage's `finally` makes: SIGKILL would skip it)
    killed = sorted(p.name for p in markers.iterdir())
    assert got["crashes"] and set(got["crashes"]) <= set(killed), (got["crashes"], killed)
    assert set(TABLES) <= set(killed), killed

    warehouse = root / "warehouse"
    for table in killed:  # each leftover moved aside beside its table, and said in one line
        db, name = table.split(".")
        assert list((warehouse / f"{db}.db").glob(f"{name}.orphan-*")), table
    text = "".join(p.read_text() for p in root.glob("*.log"))
    assert text.count("held files but no catalog entry") >= len(killed)

    # the release is whole and charged once: every published trajectory has exactly one
    # `spent` row, every `spent` row one published trajectory, and the release was evaluated
    snap = got["results"]["snapA"]
    published = _published(snap, "atp")
    spend = _spend(snap)
    assert len(published) > 0 and (spend == 1).all() and len(spend) == len(published)
    assert set(published["traj_key"]) == set(snap["ledger"].query("state == 'spent'")["traj_key"])
    assert "evaluated" in set(snap["ledger"]["state"])

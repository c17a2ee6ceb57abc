"""Collection faults (issue 10): a Python worker or the driver killed in the middle of `collect`.

* Worker killed: the release task's Python worker SIGKILLs itself after streaming a few users'
  rows back (test seam `TRAJPRIV_FAULT_KILL_WORKER` of udfs/faults.py, first attempt of
  one task only). Under master local[2,2] Spark retries the task; the retry redraws the same
  noise (seeded by the secret run key and the user), so the published rows must equal an
  undisturbed run's, with no duplicate, and number exactly the window's trajectories minus the
  plan's refusals.
* Driver killed: `trajpriv collect` runs as a subprocess in its own process group; when the
  perturbation stage has started (hook `TRAJPRIV_FAULT_RELEASE_REACHED`, which stalls that task)
  the whole group (driver, JVM, Python workers) gets SIGKILL, as a machine loss would. No
  trajpriv_pub table may change; the rerun (the same command again, as Airflow's retry starts
  it) must roll the killed release forward from its ledger rows (its spend was recorded before
  any noise), publish exactly what an undisturbed run publishes and leave the ledger with each
  release's spend once (tests/reliability/test_collect_crash_sweep.py covers every other
  write boundary in-process).

Every disturbed run is a subprocess with its own storage root (its own Derby metastore; the
test session's JVM cannot host a second one). The undisturbed reference runs in the test
session's shared Spark session (one JVM start fewer), its snapshot filtered to this file's
dataset. The reference and the disturbed runs share the run and pseudonym keys (environment),
so the same seed gives the same noise in both roots.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
DATASET = "fault_collect"
N_LOC = 30
RUN_KEY, PSEUDONYM_KEY = "ab" * 32, "cd" * 32
# Two settings of one collection, run one after the other. A costs 2 and B costs 1 against a
# budget of 5 per week: A releases 2 trajectories per user-week and B the one that still fits,
# so B's plan depends on the ledger: spend counted twice would change what B publishes.
FIRST = ["collect.mechanism=atp", "collect.epsilon=2.0"]
SECOND = ["collect.mechanism=exp", "collect.epsilon=1.0"]
LIMIT_S = 600  # per subprocess; a Spark start alone takes 15-30 s on a loaded 2-core machine
PUB_TABLES = ("perturbed_trajectories", "releases", "runs", "locations", "perturbed_points")


def _sets(root: Path, master: str) -> list[str]:
    return [f"storage.root={root}", f"dataset={DATASET}", f"spark.master={master}",
            "spark.conf.spark.sql.shuffle.partitions=2", "spark.conf.spark.driver.memory=1g",
            "privacy.budget=5", "privacy.window_days=7", "study.prq_km=[1.0]"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJPRIV_FAULT_")}
    env.update(PYTHONPATH=str(ROOT), TRAJPRIV_RUN_KEY=RUN_KEY,
               TRAJPRIV_PSEUDONYM_KEY=PSEUDONYM_KEY, **extra)
    return env


# ----------------------------------------------------------------------------- subprocess side
def _write_raw(spark) -> None:
    """12 users x 2 weeks of 0-3 trajectories a day over 30 locations (what ingest writes)."""
    import datetime as dt

    import numpy as np

    from jobs.spark.catalog import write_table

    rng = np.random.default_rng(5)
    locs = pd.DataFrame({"dataset": DATASET, "loc_id": np.arange(N_LOC, dtype=np.int32),
                         "lat": 31.2 + rng.random(N_LOC) * 0.08,
                         "lon": 121.4 + rng.random(N_LOC) * 0.08})
    rows = []
    for u in range(12):
        for day in range(14):
            date = dt.date(2014, 6, 2) + dt.timedelta(days=day)
            for k in range(int(rng.choice([0, 1, 2, 3]))):
                n = int(rng.integers(1, 7))
                ts = [dt.datetime.combine(date, dt.time(8 + k)) + dt.timedelta(minutes=5 * i)
                      for i in range(n)]
                rows.append((DATASET, f"user-{u:03d}", k, date,
                             rng.integers(0, N_LOC, n).astype(int).tolist(), ts, n))
    write_table(spark.createDataFrame(locs), "trajpriv_pub.locations", partition_by=["dataset"],
                replace={"dataset": DATASET})
    write_table(spark.createDataFrame(rows, "dataset string, user_id string, traj_id int, "
                                            "date date, loc_ids array<int>, "
                                            "ts array<timestamp>, n int"),
                "trajpriv_raw.trajectories", partition_by=["dataset", "date"],
                replace={"dataset": DATASET})


def _snapshot(spark) -> dict:
    """Every trajpriv_pub table (sorted rows, run-independent) and the raw ledger, this
    dataset's rows only (the in-process reference shares its catalog with other tests)."""
    from pyspark.sql import functions as F

    out = {"pub": {}}
    for name in PUB_TABLES:
        table = f"trajpriv_pub.{name}"
        if spark.catalog.tableExists(table):
            df = spark.table(table)
            if "dataset" in df.columns:  # `runs` has none (and is never compared to the reference)
                df = df.where(F.col("dataset") == DATASET)
            arrays = [f.name for f in df.schema.fields if f.dataType.typeName() == "array"]
            for col in arrays:  # sortable and comparable as text
                df = df.withColumn(col, F.to_json(F.col(col)))
            pdf = df.toPandas()
            out["pub"][name] = pdf.sort_values(list(pdf.columns)).reset_index(drop=True)
    if spark.catalog.tableExists("trajpriv_raw.privacy_ledger"):
        out["ledger"] = (spark.table("trajpriv_raw.privacy_ledger")
                         .where(F.col("dataset") == DATASET).toPandas())
    return out


def _session(conf: str, steps: str, out: str) -> None:
    """(subprocess) Run `steps` in one session: raw, A, B (collections), snap (a snapshot)."""
    from jobs.config import load_config
    from jobs.spark.session import get_spark

    spark = get_spark(load_config(conf))
    try:
        results = _run_steps(spark, conf, steps)
    finally:
        spark.stop()
    Path(out).write_bytes(pickle.dumps(results))


def _run_steps(spark, conf: str, steps: str) -> dict:
    """(subprocess) `steps` in `spark`: raw, A, B (collections), snap* (a snapshot)."""
    import argparse

    from jobs.collect import stage as C
    from jobs.config import load_config
    from jobs.harness import execute

    results: dict = {}
    for step in steps.split(","):
        if step == "raw":
            _write_raw(spark)
        elif step in ("A", "B"):
            cfg = load_config(conf, FIRST if step == "A" else SECOND)
            results[step] = execute("collect", C.run, cfg, argparse.Namespace(fresh=False),
                                    spark, f"collect-{step}")
        else:
            results[step] = _snapshot(spark)
    return results


# ----------------------------------------------------------------------------- test side
def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _conf_file(folder: Path, root: Path, master: str) -> Path:
    """`folder`/conf.yaml: this file's collection settings on data root `root`."""
    from jobs.config import load_config

    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "conf.yaml"
    conf.write_text(load_config(None, _sets(root, master)).to_yaml())
    return conf


def _start_session(root: Path, master: str, steps: str, env: dict | None = None):
    """Start `_session` in a subprocess; returns a function that waits for its results."""
    conf = _conf_file(root, root, master)
    out, log = root / f"{steps.replace(',', '_')}.pkl", root / f"{steps.replace(',', '_')}.log"
    code = ("import sys; from tests.reliability.test_collect_faults import _session; "
            "_session(*sys.argv[1:])")
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code, str(conf), steps, str(out)],
                                cwd=root, env=env or _env(), stdout=fh,
                                stderr=subprocess.STDOUT)

    def results() -> dict:
        try:
            rc = proc.wait(timeout=LIMIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert rc == 0, _tail(log)
        return pickle.loads(out.read_bytes())

    return results


def _run_session(root: Path, master: str, steps: str, env: dict | None = None) -> dict:
    return _start_session(root, master, steps, env)()


def _published(snap: dict, mechanism: str) -> pd.DataFrame:
    pub = snap["pub"]["perturbed_trajectories"]
    cols = ["mechanism", "epsilon", "pseudonym", "traj_key", "date", "loc_ids", "n"]
    mine = pub[pub["mechanism"] == mechanism][cols]
    return mine.sort_values(cols).reset_index(drop=True)


def _spend(snap: dict) -> pd.Series:
    led = snap["ledger"]
    led = led[led["state"] == "spent"]
    return led.groupby(["user_id", "date", "traj_id", "mechanism", "epsilon"]).size().sort_index()


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory, spark, spark_root) -> tuple[dict, tuple[Path, Path, dict]]:
    """Side by side: A with a Python worker SIGKILLed mid-release (a subprocess, master
    local[2,2]: a task may fail once); and the reference, undisturbed A then B, in the test
    session's own Spark session (the same keys, so the same noise: nothing in it is
    disturbed, so it needs no process of its own)."""
    root = tmp_path_factory.mktemp("collect_faults")
    marker = root / "worker_killed"
    killed = _start_session(root, "local[2,2]", "raw,A,snapA",
                            _env(TRAJPRIV_FAULT_KILL_WORKER=str(marker)))
    try:
        reference = _in_process_reference(spark, spark_root, tmp_path_factory.mktemp("calm"))
    finally:
        disturbed = killed()  # waited for (and killed past the limit) whatever the above did
    return reference, (root, marker, disturbed)


def _in_process_reference(spark, spark_root: Path, folder: Path) -> dict:
    """raw, A, B and a snapshot in the shared session, under the subprocesses' keys."""
    conf = _conf_file(folder, spark_root, "local[2]")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRAJPRIV_RUN_KEY", RUN_KEY)
        env.setenv("TRAJPRIV_PSEUDONYM_KEY", PSEUDONYM_KEY)
        return _run_steps(spark, str(conf), "raw,A,B,snapB")


@pytest.fixture(scope="module")
def reference(first_runs) -> dict:
    return first_runs[0]


@pytest.fixture(scope="module")
def worker_killed(first_runs) -> tuple[Path, Path, dict]:
    return first_runs[1]


def test_a_python_worker_killed_mid_release_is_retried_and_changes_nothing(reference,
                                                                           worker_killed):
    _, marker, got = worker_killed
    assert marker.exists()  # the hook fired: one Python worker died mid-task
    figures = got["A"]
    refused = sum(figures["refused"].values())
    assert refused > 0  # the budget binds, so the count below is a real check
    mine = _published(got["snapA"], "atp")
    assert len(mine) == figures["trajectories_in_window"] - refused
    assert not mine.duplicated(["traj_key"]).any()
    pd.testing.assert_frame_equal(mine, _published(reference["snapB"], "atp"))
    calm = reference["snapB"]["ledger"]
    pd.testing.assert_series_equal(_spend(got["snapA"]),
                                   _spend({"ledger": calm[calm["mechanism"] == "atp"]}))


def test_a_driver_killed_mid_release_publishes_nothing_and_the_rerun_spends_once(
        reference, worker_killed):
    root, _, before = worker_killed
    reached = root / "release_reached"
    log = root / "killed.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "collect", "--config", str(root / "conf.yaml"),
             *[a for s in SECOND for a in ("--set", s)], "--run-id", "collect-B"],
            cwd=root, env=_env(TRAJPRIV_FAULT_RELEASE_REACHED=str(reached)), stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + LIMIT_S
        while not reached.exists():
            assert proc.poll() is None, f"collect ended before its release: {_tail(log)}"
            assert time.monotonic() < deadline, "the release stage never started"
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        proc.wait(timeout=60)

    after = _run_session(root, "local[2]", "snapK,B,snapB")
    killed = after["snapK"]
    # Nothing half-written is visible: every published table is as it was before the kill.
    assert set(killed["pub"]) == set(before["snapA"]["pub"])
    for name, table in before["snapA"]["pub"].items():
        pd.testing.assert_frame_equal(killed["pub"][name], table, obj=name)
    # The killed run had written its ledger rows (spend is recorded before any noise) ...
    assert (killed["ledger"]["release_id"] == "collect-B.r0").any()
    # ... which the rerun keeps and completes: the same release, the same noise.
    assert after["B"]["recovered_releases"] == ["collect-B.r0"]
    assert after["B"]["trajectories_released"] == 0  # nothing new: everything is released
    final = after["snapB"]
    for mechanism in ("atp", "exp"):
        pd.testing.assert_frame_equal(_published(final, mechanism),
                                      _published(reference["snapB"], mechanism), obj=mechanism)
    pd.testing.assert_series_equal(_spend(final), _spend(reference["snapB"]))

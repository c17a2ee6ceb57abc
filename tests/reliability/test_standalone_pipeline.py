"""The whole pipeline on a Spark standalone cluster with the PostgreSQL metastore.

A master and two workers from pyspark's `bin/spark-class` (one core and 1 GiB each;
tests/reliability/standalone_support.py), a private PostgreSQL server as the Hive metastore
(tests/reliability/test_postgres_metastore.py), then:

1. `trajpriv run`: every stage of the embedded default made small, in one Spark session whose
   master is the cluster; training is PateGAIL in barrier mode (`train.local_mode=false`), its
   two ranks one barrier task on each worker's executor;
2. one stage (`report`) submitted as the README's cluster recipe and the DAG submit it:
   `spark-submit --py-files dist/trajpriv.zip jobs/submit.py report --run-id=... --set=...`
   from another folder, with a Python that cannot see the checkout (the zip alone carries the
   project to the driver and the executors) and no `--config`: the packaged config inside the
   zip is the default, and its data root is `$TRAJPRIV_HOME/data`, not the working directory.

What it checks: both exit 0; every stage's row in `trajpriv_pub.runs` is `ok`; the tables of
every zone hold rows (read with pyarrow from the warehouse) and are registered in PostgreSQL (the
metastore's own `TBLS`, views included); training ran in barrier mode on the executors (the
application's Spark event log: a barrier stage of two tasks that succeeded on two different
executors, each on its own worker; the train run's figures say two ranks); the submitted stage
ran on the cluster with the zip on its executors, in the root under `$TRAJPRIV_HOME`, and wrote
its report.html there (nothing under its working directory).

Nothing waits on a race: the session waits until both executors have registered
(`spark.scheduler.minRegisteredResourcesRatio=1` of `spark.cores.max=2`) before its first job,
so the barrier stage always finds its two slots; deadlines only guard against a hang. The
daemons are killed by process group and the PostgreSQL server stopped at the end, also on
failure. Skips, saying why, where Java or PostgreSQL (or its JDBC driver) is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from jobs.config import STAGES
from jobs.spark import metastore_pg
from tests.jobs.conftest import dist  # noqa: F401  (the fixture: `make dist`'s folder)
from tests.reliability.standalone_support import (
    ROOT,
    SPARK_HOME,
    python_without_checkout,
    standalone_cluster,
)
from tests.reliability.test_postgres_metastore import (
    _free_ports,
    _needs_postgres,
    _server_folder,
    start_on_a_free_port,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

RUN_LIMIT_S = 1800  # `trajpriv run`, all stages: a hang guard, not an expectation
SUBMIT_LIMIT_S = 600
RUN_ID = "trajpriv_pipeline-20260105-report"  # what the DAG passes to its report task
# The embedded default at a fraction of its size (as tests/airflow/test_dag_run.py's SMALL), a
# one-setting study, and learned training whose two ranks are barrier tasks on the executors.
SMALL = ["datagen.users=60", "datagen.days=7", "datagen.partitions=2",
         "study.mechanisms=[atp]", "study.epsilons=[4.0]", "study.prq_km=[1.0]",
         "study.synthesis_methods=[markov]", "study.synthesis_seeds=1",
         "train.method=pategail", "train.local_mode=false", "train.num_processes=2",
         "train.blocks=2", "train.rounds=2", "train.noise=2.0",
         "synthesize.n_days=60", "synthesize.partitions=2",
         "evaluate.lira_shadows=2", "evaluate.attack_bootstrap=50"]
# Tables each zone must hold rows in after the run (published views are checked in the
# metastore: they have no files).
TABLES = {
    "trajpriv_pub": ["locations", "perturbed_trajectories", "releases",
                     "synthetic_trajectories", "runs"],
    "trajpriv_raw": ["points", "trajectories", "slot_days", "slot_days_split",
                     "privacy_ledger"],
    "trajpriv_trusted": ["evaluation", "study_perturbed"],
}
VIEWS = ["perturbed_points", "synthetic_points"]


def _needs_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        pytest.skip("no Java here (JAVA_HOME unset and no `java` on PATH): Spark's daemons "
                    "cannot start")


def _spark_sets(url: str, events: Path, jit: str) -> list[str]:
    """The session's settings: the cluster as master; one 512 MiB, one-core executor per
    worker; no job before both executors registered; the event log to `events`, one plain
    file per application (`<app id>`, `.inprogress` while it runs)."""
    conf = {"spark.executor.memory": "512m", "spark.executor.cores": "1",
            "spark.cores.max": "2", "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "600s",
            "spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "2",
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}
    if jit:
        conf["spark.executor.extraJavaOptions"] = jit
    return [f"spark.master={url}", *(f"spark.conf.{k}={v}" for k, v in conf.items())]


def _events(events: Path, app_id: str) -> list[dict]:
    (log,) = [p for p in events.iterdir() if p.name.startswith(app_id)]
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _barrier_tasks(events: list[dict]) -> dict[int, list[str]]:
    """{barrier stage id: executor ids of its successful tasks} from one application's events."""
    barrier = {e["Stage Info"]["Stage ID"] for e in events
               if e["Event"] == "SparkListenerStageSubmitted"
               and any(rdd.get("Barrier") for rdd in e["Stage Info"]["RDD Info"])}
    ran: dict[int, list[str]] = {s: [] for s in barrier}
    for e in events:
        if (e["Event"] == "SparkListenerTaskEnd" and e["Stage ID"] in barrier
                and e["Task End Reason"]["Reason"] == "Success"):
            ran[e["Stage ID"]].append(e["Task Info"]["Executor ID"])
    return ran


def _metastore_tables(pg_url: str) -> set[str]:
    """`db.table` of every table and view registered in the PostgreSQL metastore."""
    port = re.search(r":(\d+)/", pg_url).group(1)
    out = subprocess.run([metastore_pg.binary("psql"), "-h", "127.0.0.1", "-p", port, "-U",
                          "postgres", "-d", metastore_pg.DATABASE, "-tAc",
                          'SELECT d."NAME" || \'.\' || t."TBL_NAME" FROM "TBLS" t '
                          'JOIN "DBS" d ON d."DB_ID" = t."DB_ID"'],
                         capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


def _runs(warehouse: Path) -> list[dict]:
    return pq.read_table(warehouse / "trajpriv_pub.db" / "runs").to_pylist()


def _tail(text: str, n: int = 6000) -> str:
    return text[-n:]


def test_the_whole_pipeline_on_a_standalone_cluster(dist: Path, tmp_path: Path):  # noqa: F811
    _needs_java()
    _needs_postgres()
    root = tmp_path / "data"
    warehouse = root / "warehouse"
    events = tmp_path / "events"
    events.mkdir()
    with _server_folder() as pg_folder, \
            standalone_cluster(tmp_path, workers=2) as (url, master_log, work, env):
        pg_url = start_on_a_free_port(pg_folder, _free_ports())
        jit = env["SPARK_DAEMON_JAVA_OPTS"]
        sets = [f"storage.root={root}", "catalog.metastore=postgres",
                f"catalog.postgres_url={pg_url}", *_spark_sets(url, events, jit), *SMALL]
        config = str(ROOT / "conf" / "default.yaml")

        # 1. every stage in one session on the cluster
        run = subprocess.run([sys.executable, "-m", "jobs.cli", "run", "--config", config,
                              *(f"--set={s}" for s in sets)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=RUN_LIMIT_S, check=False)
        executors = "\n".join(p.read_text(errors="replace")[-2000:]
                              for p in sorted(work.glob("*/*/stderr")))
        spark_log = root / "logs" / "spark.log"
        jvm = spark_log.read_text(errors="replace") if spark_log.exists() else ""
        assert run.returncode == 0, (
            f"trajpriv run exited {run.returncode}:\n{_tail(run.stdout)}\n{_tail(run.stderr)}"
            f"\nspark.log:\n{_tail(jvm)}\nexecutors:\n{executors}")
        apps = re.findall(r"Registered app \S+ with ID (app-\S+)",
                          master_log.read_text(errors="replace"))
        assert len(apps) == 1, apps
        run_app = apps[0]

        # 2. one stage as the DAG's task submits it: the zip, a Python without the checkout,
        # the packaged config (no --config, no storage.root): the root is $TRAJPRIV_HOME/data
        python = python_without_checkout(tmp_path)
        elsewhere = tmp_path / "elsewhere"  # not the checkout
        elsewhere.mkdir()
        probe = subprocess.run([str(python), "-c", "import jobs"], cwd=elsewhere, env=env,
                               capture_output=True, text=True, timeout=120, check=False)
        assert probe.returncode != 0 and "No module named 'jobs'" in probe.stderr, probe.stderr
        submit = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", url,
                  "--name", "trajpriv-report-20260105",
                  "--conf", "spark.driver.extraJavaOptions="
                            "-Dderby.storage.useDefaultFilePermissions=false",
                  "--py-files", str(dist / "trajpriv.zip"), str(ROOT / "jobs" / "submit.py"),
                  "report", f"--run-id={RUN_ID}",
                  *(f"--set={s}" for s in sets if not s.startswith("storage.root="))]
        submit_env = {**env, "PYSPARK_PYTHON": str(python), "TRAJPRIV_HOME": str(tmp_path),
                      "PYSPARK_DRIVER_PYTHON": str(python), "PYTHONSAFEPATH": "1"}
        job = subprocess.run(submit, cwd=elsewhere, env=submit_env, capture_output=True,
                             text=True, timeout=SUBMIT_LIMIT_S, check=False)
        assert job.returncode == 0, (f"spark-submit report exited {job.returncode}:\n"
                                     f"{_tail(job.stdout)}\n{_tail(job.stderr, 3000)}")
        apps = re.findall(r"Registered app \S+ with ID (app-\S+)",
                          master_log.read_text(errors="replace"))
        assert len(apps) == 2 and apps[0] == run_app, apps
        submit_app = apps[1]
        registered = _metastore_tables(pg_url)

    # every stage of the run ok, then the submitted report
    runs = sorted(_runs(warehouse), key=lambda r: r["started_at"])
    assert [(r["stage"], r["status"]) for r in runs] == [
        *((s, "ok") for s in STAGES), ("report", "ok")], runs
    assert runs[-1]["run_id"] == RUN_ID

    # the tables of every zone hold rows, and the PostgreSQL metastore lists them
    for db, names in TABLES.items():
        for name in names:
            assert pq.read_table(warehouse / f"{db}.db" / name).num_rows > 0, f"{db}.{name}"
    expected = {f"{db}.{n}" for db, names in TABLES.items() for n in names}
    expected |= {f"trajpriv_pub.{v}" for v in VIEWS}
    assert expected <= registered, sorted(expected - registered)
    synthetic = pq.read_table(warehouse / "trajpriv_pub.db" / "synthetic_trajectories")
    train = next(r for r in runs if r["stage"] == "train")
    assert set(synthetic.column("run_id").to_pylist()) == {train["run_id"]}

    # training: two ranks, barrier mode, one barrier task on each worker's executor
    figures = json.loads(train["figures"])
    assert figures["num_processes"] == 2 and figures["rounds_done"] == 2, figures
    assert yaml.safe_load(train["config"])["train"]["local_mode"] is False
    run_events = _events(events, run_app)
    added = {e["Executor ID"] for e in run_events if e["Event"] == "SparkListenerExecutorAdded"}
    barrier = _barrier_tasks(run_events)
    assert len(barrier) == 1, barrier  # TorchDistributor's one launch
    (ranks,) = barrier.values()
    assert len(ranks) == 2 and len(set(ranks)) == 2 and set(ranks) <= added, (ranks, added)
    workers = dict(re.findall(rf"Launching executor {run_app}/(\d+) on worker (\S+)",
                              master_log.read_text(errors="replace")))
    assert len({workers[r] for r in ranks}) == 2, workers  # one rank on each worker

    # the submitted stage: its executors fetched the zip; its report is on disk
    assert list(work.glob(f"{submit_app}/*/trajpriv.zip")), list(work.rglob("*"))
    report = root / "reports" / "synthetic" / RUN_ID / "report.html"
    assert report.is_file() and report.stat().st_size > 0, list(root.rglob("report.html"))
    assert not (elsewhere / "data").exists() and not (elsewhere / "metastore_db").exists()

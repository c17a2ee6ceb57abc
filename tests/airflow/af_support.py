"""Support of the Airflow tests: they drive `.venv-airflow` through subprocesses.

Why subprocesses: Airflow and the Spark provider must not be installed in `.venv` (the provider's
pyspark-client overwrites pyspark 4.3's files), so these tests run from `.venv`'s pytest and call
`.venv-airflow/bin/airflow` / `python`, exactly as an operator would. Each test session gets its
own AIRFLOW_HOME (sqlite) and its own trajpriv data root under pytest's tmp folder.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_VENV = ROOT / ".venv-airflow"
AIRFLOW_BIN = AIRFLOW_VENV / "bin" / "airflow"
AIRFLOW_PY = AIRFLOW_VENV / "bin" / "python"
DAG_ID = "trajpriv_pipeline"
# Pipeline stages in DAG order; each is `spark-submit jobs/submit.py <stage>`.
STAGES = ("datagen", "ingest", "collect", "study", "train", "synthesize", "evaluate", "report")
TASK_IDS = {
    "datagen": "collection.datagen",
    "ingest": "collection.ingest",
    "collect": "collection.collect",
    "study": "study",
    "train": "synthesis.train",
    "synthesize": "synthesis.synthesize",
    "evaluate": "evaluate",
    "report": "report",
}
SPARK_CONN = json.dumps({"conn_type": "spark", "host": "local[2]"})


@dataclass
class DagRunResult:
    returncode: int
    output: str
    state: str | None
    task_states: dict[str, str]
    tries: dict[str, int]  # task id -> number of attempts (retries included)
    seconds: dict[str, float]  # task id -> its run time (the metadata DB's duration)


class AirflowRunner:
    """Runs `airflow ...` commands in `.venv-airflow` against one AIRFLOW_HOME."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home = home
        self.env = env

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(AIRFLOW_BIN), *args],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )

    def dags_test(
        self,
        logical_date: str,
        params: dict,
        *,
        env: dict[str, str] | None = None,
        timeout: float = 1800,
        skip: tuple[str, ...] = (),
    ) -> DagRunResult:
        """`airflow dags test` once; the stages in `skip` are marked success, not run."""
        args = ["dags", "test", DAG_ID, logical_date, "--conf", json.dumps(params)]
        if skip:
            marked = (TASK_IDS[s].replace(".", r"\.") for s in skip)
            args += ["--mark-success-pattern", "|".join(marked)]
        proc = subprocess.run(
            [str(AIRFLOW_BIN), *args],
            cwd=ROOT,
            env=env or self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        state, tasks, tries, seconds = self.last_run_states()
        return DagRunResult(proc.returncode, proc.stdout, state, tasks, tries, seconds)

    def last_run_states(self) -> tuple[str | None, dict[str, str], dict[str, int],
                                       dict[str, float]]:
        """The newest DAG run's state, and its task instances' states, tries and seconds
        (metadata DB)."""
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT run_id, state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1",
                (DAG_ID,),
            ).fetchone()
            if row is None:
                return None, {}, {}, {}
            rows = db.execute(
                "SELECT task_id, state, try_number, duration FROM task_instance "
                "WHERE dag_id = ? AND run_id = ?",
                (DAG_ID, row[0]),
            ).fetchall()
        return (row[1], {t: s for t, s, _, _ in rows}, {t: n for t, _, n, _ in rows},
                {t: round(d or 0.0, 1) for t, _, _, d in rows})


def clean_env() -> dict[str, str]:
    drop = ("AIRFLOW", "PYSPARK", "SPARK_HOME", "TRAJPRIV_HOME", "TRAJPRIV_PYTHON", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


TABLE_COUNTS_SCRIPT = """
import json, sys
from jobs.config import load_config
from jobs.spark.catalog import catalogue_drift
from jobs.spark.session import get_spark, stop_spark

cfg = load_config(sys.argv[1], ["storage.root=" + sys.argv[2]])
spark = get_spark(cfg)
counts = {}
for db in ("trajpriv_raw", "trajpriv_trusted", "trajpriv_pub"):
    for table in spark.catalog.listTables(db):
        name = f"{db}.{table.name}"
        counts[name] = spark.table(name).count()
ledger = None
if "trajpriv_raw.privacy_ledger" in counts:
    row = spark.sql(
        "SELECT count(*) AS n, coalesce(sum(epsilon), 0) AS eps FROM trajpriv_raw.privacy_ledger"
    ).first()
    ledger = [row["n"], float(row["eps"])]
    releases = [
        [r["release_id"], r["dates"], r["n"]]
        for r in spark.sql(
            "SELECT release_id, sort_array(collect_set(cast(date AS string))) AS dates, "
            "count(*) AS n FROM trajpriv_raw.privacy_ledger "
            "WHERE stage = 'collect' AND state = 'spent' GROUP BY release_id ORDER BY release_id"
        ).collect()
    ]
    counts["__releases__"] = releases
    counts["__spent_twice__"] = spark.sql(
        "SELECT count(*) AS n FROM (SELECT traj_key FROM trajpriv_raw.privacy_ledger "
        "WHERE stage = 'collect' AND state = 'spent' GROUP BY traj_key HAVING count(*) > 1)"
    ).first()["n"]
# the train runs (config, figures) and which train runs the published synthetic days came from
counts["__train_runs__"] = [
    [r["run_id"], r["status"], r["config"], r["figures"]]
    for r in spark.sql("SELECT run_id, status, config, figures FROM trajpriv_pub.runs "
                       "WHERE stage = 'train' ORDER BY started_at").collect()
]
counts["__synthetic_from__"] = [
    [r["run_id"], r["model"]]
    for r in spark.sql("SELECT DISTINCT run_id, model FROM trajpriv_pub.synthetic_trajectories")
    .collect()
]
counts["__drift__"] = catalogue_drift(spark)  # tables and views against jobs/spark/tables.py
print("TABLE_COUNTS " + json.dumps({"counts": counts, "ledger": ledger}))
stop_spark(spark)
"""


def table_counts(storage_root: Path) -> tuple[dict[str, int], list[float] | None]:
    """Row count of every table and view of both databases, and (rows, epsilon) of the ledger.

    Runs in its own `.venv` process: the embedded Derby metastore admits one Spark process at a
    time, and the test session's shared SparkSession points at another data root.
    """
    env = clean_env()
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run(
        [sys.executable, "-c", TABLE_COUNTS_SCRIPT, "conf/default.yaml", str(storage_root)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"counting tables failed:\n{proc.stderr[-4000:]}"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("TABLE_COUNTS "))
    result = json.loads(line.removeprefix("TABLE_COUNTS "))
    return result["counts"], result["ledger"]

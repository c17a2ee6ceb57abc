"""The trajpriv pipeline as a daily Airflow DAG; a stage is `spark-submit jobs/submit.py <stage>`.

    collection.choose_source -> [collection.datagen ->] collection.ingest -> collection.collect
      -> study -> synthesis.train -> synthesis.synthesize -> evaluate -> report

datagen lands the embedded synthetic records that ingest then reads (`source=datagen`, the
default); with `source=ingest` the branch skips datagen and ingest reads the config's real source.
`study` is the trusted-zone sweep (`trajpriv study`: the LDP mechanisms and the synthesis
methods at the configured epsilons; nothing released or charged) whose tables the report shows.
It runs after the day's collection, so a failing sweep never holds up a release; `trajpriv run`
runs it before collect (jobs.config.STAGES) since there it also chooses the release's setting.

Rules this file keeps (docs/architecture.md sections 1, 8, 10):
- It imports nothing from the project and does no work at import time: it only builds operators.
  The stages run in their own Spark driver through spark-submit, with the project's interpreter.
- Stage arguments are templated from the DAG params and the run's data interval. The run id is
  `trajpriv_pipeline-<logical date>-<stage>`: one per stage (a stage's evaluation rows and run
  folder are its own: with one id for all, evaluate's rows replaced the study's) and the same on
  a rerun of the date. Collection covers the data interval only (`collect.window_start` =
  data_interval_start, `collect.window_end` = the day before data_interval_end), so each
  logical date releases only its own new trajectories, and a rerun of a date (a retry, a
  cleared task, a second `airflow dags test`) finds them released already and spends nothing.
  The schedule is a data-interval timetable (daily, UTC): Airflow 3's default for a cron
  string has zero-length intervals. Param `collect_interval: all` collects every trajectory
  not yet released instead (a backfill of old data).
- Tasks run one after another and one DAG run at a time: the embedded Derby metastore admits a
  single Spark process (training does not need the collection's output; with a shared metastore
  the two sides could run side by side).

Deployment knobs (README, "Run it on a schedule"):
- Connection `trajpriv_spark`, from the environment variable AIRFLOW_CONN_TRAJPRIV_SPARK, e.g.
  '{"conn_type": "spark", "host": "local[2]"}' or 'spark://spark-master:7077'. It says where
  spark-submit sends the application; `spark-submit` must be on the worker's PATH.
- The Spark session's master comes from the trajpriv config (`spark.master`, local[2] in the
  embedded default) or the `spark_master` param when given: keep it equal to the connection's.
- Where the project lives on the worker, read when a task runs (never when the DAG file is
  parsed): the `project_dir` param, else the Airflow Variable `trajpriv_project_dir`, else the
  worker's TRAJPRIV_HOME; the interpreter: the `python` param, else the Variable
  `trajpriv_python`, else the worker's TRAJPRIV_PYTHON, else <project_dir>/.venv/bin/python.
- Assets: each stage declares the published tables it writes (`trajpriv://<database>/<table>`)
  as outlets, so a downstream DAG can schedule on e.g. `TABLE_ASSETS["trajpriv_pub.releases"]`'s
  URI.
- Failures: every task's `on_failure_callback` logs one line, then calls the callable named by
  the Airflow Variable `trajpriv_on_failure` (a dotted path `package.module.function`, given the
  task context) when it is set: the hook point for paging or chat alerts.
"""

from __future__ import annotations

import datetime as dt
import importlib
import logging
import os
import re
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.python import BranchPythonOperator
from airflow.sdk import DAG, Asset, BaseHook, Param, TaskGroup, TriggerRule, Variable, chain
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.timetables.interval import CronDataIntervalTimetable

DAG_ID = "trajpriv_pipeline"
SPARK_CONN_ID = "trajpriv_spark"
# Copies of project facts (this file imports nothing from the project), each compared with its
# home by tests/test_dag_copies.py: EXIT_USER_ERROR (jobs.harness), STAGE_TABLES (the stages'
# writes of jobs/spark/tables.py), the `mechanism` param's enum (udfs.collect's published
# mechanisms) and the stages the DAG runs (jobs.config.STAGES).
# The harness exits 2 for a user error (bad config, budget exceeded, missing input): retrying it
# cannot help, so the task fails at once. Other failures (exit 1, a lost executor) are retried.
EXIT_USER_ERROR = 2

# SparkSubmitHook.submit's documented failure: AirflowException("Cannot execute: ... Error code
# is: N. ..."): the exit status of spark-submit, i.e. of the driver in client mode.
_EXIT_CODE = re.compile(r"Error code is: (\d+)")

# The published tables each stage writes (jobs/spark/tables.py), as Assets other DAGs schedule on.
STAGE_TABLES = {
    "datagen": ["trajpriv_pub.locations"],
    "ingest": ["trajpriv_pub.locations"],  # a real source's locations (datagen's otherwise)
    "collect": [
        "trajpriv_pub.perturbed_trajectories",
        "trajpriv_pub.perturbed_points",
        "trajpriv_pub.releases",
    ],
    "synthesize": ["trajpriv_pub.synthetic_trajectories", "trajpriv_pub.synthetic_points"],
}
TABLE_ASSETS = {
    table: Asset(name=table, uri="trajpriv://" + table.replace(".", "/"), group="trajpriv")
    for tables in STAGE_TABLES.values()
    for table in tables
}

log = logging.getLogger(__name__)


def _setting(params: dict[str, Any], param: str, variable: str, env: str) -> str | None:
    """A deployment setting at run time: the param, else the Airflow Variable, else the worker's
    environment variable (never the DAG processor's, and never at parse time)."""
    return params.get(param) or Variable.get(variable, default=None) or os.environ.get(env)


def _project_dir(params: dict[str, Any]) -> str:
    value = _setting(params, "project_dir", "trajpriv_project_dir", "TRAJPRIV_HOME")
    if not value:
        raise AirflowFailException(
            "where is the project on this worker? set the param project_dir, the Airflow "
            "Variable trajpriv_project_dir (AIRFLOW_VAR_TRAJPRIV_PROJECT_DIR) or TRAJPRIV_HOME"
        )
    return value


def _python(params: dict[str, Any]) -> str:
    value = _setting(params, "python", "trajpriv_python", "TRAJPRIV_PYTHON")
    return value or os.path.join(_project_dir(params), ".venv", "bin", "python")


def _on_failure(context: dict[str, Any]) -> None:
    """One log line per failed task, then the callable the Variable `trajpriv_on_failure` names."""
    ti = context.get("ti") or context.get("task_instance")
    log.error("trajpriv task failed: %s (run %s): %s", getattr(ti, "task_id", "?"),
              context.get("run_id"), context.get("exception"))
    target = Variable.get("trajpriv_on_failure", default=None)
    if target:
        module, _, name = target.rpartition(".")
        getattr(importlib.import_module(module), name)(context)


class StageSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for one trajpriv stage.

    Three additions to the stock operator:
    - a templated argument may render to several arguments, one per line, or to none (an empty
      line), so an unset optional param adds no `--set` at all and the config file decides;
    - a missing Spark connection fails with the environment variable to set (the stock hook
      would silently fall back to `--master yarn`);
    - a user error of the job (exit code 2) fails the task without retries.
    """

    def __init__(self, *, conn_id: str, **kwargs: Any) -> None:
        super().__init__(conn_id=conn_id, **kwargs)
        self.spark_conn_id = conn_id  # ours: the provider keeps its copy private

    def execute(self, context: Any) -> None:
        self.application_args = [
            line
            for arg in self.application_args or []
            for line in str(arg).splitlines()
            if line.strip()
        ]
        try:
            BaseHook.get_connection(self.spark_conn_id)
        except AirflowException as exc:
            raise AirflowFailException(
                f"Spark connection {self.spark_conn_id!r} is not defined: set the environment "
                f"variable AIRFLOW_CONN_{self.spark_conn_id.upper()}, e.g. "
                '\'{"conn_type": "spark", "host": "local[2]"}\''
            ) from exc
        try:
            super().execute(context)
        except AirflowException as exc:
            code = _EXIT_CODE.search(str(exc))
            if code is not None and int(code.group(1)) == EXIT_USER_ERROR:
                raise AirflowFailException(str(exc)) from exc
            raise


def _choose_source(params: dict[str, Any], **_: Any) -> list[str]:
    """Branch: generate the embedded synthetic records and ingest them, or ingest a real source."""
    if params["source"] == "datagen":
        return ["collection.datagen", "collection.ingest"]
    return ["collection.ingest"]


def _project_path(project_dir: str, path: str) -> str:
    """`path` as given when absolute, else relative to the project directory."""
    return path if os.path.isabs(path) else os.path.join(project_dir, path)


def _override(param: str, key: str) -> str:
    """Template of `--set=<key>=<param as YAML>`, rendering empty while the param is null."""
    return (
        f"{{% if params.{param} is not none %}}"
        f"--set={key}={{{{ params.{param} | tojson }}}}{{% endif %}}"
    )


# Arguments every stage gets after its name, config and run id (its config is one whole,
# validated by each stage at start). Optional params render to an empty argument, which
# StageSubmitOperator drops.
CONFIG_ARG = "--config={{ project_path(project_dir(params), params.config) }}"
STAGE_ARGS = [
    # The data interval as the collection window (quoted: YAML would read a bare date).
    "{% if params.collect_interval == 'data_interval' %}"
    "--set=collect.window_start={{ data_interval_start | ds | tojson }}\n"
    "--set=collect.window_end={{ (data_interval_end - macros.timedelta(days=1)) | ds | tojson }}"
    "{% endif %}",
    _override("dataset", "dataset"),
    _override("storage_root", "storage.root"),
    _override("spark_master", "spark.master"),
    _override("epsilon", "collect.epsilon"),
    _override("mechanism", "collect.mechanism"),
    _override("noise", "train.noise"),
    _override("target_epsilon", "train.target_epsilon"),
    "{% for item in params.overrides %}--set={{ item }}\n{% endfor %}",
]

PARAMS = {
    "config": Param(
        "conf/default.yaml",
        type="string",
        minLength=1,
        description="trajpriv YAML config, absolute or relative to project_dir",
    ),
    "source": Param(
        "datagen",
        enum=["datagen", "ingest"],
        description="datagen: generate the embedded synthetic slice, then ingest it; "
        "ingest: ingest the config's real source only",
    ),
    "dataset": Param(
        None,
        type=["null", "string"],
        description="dataset name (rows every stage reads and writes); null: the config's",
    ),
    "epsilon": Param(
        None,
        type=["null", "number"],
        description="LDP epsilon per released trajectory; null: the config's collect.epsilon",
    ),
    "mechanism": Param(
        None,
        type=["null", "string"],
        enum=[None, "tp", "atp", "exp", "ngram", "tracs_d", "tracs_c"],
        description="the published collection mechanism; null: the config's",
    ),
    "collect_interval": Param(
        "data_interval",
        enum=["data_interval", "all"],
        description="data_interval: collect the trajectories dated in the run's data interval; "
        "all: every trajectory not yet released (each is still released once)",
    ),
    "noise": Param(
        None,
        type=["null", "number"],
        description="PateGAIL Laplace noise scale lambda; null: the config's",
    ),
    "target_epsilon": Param(
        None,
        type=["null", "number"],
        description="training stops before this epsilon would be exceeded; null: the config's",
    ),
    "spark_master": Param(
        None,
        type=["null", "string"],
        description="Spark master of the stage sessions (keep equal to the connection's); "
        "null: the config's spark.master",
    ),
    "storage_root": Param(
        None,
        type=["null", "string"],
        description="data root (warehouse, metastore, reports); null: the config's",
    ),
    "overrides": Param(
        [],
        type="array",
        items={"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*=[^\n]*$"},
        description="further config overrides, key.path=value (YAML value), for every stage",
    ),
    "project_dir": Param(
        None,
        type=["null", "string"],
        description="the trajpriv checkout or release the worker sees (jobs/, conf/); null: the "
        "Variable trajpriv_project_dir, else the worker's TRAJPRIV_HOME",
    ),
    "python": Param(
        None,
        type=["null", "string"],
        description="interpreter with pyspark and the project, for the driver and the executors; "
        "null: the Variable trajpriv_python, else the worker's TRAJPRIV_PYTHON, else "
        "<project_dir>/.venv/bin/python",
    ),
    "py_files": Param(
        "",
        type="string",
        description="the project for the executors (make dist: dist/trajpriv.zip, the wheel); "
        "empty when they import it already (local mode)",
    ),
}

DEFAULT_ARGS = {
    "owner": "trajpriv",
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,  # 30 s, 60 s, ... capped at 10 min
    "max_retry_delay": dt.timedelta(minutes=10),
    "execution_timeout": dt.timedelta(hours=6),
    "on_failure_callback": _on_failure,
}


def _stage(stage: str, **kwargs: Any) -> StageSubmitOperator:
    return StageSubmitOperator(
        task_id=stage,
        conn_id=SPARK_CONN_ID,
        application="{{ project_dir(params) }}/jobs/submit.py",
        application_args=[stage, CONFIG_ARG, f"--run-id={DAG_ID}-{{{{ ds_nodash }}}}-{stage}",
                          *STAGE_ARGS],
        py_files="{{ params.py_files }}",
        # The driver JVM is spark-submit's here: make Derby's metastore files private to the
        # owner from the start (the stages also tighten the data root at start and stop).
        conf={"spark.driver.extraJavaOptions": "-Dderby.storage.useDefaultFilePermissions=false"},
        name=f"trajpriv-{stage}-{{{{ ds_nodash }}}}",
        outlets=[TABLE_ASSETS[t] for t in STAGE_TABLES.get(stage, [])],
        env_vars={
            "PYSPARK_PYTHON": "{{ python(params) }}",
            "PYSPARK_DRIVER_PYTHON": "{{ python(params) }}",
            # Keep jobs/ off sys.path of the driver script so no module there can shadow a
            # standard-library one (Python 3.11+: PYTHONSAFEPATH).
            "PYTHONSAFEPATH": "1",
        },
        **kwargs,
    )


with DAG(
    dag_id=DAG_ID,
    description="LDP trajectory collection and PateGAIL++ synthesis, evaluated and reported",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    max_active_tasks=1,
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    user_defined_macros={"project_path": _project_path, "project_dir": _project_dir,
                         "python": _python},
    dagrun_timeout=dt.timedelta(hours=24),
    tags=["trajpriv", "spark", "privacy"],
    doc_md=__doc__,
) as dag:
    with TaskGroup("collection", tooltip="raw records in, perturbed out") as collection:
        choose_source = BranchPythonOperator(
            task_id="choose_source", python_callable=_choose_source
        )
        datagen = _stage("datagen")
        # Runs after datagen, or right after the branch when datagen is skipped.
        ingest = _stage("ingest", trigger_rule=TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS)
        chain(choose_source, datagen, ingest, _stage("collect"))
        choose_source >> ingest

    with TaskGroup("synthesis", tooltip="PateGAIL++ training, synthetic days") as synthesis:
        chain(_stage("train"), _stage("synthesize"))

    chain(collection, _stage("study"), synthesis, _stage("evaluate"), _stage("report"))

"""The DAG file parses in `.venv-airflow` alone, has the agreed shape, and its params validate."""

from __future__ import annotations

import json
import subprocess

import pytest
from af_support import AIRFLOW_PY, ROOT, clean_env

pytestmark = [pytest.mark.airflow]

# Runs inside .venv-airflow; prints one JSON line describing the DAG as Airflow loaded it.
INSPECT_SCRIPT = r"""
import copy, json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags.get("trajpriv_pipeline")
out = {
    "import_errors": {k: str(v) for k, v in bag.import_errors.items()},
    "warnings": {k: list(v) for k, v in bag.captured_warnings.items()},
    "project_modules": sorted(
        m for m in sys.modules if m.split(".")[0] in ("jobs", "udfs", "models")
    ),
}
if dag is not None:
    out["schedule"] = str(dag.schedule)
    out["catchup"] = dag.catchup
    out["max_active_runs"] = dag.max_active_runs
    out["max_active_tasks"] = dag.max_active_tasks
    out["tasks"] = {
        t.task_id: {
            "downstream": sorted(t.downstream_task_ids),
            "type": type(t).__name__,
            "mro": [c.__name__ for c in type(t).__mro__],
            "group": t.task_group.group_id if t.task_group else None,
            "retries": t.retries,
            "backoff": t.retry_exponential_backoff,
            "retry_delay_s": t.retry_delay.total_seconds(),
            "max_retry_delay_s": t.max_retry_delay.total_seconds() if t.max_retry_delay else None,
            "trigger_rule": getattr(t.trigger_rule, "value", t.trigger_rule),
            "conn_id": getattr(t, "spark_conn_id", None),
            "outlets": [[a.name, a.uri] for a in t.outlets],
            "on_failure": [f"{c.__module__}.{c.__name__}" for c in
                           (t.on_failure_callback if isinstance(t.on_failure_callback, list)
                            else [t.on_failure_callback] if t.on_failure_callback else [])],
            "application": getattr(t, "application", None),
            "stage_arg": (getattr(t, "application_args", None) or [None])[0],
        }
        for t in dag.tasks
    }
    out["defaults"] = dag.params.validate()
    def check(values):
        result = {}
        for key, value in values.items():
            params = copy.deepcopy(dag.params)
            try:
                params[key] = value
                params.validate()
                result[key] = None
            except Exception as exc:
                result[key] = type(exc).__name__
        return result
    out["rejected"] = check(json.loads(sys.argv[2]))
    out["accepted"] = check(json.loads(sys.argv[3]))

    env = dag.get_template_env()
    task = dag.get_task("collection.collect")
    def render(params):
        merged = {**dag.params.validate(), "project_dir": sys.argv[4], **params}
        import datetime as dt
        from airflow.sdk.execution_time import macros
        start = dt.datetime(2026, 1, 5, tzinfo=dt.timezone.utc)
        context = {"params": merged, "ds": "2026-01-05", "ds_nodash": "20260105",
                   "data_interval_start": start,
                   "data_interval_end": start + dt.timedelta(days=1), "macros": macros}
        return {
            "args": [env.from_string(a).render(**context) for a in task.application_args],
            "application": env.from_string(task.application).render(**context),
            "env": {k: env.from_string(v).render(**context) for k, v in task.env_vars.items()},
        }
    out["render_default"] = render({})
    out["render_set"] = render(json.loads(sys.argv[3]))
print("DAG_INFO " + json.dumps(out, default=str))
"""

BAD_PARAMS = {
    "source": "s3",
    "epsilon": "four",
    "mechanism": "laplace",
    "collect_interval": "yesterday",
    "noise": "high",
    "overrides": ["no equals sign"],
    "config": "",
}
SET_PARAMS = {
    "dataset": "geolife",
    "epsilon": 4.5,
    "mechanism": "tp",
    "noise": 0.01,
    "target_epsilon": 8,
    "storage_root": "/srv/trajpriv data",
    "spark_master": "spark://master:7077",
    "overrides": ["train.rounds=3", "evaluate.mode=paper"],
    "config": "/etc/trajpriv/prod.yaml",
}


@pytest.fixture(scope="module")
def dag_info(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if not AIRFLOW_PY.exists():
        pytest.skip("`.venv-airflow` is missing: run `make airflow-venv` (`make test` builds it)")
    env = clean_env()
    env["AIRFLOW_HOME"] = str(tmp_path_factory.mktemp("airflow_parse_home"))
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    # The processor's environment must not decide the workers' settings: a decoy here.
    env["TRAJPRIV_HOME"] = "/processor/only"
    proc = subprocess.run(
        [
            str(AIRFLOW_PY),
            "-c",
            INSPECT_SCRIPT,
            str(ROOT / "airflow_dags"),
            json.dumps(BAD_PARAMS),
            json.dumps(SET_PARAMS),
            str(ROOT),
        ],
        cwd=tmp_path_factory.mktemp("elsewhere"),  # not the repo: nothing project-side on the path
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("DAG_INFO "))
    return json.loads(line.removeprefix("DAG_INFO "))


def test_dag_imports_without_errors_or_warnings(dag_info):
    assert dag_info["import_errors"] == {}
    assert dag_info["warnings"] == {}
    assert "tasks" in dag_info, "DagBag has no trajpriv_pipeline"


def test_dag_file_imports_nothing_from_the_project(dag_info):
    assert dag_info["project_modules"] == []
    source = (ROOT / "airflow_dags" / "trajpriv_pipeline.py").read_text(encoding="utf-8")
    for package in ("jobs", "udfs", "models"):
        assert f"import {package}" not in source and f"from {package}" not in source


def test_tasks_order_and_groups(dag_info):
    tasks = dag_info["tasks"]
    down = {task: info["downstream"] for task, info in tasks.items()}
    assert down == {
        "collection.choose_source": ["collection.datagen", "collection.ingest"],
        "collection.datagen": ["collection.ingest"],
        "collection.ingest": ["collection.collect"],
        "collection.collect": ["study"],
        "study": ["synthesis.train"],
        "synthesis.train": ["synthesis.synthesize"],
        "synthesis.synthesize": ["evaluate"],
        "evaluate": ["report"],
        "report": [],
    }
    assert tasks["collection.collect"]["group"] == "collection"
    assert tasks["synthesis.train"]["group"] == "synthesis"
    # ingest runs after datagen, or straight after the branch when datagen is skipped
    assert tasks["collection.ingest"]["trigger_rule"] == "none_failed_min_one_success"


def test_every_stage_is_a_spark_submit_of_its_module(dag_info):
    stages = {
        "collection.datagen": "datagen",
        "collection.ingest": "ingest",
        "collection.collect": "collect",
        "study": "study",
        "synthesis.train": "train",
        "synthesis.synthesize": "synthesize",
        "evaluate": "evaluate",
        "report": "report",
    }
    for task_id, stage in stages.items():
        info = dag_info["tasks"][task_id]
        assert "SparkSubmitOperator" in info["mro"], task_id
        assert info["conn_id"] == "trajpriv_spark"
        assert info["application"] == "{{ project_dir(params) }}/jobs/submit.py"
        assert info["stage_arg"] == stage  # the first application argument names the stage
        # retries with exponential back-off: 30 s, 60 s, ... capped at 10 minutes
        assert info["retries"] == 2
        assert info["backoff"] == 2.0
        assert info["retry_delay_s"] == 30
        assert info["max_retry_delay_s"] == 600
    assert dag_info["tasks"]["collection.choose_source"]["type"] == "BranchPythonOperator"


def test_schedule_and_concurrency(dag_info):
    # a data-interval timetable: each run covers one day [D, D+1) and collects only that day
    schedule = dag_info["schedule"]
    assert "CronDataIntervalTimetable" in schedule or schedule == "0 0 * * *", schedule
    assert dag_info["catchup"] is False
    # the embedded Derby metastore admits one Spark process at a time
    assert dag_info["max_active_runs"] == 1
    assert dag_info["max_active_tasks"] == 1


def test_default_params_validate(dag_info):
    defaults = dag_info["defaults"]
    assert defaults["config"] == "conf/default.yaml"
    assert defaults["source"] == "datagen"
    # read when a task runs (param, Variable, worker env), never frozen at parse time
    assert defaults["project_dir"] is None and defaults["python"] is None
    for key in ("dataset", "epsilon", "mechanism", "noise", "target_epsilon", "spark_master"):
        assert defaults[key] is None, key  # unset: the config file decides


def test_params_of_the_wrong_type_are_rejected(dag_info):
    assert dag_info["rejected"] == {key: "ParamValidationError" for key in BAD_PARAMS}
    assert dag_info["accepted"] == {key: None for key in SET_PARAMS}


def test_unset_params_add_no_overrides(dag_info):
    rendered = dag_info["render_default"]
    args = [a for a in rendered["args"] if a.strip()]
    assert args == [
        "collect",
        f"--config={ROOT}/conf/default.yaml",
        "--run-id=trajpriv_pipeline-20260105-collect",
        '--set=collect.window_start="2026-01-05"\n--set=collect.window_end="2026-01-05"',
    ]
    assert rendered["application"] == f"{ROOT}/jobs/submit.py"
    assert rendered["env"] == {
        "PYSPARK_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
        "PYSPARK_DRIVER_PYTHON": str(ROOT / ".venv" / "bin" / "python"),
        "PYTHONSAFEPATH": "1",
    }


def test_set_params_become_yaml_overrides(dag_info):
    # The operator splits every rendered argument on newlines and drops empty ones.
    args = [line for a in dag_info["render_set"]["args"] for line in a.splitlines() if line.strip()]
    assert args == [
        "collect",  # the stage, first: `spark-submit jobs/submit.py collect ...`
        "--config=/etc/trajpriv/prod.yaml",
        "--run-id=trajpriv_pipeline-20260105-collect",
        '--set=collect.window_start="2026-01-05"',
        '--set=collect.window_end="2026-01-05"',
        '--set=dataset="geolife"',
        '--set=storage.root="/srv/trajpriv data"',
        '--set=spark.master="spark://master:7077"',
        "--set=collect.epsilon=4.5",
        '--set=collect.mechanism="tp"',
        "--set=train.noise=0.01",
        "--set=train.target_epsilon=8",
        "--set=train.rounds=3",
        "--set=evaluate.mode=paper",
    ]


# --- the DAG by the book (issue 20) -----------------------------------------------------------

DAG_FILE = ROOT / "airflow_dags" / "trajpriv_pipeline.py"


def test_only_the_providers_public_api():
    """No `obj._private` attribute anywhere in the DAG file (dunders such as __init__ are fine)."""
    import ast

    tree = ast.parse(DAG_FILE.read_text(encoding="utf-8"))
    private = sorted({n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and n.attr.startswith("_") and not n.attr.startswith("__")})
    assert private == []


def test_defaults_are_not_read_from_the_environment_at_parse_time(dag_info):
    import ast

    tree = ast.parse(DAG_FILE.read_text(encoding="utf-8"))
    top_level = [n for n in tree.body if not isinstance(n, ast.FunctionDef | ast.ClassDef)]
    env_reads = [ast.unparse(n) for stmt in top_level for n in ast.walk(stmt)
                 if isinstance(n, ast.Attribute) and n.attr in ("environ", "getenv")]
    assert env_reads == []
    assert "/processor/only" not in json.dumps(dag_info["defaults"])


def test_published_tables_are_assets_of_the_stages_that_write_them(dag_info):
    outlets = {t: info["outlets"] for t, info in dag_info["tasks"].items() if info["outlets"]}
    assert outlets == {
        "collection.datagen": [["trajpriv_pub.locations", "trajpriv://trajpriv_pub/locations"]],
        "collection.ingest": [["trajpriv_pub.locations", "trajpriv://trajpriv_pub/locations"]],
        "collection.collect": [
            [f"trajpriv_pub.{t}", f"trajpriv://trajpriv_pub/{t}"]
            for t in ("perturbed_trajectories", "perturbed_points", "releases")
        ],
        "synthesis.synthesize": [
            [f"trajpriv_pub.{t}", f"trajpriv://trajpriv_pub/{t}"]
            for t in ("synthetic_trajectories", "synthetic_points")
        ],
    }


def test_every_task_has_the_failure_hook(dag_info):
    for task_id, info in dag_info["tasks"].items():
        assert [c.rsplit(".", 1)[1] for c in info["on_failure"]] == ["_on_failure"], task_id
        assert info["on_failure"][0].endswith("trajpriv_pipeline._on_failure"), task_id

"""`airflow dags test trajpriv_pipeline` end to end on the embedded default, through spark-submit.

Each test runs whole DAG runs (one JVM start per stage), so they are marked `slow`; they stay in
`make test`. Every run gets its own data root and logical date; the Airflow metadata DB is shared
by the tests of this file (one worker under `--dist loadfile`: one `airflow db migrate`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from af_support import TASK_IDS, table_counts

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

# What each stage leaves behind: tables with at least one row (views included).
STAGE_TABLES = {
    "datagen": ["trajpriv_pub.locations"],
    "ingest": ["trajpriv_raw.points", "trajpriv_raw.trajectories", "trajpriv_raw.slot_days"],
    "collect": [
        "trajpriv_pub.perturbed_trajectories",
        "trajpriv_pub.perturbed_points",
        "trajpriv_pub.releases",
        "trajpriv_raw.privacy_ledger",
        "trajpriv_trusted.evaluation",
    ],
    "synthesize": ["trajpriv_pub.synthetic_trajectories"],
    "evaluate": ["trajpriv_trusted.evaluation"],
    "report": [],
}
# The embedded default at a fraction of its size, for the DAG runs.
# The study sweeps one setting: its mechanism x epsilon grid is the in-process study tests'
# (tests/jobs/test_evaluate_stage.py, test_study_synthesis.py); here it only has to run
# through spark-submit and feed the report.
SMALL = ["datagen.users=60", "datagen.days=7", "train.rounds=2", "train.noise=2.0",
         "synthesize.n_days=60", "study.mechanisms=[atp]", "study.epsilons=[4.0]",
         "study.prq_km=[1.0]", "evaluate.lira_shadows=2", "evaluate.attack_bootstrap=50"]
# Not the collection (the later dates of the multi-date run): marked success, not run.
NOT_COLLECTION = ("study", "train", "synthesize", "evaluate", "report")


def _expect_all_tasks_succeeded(result) -> None:
    print("task seconds:", result.seconds)  # shown with a failure, or with -rP
    failed = {t: s for t, s in result.task_states.items() if s != "success"}
    assert result.returncode == 0 and result.state == "success" and not failed, (
        f"DAG run {result.state}, tasks not successful: {failed}\n{result.output[-6000:]}"
    )


def _private_modes(root: Path) -> list[str]:
    """Files and folders under `root` that anyone but the owner may read (should be none)."""
    return [f"{oct(p.stat().st_mode & 0o777)} {p}" for p in [root, *root.rglob("*")]
            if not p.is_symlink() and p.stat().st_mode & 0o077]


def test_a_full_run_then_the_next_date(airflow, tmp_path: Path):
    """The pipeline by the book, in as few JVM starts as the claims allow (one DAG run each):

    1. 2026-01-05, the whole DAG on the embedded default made small: every stage through
       spark-submit succeeds, every table is written as the catalogue says, a report exists,
       every file under the data root is private;
    2. 2026-01-06, the collection only: the logical date collects its data interval's
       trajectories and re-releases nothing of the earlier date's.
    One table count at the end checks all of it (each count is a JVM start). A rerun of a date
    starts the same collect command again (same window, same run id: the rendered arguments
    depend on the logical date only); that it spends nothing is checked in-process, without a
    third DAG run (tests/jobs/test_collect_spark.py,
    test_a_collection_window_collects_only_its_dates_once).
    """
    root = tmp_path / "data"
    # The embedded data placed around the logical dates (the generator is deterministic, so
    # later runs may skip datagen + ingest: they would write the same rows).
    params = {"storage_root": str(root),
              "overrides": ["datagen.start_date=2026-01-01", *SMALL, "datagen.days=10"]}

    first = airflow.dags_test("2026-01-05", params)
    _expect_all_tasks_succeeded(first)
    assert set(first.task_states) == {"collection.choose_source", *TASK_IDS.values()}
    assert list(root.rglob("report.html")), f"no report.html under {root}"
    # the default config's synthesis study is in the report, the Markov model among its methods
    figures = json.loads(next(root.rglob("figures.json")).read_text())
    studied = {row["name"] for row in figures["tables"]["synthesis_study"]}
    assert {"DP Markov", "PateGAIL", "PateGAIL++", "uniform random days (baseline)"} <= studied
    # Zones: every file under the data root (landing CSVs, warehouse, metastore, keys, run
    # folders, the report with raw points) is private to its owner: 0600 files, 0700 folders.
    assert _private_modes(root) == []
    assert not (root / "staging").exists() or not any((root / "staging").iterdir())

    collection_only = ("datagen", "ingest", *NOT_COLLECTION)
    _expect_all_tasks_succeeded(airflow.dags_test("2026-01-06", params, skip=collection_only))

    counts, ledger = table_counts(root)
    assert counts.pop("__drift__") == []  # every table and view as jobs/spark/tables.py says
    for stage, tables in STAGE_TABLES.items():
        for table in tables:
            assert counts.get(table, 0) > 0, f"{stage} left {table} empty or missing: {counts}"
    _expect_the_published_model_trained_as_configured(counts)
    releases = counts["__releases__"]
    # two releases, each of exactly one day, a different day each time
    assert len(releases) == 2, releases
    days = [r[1] for r in releases]
    assert all(len(d) == 1 for d in days) and len({d[0] for d in days}) == 2, days
    assert sorted(d[0] for d in days) == [d[0] for d in days], "released in date order"
    # ... and nothing spent twice: the next date charged none of the earlier date's trajectories
    assert counts["__spent_twice__"] == 0, "the next logical date spent privacy budget again"
    assert ledger[0] > 0


def _expect_the_published_model_trained_as_configured(counts: dict) -> None:
    """The synthetic days come from the DAG's one train run, which trained the method its
    config names: a learned method through TorchDistributor (the ranks its launch returned,
    the launch's overhead timed, the rounds run), the DP Markov release with no launch."""
    from jobs.methods import get

    (run_id, status, config, figures), = counts.pop("__train_runs__")
    figures, train = json.loads(figures), yaml.safe_load(config)["train"]
    method = train["method"]
    assert status == "ok" and figures["method"] == method, (status, figures)
    assert counts.pop("__synthetic_from__") == [[run_id, method]]
    if get(method).learned:
        assert figures["num_processes"] == train["num_processes"], figures
        assert "launch_overhead_s" in figures and figures["rounds_done"] >= 1, figures
    else:
        assert "num_processes" not in figures and figures["stopped_reason"] == "released"


def test_bad_config_value_fails_the_run_with_the_jobs_message(airflow, tmp_path: Path):
    # Valid for the DAG's params (a list of numbers), refused by the job's config validation.
    params = {"storage_root": str(tmp_path / "data"), "epsilon": 1000}
    result = airflow.dags_test("2026-01-06", params)
    assert result.returncode != 0
    assert result.state == "failed"
    assert result.task_states["collection.datagen"] == "failed"
    assert result.tries["collection.datagen"] == 1, "a user error (exit 2) must not be retried"
    assert result.task_states["collection.collect"] == "upstream_failed"
    assert result.task_states["report"] == "upstream_failed"
    # The job's own one-line message reaches the task log (spark-submit output is logged).
    assert "trajpriv datagen: error: invalid configuration" in result.output
    assert "each epsilon must be finite and in (0, 100], got 1000.0" in result.output


def test_missing_spark_connection_names_the_variable(airflow, tmp_path: Path):
    env = {k: v for k, v in airflow.env.items() if k != "AIRFLOW_CONN_TRAJPRIV_SPARK"}
    result = airflow.dags_test("2026-01-07", {"storage_root": str(tmp_path / "data")}, env=env)
    assert result.state == "failed"
    assert result.task_states["collection.datagen"] == "failed"
    assert result.tries["collection.datagen"] == 1
    assert "set the environment variable AIRFLOW_CONN_TRAJPRIV_SPARK" in result.output
    assert not (tmp_path / "data").exists(), "nothing may run without the connection"

"""Quiet, informative logs (issue 20): progress lines, the closing summary, torchrun's banner.

No JVM here: a fake clock drives `Progress`, a fake status tracker `spark_progress`, a fake
TorchDistributor the train launch. The stage-level check through the CLI is in
tests/jobs/test_stage_output.py.
"""

from __future__ import annotations

import logging
import os
from types import SimpleNamespace

import pytest

from jobs import closing, progress
from jobs.progress import Progress, progress_line, spark_progress, task_counts


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trajpriv.progress"]


# ----------------------------------------------------------------------------- Progress
def test_a_line_says_done_total_rate_and_eta():
    assert progress_line("collect release", 3, 12, "tasks", 6.0, work=(48_000, "trajectories")
                         ) == ("collect release: 3/12 tasks (25%), 2,000 trajectories/s, "
                               "ETA 18 s")
    assert progress_line("evaluate", 1, 4, "runs", 90.0) == (
        "evaluate: 1/4 runs (25%), 0.011 runs/s, ETA 4 min 30 s")
    assert progress_line("x", 4, 4, "runs", 3.0, final=True) == (
        "x: 4/4 runs (100%), 1.3 runs/s, done in 3 s")


def test_lines_are_rate_limited_and_a_short_run_prints_nothing(caplog):
    caplog.set_level(logging.INFO, logger="trajpriv.progress")
    clock = Clock()
    quick = Progress("quick", 10, "tasks", every_s=10, clock=clock)
    for i in range(10):
        clock.t += 0.5
        quick.update(i + 1)
    quick.close()
    assert _lines(caplog) == []  # 5 s of work: no line at all

    clock.t = 0.0
    slow = Progress("slow", 100, "tasks", every_s=10, clock=clock)
    for i in range(100):
        clock.t += 1.0
        slow.update(i + 1)
    slow.close()
    lines = _lines(caplog)
    # one line per 10 s (the 100th unit is the closing line's), never one per unit
    assert len(lines) == 10, lines
    assert lines[0] == "slow: 10/100 tasks (10%), 1.0 tasks/s, ETA 1 min 30 s"
    assert lines[-1] == "slow: 100/100 tasks (100%), 1.0 tasks/s, done in 1 min 40 s"


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(progress.ENV_INTERVAL, "0")
    assert progress.interval_s() == 0
    monkeypatch.setenv(progress.ENV_INTERVAL, "off")
    assert progress.interval_s() == float("inf")
    monkeypatch.delenv(progress.ENV_INTERVAL)
    assert progress.interval_s() == progress.DEFAULT_INTERVAL_S


def test_track_counts_a_driver_loop(caplog):
    caplog.set_level(logging.INFO, logger="trajpriv.progress")
    assert list(progress.track(["a", "b"], "attacks", "runs", every_s=0)) == ["a", "b"]
    assert _lines(caplog)[-1].startswith("attacks: 2/2 runs (100%)")


# ----------------------------------------------------------------------------- Spark tracker
class FakeTracker:
    """Jobs of one group: job 1 done (its stage 11 skipped: no task completed), job 2 running."""

    def getJobIdsForGroup(self, group):  # noqa: N802 - Spark's names
        return [1, 2] if group == FakeContext.group_seen else []

    def getJobInfo(self, job_id):  # noqa: N802
        return {1: SimpleNamespace(status="SUCCEEDED", stageIds=[10, 11]),
                2: SimpleNamespace(status="RUNNING", stageIds=[20])}[job_id]

    def getStageInfo(self, stage_id):  # noqa: N802
        return {10: SimpleNamespace(numTasks=4, numCompletedTasks=4),
                11: SimpleNamespace(numTasks=8, numCompletedTasks=0),
                20: SimpleNamespace(numTasks=8, numCompletedTasks=3)}[stage_id]


class FakeContext:
    group_seen: str | None = None

    def __init__(self) -> None:
        self.props = {"spark.jobGroup.id": "outer"}

    def getLocalProperty(self, key):  # noqa: N802
        return self.props.get(key)

    def setLocalProperty(self, key, value):  # noqa: N802
        self.props[key] = value
        if value != "outer":
            FakeContext.group_seen = value

    def statusTracker(self):  # noqa: N802
        return FakeTracker()


def test_task_counts_treat_a_finished_jobs_skipped_stages_as_done():
    FakeContext.group_seen = "g"
    assert task_counts(FakeTracker(), "g") == (4 + 8 + 3, 4 + 8 + 8)


def test_spark_progress_tags_its_jobs_and_restores_the_group(caplog):
    caplog.set_level(logging.INFO, logger="trajpriv.progress")
    sc = FakeContext()
    spark = SimpleNamespace(sparkContext=sc)
    with spark_progress(spark, "collect release", "tasks", poll_s=0.01, every_s=0) as p:
        assert sc.props["spark.jobGroup.id"].startswith("trajpriv-")
    assert sc.props["spark.jobGroup.id"] == "outer"
    assert (p.done, p.total) == (15, 20)
    assert _lines(caplog)[-1].startswith("collect release: 15/20 tasks (75%)")


def test_spark_progress_stops_on_an_exception_and_never_hides_it(caplog):
    caplog.set_level(logging.INFO, logger="trajpriv.progress")
    sc = FakeContext()
    with pytest.raises(ValueError, match="boom"):
        with spark_progress(SimpleNamespace(sparkContext=sc), "x", poll_s=0.01, every_s=0):
            raise ValueError("boom")
    assert sc.props["spark.jobGroup.id"] == "outer"
    assert not [t for t in __import__("threading").enumerate() if t.name == "progress-x"]


def test_spark_progress_off_starts_nothing(monkeypatch):
    monkeypatch.setenv(progress.ENV_INTERVAL, "off")
    sc = FakeContext()
    with spark_progress(SimpleNamespace(sparkContext=sc), "x") as p:
        assert p is None and sc.props["spark.jobGroup.id"] == "outer"


# ----------------------------------------------------------------------------- closing summary
def test_collect_summary_names_the_table_its_count_the_spend_and_the_query():
    public = {"dataset": "d", "mechanism": "atp", "epsilon": 2.5, "release_id": "r1",
              "trajectories_released": 1234, "epsilon_spent": 3085.0}
    lines = closing.closing_lines("collect", public, "collect-1", "/x/my.yaml")
    assert "wrote trajpriv_pub.perturbed_trajectories: 1,234 rows" in lines
    assert any(line.startswith("epsilon: 2.5 per released trajectory") for line in lines)
    assert ('query: trajpriv sql --config /x/my.yaml "SELECT mechanism, epsilon, count(*) AS '
            'trajectories FROM trajpriv_pub.perturbed_trajectories GROUP BY 1, 2 ORDER BY 1, 2"'
            in lines)
    assert lines[-1] == "next: trajpriv train --config /x/my.yaml"


def test_raw_counts_never_reach_the_summary():
    """Ingest's raw-derived counts are trusted figures: the summary names the raw tables
    without them (public_view drops them before the summary sees the figures)."""
    from jobs.harness import public_view
    from jobs.ingest import stage as ingest

    figures = {"dataset": "d", "locations": 30, "points": 987_654, "trajectories": 45_678,
               "slot_days": 3_456, "records_quarantined": 21, "wall_s": 1.0}
    lines = closing.closing_lines("ingest", public_view(ingest.run, figures), "ingest-1")
    text = "\n".join(lines)
    for secret in ("987", "45,678", "45678", "3,456", "3456"):
        assert secret not in text
    assert "wrote trajpriv_pub.locations: 30 rows" in lines
    assert "trajpriv_raw.points" in text and "not published" in text
    assert "--config" not in text  # the default config is not repeated


def test_every_stage_has_a_summary_and_a_way_on():
    from jobs.cli import STAGES

    assert set(closing.STAGES) == set(STAGES)
    for stage, spec in closing.STAGES.items():
        assert spec.next or spec.query, stage


# ----------------------------------------------------------------------------- torchrun banner
def test_ranks_get_omp_threads_set_so_torchrun_prints_no_banner(monkeypatch, tmp_path):
    """Measured defect: torchrun printed its `Setting OMP_NUM_THREADS environment variable
    ...` banner (copied to stdout by pyspark) on every local multi-rank launch: it prints it
    when the variable is unset, then sets 1. The launch sets the same 1 itself."""
    import pyspark.ml.torch.distributor as dist

    from jobs.config import load_config
    from jobs.train import stage as train_stage

    seen = {}

    class FakeDistributor:
        def __init__(self, num_processes, local_mode, use_gpu):
            self.num_processes = num_processes

        def run(self, fn, job):
            seen["omp"] = os.environ.get("OMP_NUM_THREADS")
            return "ok"

    monkeypatch.setattr(dist, "TorchDistributor", FakeDistributor)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cfg = load_config(None, [f"storage.root={tmp_path}", "train.num_processes=2"])
    assert train_stage.launch(None, cfg, job=None, world=2) == "ok"
    assert seen["omp"] == "1"
    assert "OMP_NUM_THREADS" not in os.environ  # the driver's own threads untouched

    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    train_stage.launch(None, cfg, job=None, world=2)
    assert seen["omp"] == "3"


# ----------------------------------------------------------------------------- --verbose
def test_verbose_is_an_option_of_every_stage(monkeypatch):
    """jobs.spark.session.verbose() read TRAJPRIV_VERBOSE, but no command had `--verbose`:
    Spark's INFO lines could not be asked for. Without it, nothing changes."""
    from jobs import harness
    from jobs.spark.session import verbose

    # setenv first: delenv of an unset variable records nothing to undo, and apply_verbose
    # sets it below (it leaked into every later test of the worker, which then ran verbose)
    monkeypatch.setenv("TRAJPRIV_VERBOSE", "")
    monkeypatch.delenv("TRAJPRIV_VERBOSE")
    harness.apply_verbose(harness.build_parser("collect").parse_args([]))
    assert not verbose()
    levels = {name: logging.getLogger(name).level for name in ("trajpriv", "jobs", "models")}
    try:
        harness.apply_verbose(harness.build_parser("collect").parse_args(["--verbose"]))
        assert verbose()
        assert logging.getLogger("models.train").isEnabledFor(logging.DEBUG)
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_the_harness_prints_the_summary_after_the_ok_line(capsys):
    """Only public figures reach stdout; `trajpriv run` leaves out `next:` between stages."""
    import argparse

    from jobs import harness
    from jobs.collect import stage as collect

    figures = {"dataset": "d", "mechanism": "atp", "epsilon": 2.5, "release_id": "r1",
               "trajectories_released": 12, "epsilon_spent": 30.0, "users": 777,
               "refused": {"window_exhausted": 5}}
    args = argparse.Namespace(config=str(harness.DEFAULT_CONFIG))
    harness.print_outcome("collect", collect.run, figures, "collect-1", args)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("trajpriv collect: ok ") and "777" not in "".join(out)
    assert out[1] == "  wrote trajpriv_pub.perturbed_trajectories: 12 rows"
    assert out[-1] == "  next: trajpriv train"
    harness.print_outcome("collect", collect.run, figures, "collect-1", args, show_next=False)
    assert not [line for line in capsys.readouterr().out.splitlines() if "next:" in line]


def test_every_next_command_repeats_a_custom_config():
    """Found in review: after ingest, `next: trajpriv study, trajpriv collect --config X or ...`
    gave `--config` to collect and train only; every alternative now carries it."""
    from jobs.closing import closing_lines

    lines = closing_lines("ingest", {}, "ingest-1", "/etc/t.yaml")
    nxt = [ln for ln in lines if ln.startswith("next: ")]
    assert nxt == ["next: trajpriv study --config /etc/t.yaml or trajpriv collect --config "
                   "/etc/t.yaml or trajpriv train --config /etc/t.yaml"]

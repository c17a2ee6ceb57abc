"""What `trajpriv collect` prints through the CLI (issue 20, quiet and informative logs).

Measured defects on main: 25 s of silence between "stage collect started" and the `ok` line
(no progress inside the stage), and no closing summary of what was written and how to query
it. One collect of a small dataset of its own on the shared session; progress lines every
poll (`TRAJPRIV_PROGRESS_S=0`), so whether a line appears never depends on timing: each
progress block closes with one line once its Spark jobs ran.
"""

from __future__ import annotations

import logging

import pytest
import yaml

from jobs.spark import tables
from tests.jobs.test_collect_spark import _config, _raw_data, _write_raw

pytestmark = pytest.mark.spark

DATASET = "logs_test"


def test_collect_prints_progress_and_a_closing_summary(spark, spark_config, tmp_path,
                                                       monkeypatch, capsys, caplog):
    import jobs.spark.session
    from jobs.cli import main as cli

    locations, trajs, _ = _raw_data(seed=5)
    _write_raw(spark, DATASET, locations, trajs)
    conf = tmp_path / "logs.yaml"
    conf.write_text(yaml.safe_dump(_config(spark_config, dataset=DATASET).model_dump(
        mode="json")))
    monkeypatch.setattr(jobs.spark.session, "stop_spark", lambda s: None)  # the shared session
    monkeypatch.setenv("TRAJPRIV_PROGRESS_S", "0")
    caplog.set_level(logging.INFO, logger="trajpriv.progress")
    capsys.readouterr()

    assert cli(["collect", "--config", str(conf), "--run-id", "logs-collect-1"]) == 0
    out = capsys.readouterr().out

    progress = [r.getMessage() for r in caplog.records if r.name == "trajpriv.progress"]
    assert any(line.startswith("collect release: ") and " tasks (100%)" in line
               and "trajectories/s" in line for line in progress), progress
    assert any(line.startswith("collect plan: ") for line in progress), progress

    published = spark.table(tables.PERTURBED_TRAJECTORIES).where(
        f"dataset = '{DATASET}'").count()
    assert published > 0
    lines = [line.strip() for line in out.splitlines()]
    assert lines[0].startswith("trajpriv collect: ok ")
    assert f"wrote trajpriv_pub.perturbed_trajectories: {published:,} rows" in lines
    assert any(line.startswith("epsilon: 2.5 per released trajectory") for line in lines)
    assert any(line.startswith(f'query: trajpriv sql --config {conf} "SELECT')
               for line in lines), lines
    assert lines[-1] == f"next: trajpriv train --config {conf}"
    assert "OMP_NUM_THREADS" not in out

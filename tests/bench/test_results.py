"""bench.results.write_result: the provenance fields and the rendered table."""

from __future__ import annotations

import json
import re
import socket
import sys

import pytest

from bench import results
from docs.render_benchmarks import page


def test_write_result_fields_and_page(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(results.ROOT / "bench" / "x.py"), "--rounds", "1",
                                      "--label", "a b"])
    path = results.write_result("x_demo", "Demo table", ["method", "score"],
                                [["a|b", "0.5 ± 0.1"], ["c", 2.0]], notes="a note",
                                results_dir=tmp_path)
    assert path == tmp_path / "x_demo.json"
    got = json.loads(path.read_text())
    assert got["command"] == ".venv/bin/python bench/x.py --rounds 1 --label 'a b'"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", got["date"])
    assert "cores" in got["machine"] and "GiB" in got["machine"]
    assert socket.gethostname() not in got["machine"]
    assert re.fullmatch(r"[0-9a-f]{4,}(\+dirty)?", got["commit"])
    assert got["columns"] == ["method", "score"] and got["notes"] == "a note"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    md = page(tmp_path)
    assert "## Demo table" in md and "bench/x.py --rounds 1" in md
    assert "| a\\|b | 0.5 ± 0.1 |" in md and "| c | 2 |" in md


def test_write_result_rejects_ragged_rows(tmp_path):

    with pytest.raises(ValueError, match="2 cells"):
        results.write_result("bad", "Bad", ["a", "b"], [["only one"]], results_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_synthesis_bench_publishes_one_table_per_dataset(tmp_path, monkeypatch):
    from argparse import Namespace

    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts the root first on import
    from bench import reproduce_synthesis as rs
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    stats = dict.fromkeys((*rs.METRICS, *rs.LONGRANGE_METRICS), (0.25, 0.0125))
    rows = [{"method": "uniform random", "epsilon": "", **stats, "spent": None},
            {"method": "PateGAIL Laplace", "epsilon": 4.0, "setting": "sd 0.5", **stats,
             "spent": (3.99, 0.01)}]
    rs.publish(Namespace(root=None, dataset="telecom_shanghai", rounds=50, epsilons="1,4,10"),
               [0, 1, 2], rows)
    rs.publish(Namespace(root="/r", dataset="telecom_shanghai", rounds=10, epsilons="4"),
               [0], rows[1:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["synthesis_geolife.json",
                                                          "synthesis_telecom_shanghai.json"]
    got = json.loads((tmp_path / "synthesis_geolife.json").read_text())
    assert got["title"] == "Private synthesis on geolife: 50 rounds, seeds 0,1,2, epsilons 1,4,10"
    assert got["columns"] == ["method", "epsilon", "noise", *rs.METRICS,
                              *rs.LONGRANGE_METRICS, "spent"]
    assert got["rows"][0][-2:] == ["0.2500 ± 0.0125", "-"]
    assert got["rows"][1][:4] == ["PateGAIL Laplace", 4.0, "sd 0.5", "0.2500 ± 0.0125"]
    assert got["rows"][1][-1] == "3.990 ± 0.010"
    assert "| PateGAIL Laplace | 4 | sd 0.5 | 0.2500 ± 0.0125 |" in page(tmp_path)


def test_pipeline_bench_publishes_its_stage_table(tmp_path, monkeypatch):
    from argparse import Namespace

    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts the root first on import
    from bench import bench_pipeline
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    rows = [{"stage": "ingest", "status": "ok", "stage_s": 12.34, "wall_s": 20.0,
             "peak_gib": 1.234},
            {"stage": "run (whole)", "status": "ok", "wall_s": 30.0, "peak_gib": 2.0}]
    bench_pipeline.publish(Namespace(config="conf/default.yaml", overrides=["a=1"]), rows, 31.0)
    got = json.loads((tmp_path / "pipeline.json").read_text())
    assert got["title"] == "Pipeline run, default.yaml a=1"
    assert got["rows"] == [["ingest", "ok", "12.3", "20.0", "1.23"],
                           ["run (whole)", "ok", "", "30.0", "2.00"],
                           ["total", "", "", "31.0", ""]]

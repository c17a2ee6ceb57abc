"""The report's long-range table: evaluate's long-range rows get their own table (HTML and
figures.json), in the statistics' order, and never leak into the LDP or mobility tables."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from jobs.report.render import ReportInputs, render_report
from jobs.report.tables import (
    MOBILITY_METRICS,
    ldp_error_table,
    longrange_table,
    mobility_table,
)
from udfs.longrange import LONGRANGE_METRICS

COLUMNS = ["run_id", "dataset", "method", "setting", "metric", "value"]


def _evaluation() -> pd.DataFrame:
    rows = []
    for method, setting, base in (("real_train", None, 0.01), ("uniform_random", None, 0.6),
                                  ("pategail", "4.0", 0.2)):
        rows += [("e1", "d", method, setting, m, base) for m in MOBILITY_METRICS]
        rows += [("e1", "d", method, setting, m, base + i / 100)
                 for i, m in enumerate(reversed(LONGRANGE_METRICS))]
    rows += [("s1", "d", "atp", "1.0", "NE", 0.3)]
    rows += [("s1", "d", "perturbed_atp", "1.0", "tstr_acc1", 0.1)]  # a study-source row
    return pd.DataFrame(rows, columns=COLUMNS)


def test_longrange_rows_have_a_table_of_their_own(tmp_path: Path) -> None:
    ev = _evaluation()
    table = longrange_table(ev)
    assert list(table.columns) == ["name", "source", "epsilon", *LONGRANGE_METRICS]
    assert table["name"].tolist()[:3] == ["real training days (floor)",
                                          "uniform random days (baseline)", "PateGAIL"]
    pategail = table.set_index("name").loc["PateGAIL"]
    assert pategail["motifs"] == 0.2 + (len(LONGRANGE_METRICS) - 1) / 100
    assert "tstr_acc1" not in ldp_error_table(ev).columns
    assert set(mobility_table(ev).columns) == {"name", "source", "epsilon", *MOBILITY_METRICS}

    html_path, json_path = render_report(ReportInputs("d", ev), tmp_path)
    figures = json.loads(json_path.read_text())
    assert len(figures["tables"]["longrange"]) == len(table)
    assert figures["tables"]["longrange"][2]["tstr_acc5"] == 0.2
    page = html_path.read_text()
    assert "Long-range statistics" in page and "TSTR acc@1" in page


def test_synthesis_study_table_shows_the_longrange_columns_in_order() -> None:
    from jobs.report.tables import synthesis_study_table

    metrics = [*reversed(LONGRANGE_METRICS), "epsilon_spent", "other_figure", *MOBILITY_METRICS]
    rows = pd.DataFrame([("s1", "d", "synthesis-study:markov", "4.0", m, 0.1) for m in metrics],
                        columns=COLUMNS)
    table = synthesis_study_table(rows)
    assert list(table.columns) == ["name", "epsilon", *MOBILITY_METRICS, *LONGRANGE_METRICS,
                                   "other_figure", "epsilon_spent"]

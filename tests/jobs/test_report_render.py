"""The report renders, holds every number it draws, and shows in a real headless browser."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.report.render import ReportInputs, render_report
from jobs.report.tables import MOBILITY_METRICS, against_uniform, mobility_table


def _inputs() -> ReportInputs:
    rows = []
    for method, base in (("atp", 0.15), ("tp", 0.2), ("exp", 0.25), ("uniform", 0.5)):
        for eps in (1.0, 4.0, 10.0):
            rows.append(("r1", "d", method, str(eps), "ne", base / np.sqrt(eps)))
    for metric, value in (("distance", 0.01), ("radius", 0.02), ("grank", 0.03)):
        rows.append(("r2", "d", "pategail++", "0.1", metric, value))
    evaluation = pd.DataFrame(
        rows, columns=["run_id", "dataset", "method", "setting", "metric", "value"]
    )
    rng = np.random.default_rng(0)
    points = pd.DataFrame(
        {
            "kind": ["real"] * 20 + ["perturbed"] * 20 + ["synthetic"] * 20,
            "who": ["p1"] * 60,
            "lat": 31 + rng.normal(0, 0.05, 60),
            "lon": 121.4 + rng.normal(0, 0.05, 60),
        }
    )
    training = pd.DataFrame(
        [(r, m, v) for r in range(5) for m, v in (("reward", 0.5 + r / 20), ("epsilon", r / 2))],
        columns=["round", "metric", "value"],
    )
    privacy = pd.DataFrame(
        [("collect atp", "4.0", 4.0, 0.0)], columns=["source", "setting", "epsilon", "delta"]
    )
    return ReportInputs("d", evaluation, points, training, privacy)


def test_report_holds_every_number(tmp_path: Path) -> None:
    html_path, json_path = render_report(_inputs(), tmp_path)
    figures = json.loads(json_path.read_text())
    assert len(figures["evaluation"]) == 15
    assert set(figures["figures_drawn"]) == {"ldp_error", "divergences", "map", "training"}
    page = html_path.read_text()
    assert page.count("data:image/png;base64,") == 4
    assert "PateGAIL++" in page  # the canonical name


def test_report_says_plainly_where_a_model_does_not_beat_uniform(tmp_path: Path) -> None:
    rows = [("e1", "d", "uniform_random", None, m, 0.5) for m in MOBILITY_METRICS]
    rows += [("e1", "d", "pategail", "9.3", m, 0.6 if m == "dailyloc" else 0.2)
             for m in MOBILITY_METRICS]
    rows += [("e1", "d", "pategail++", "9.3", m, 0.1) for m in MOBILITY_METRICS]
    rows += [("e1", "d", "real_train", None, m, 0.01) for m in MOBILITY_METRICS]
    evaluation = pd.DataFrame(
        rows, columns=["run_id", "dataset", "method", "setting", "metric", "value"])
    verdicts = against_uniform(mobility_table(evaluation)).set_index("name")
    assert set(verdicts.index) == {"PateGAIL", "PateGAIL++"}  # trained models only
    assert verdicts.loc["PateGAIL", "loses to uniform on"] == "DailyLoc"
    assert verdicts.loc["PateGAIL", "verdict"] == "no better than uniform on 1 of 6 statistics"
    assert verdicts.loc["PateGAIL++", "verdict"] == "beats uniform on all 6 statistics"
    html_path, json_path = render_report(ReportInputs("d", evaluation), tmp_path)
    assert "no better than uniform on 1 of 6 statistics" in html_path.read_text()
    assert len(json.loads(json_path.read_text())["against_uniform"]) == 2


def test_report_without_data_still_renders(tmp_path: Path) -> None:
    empty = pd.DataFrame(columns=["run_id", "dataset", "method", "setting", "metric", "value"])
    html_path, _ = render_report(ReportInputs("d", empty), tmp_path)
    assert "no data for the figure" in html_path.read_text()


def _attack_rows() -> list[tuple]:
    """Attack rows as jobs/evaluate/attacks.py writes them, from real AttackReports."""
    from models.attacks.report import AttackSettings, evaluate_attack

    rng = np.random.default_rng(1)
    y = np.r_[np.ones(60, bool), np.zeros(40, bool)]
    rows = []
    for name, shift in (("whitebox_mia", 2.0), ("lira_policy", 0.0), ("lira_critic", 0.1)):
        rep = evaluate_attack(name, rng.normal(0, 1, 100) + shift * y, y, threshold=0.5,
                              settings=AttackSettings(n_boot=50))
        rows += [("r2", "d", "pategail++", "0.1", m, v) for m, v in rep.rows()]
    rows += [("r2", "d", "pategail++", "0.1", "attack_users", 6.0)]
    for method, eps, share in (("raw", None, 0.85), ("perturbed_atp", "4.0", 0.2)):
        rows += [("r2", "d", method, eps, "home_reid_share_within_km", share),
                 ("r2", "d", method, eps, "home_reid_share_lo", share - 0.05),
                 ("r2", "d", method, eps, "home_reid_share_hi", share + 0.05),
                 ("r2", "d", method, eps, "home_reid_median_error_km", 0.4)]
    return rows


def test_attack_tables_sit_next_to_the_utility_of_the_same_run(tmp_path: Path) -> None:
    from jobs.report.tables import ldp_error_table, membership_table, utility_and_attacks

    base = _inputs()
    extra = pd.DataFrame(_attack_rows(), columns=base.evaluation.columns)
    evaluation = pd.concat([base.evaluation, extra], ignore_index=True)
    table = membership_table(evaluation)
    assert list(table["attack"]) == ["white-box MIA (critics)", "LiRA, policy", "LiRA, critic"]
    assert set(table["model"]) == {"PateGAIL++"}
    wb = extra[extra["metric"].str.startswith("whitebox_mia_auc")].set_index("metric")["value"]
    assert table.iloc[0]["AUC [95% CI]"] == (f"{wb['whitebox_mia_auc']:.3f} "
                                              f"[{wb['whitebox_mia_auc_lo']:.3f}, "
                                              f"{wb['whitebox_mia_auc_hi']:.3f}]")
    assert (table["days evaluated"] == 100).all()
    both = utility_and_attacks(evaluation)  # one line: divergences and AUCs of the same run
    assert len(both) == 1 and both.iloc[0]["distance"] == 0.01
    assert both.iloc[0]["white-box MIA (critics) AUC"] == pytest.approx(wb["whitebox_mia_auc"])
    assert not any(str(c).startswith(("whitebox", "lira", "home_reid")) for c in
                   ldp_error_table(evaluation).columns)
    base.evaluation = evaluation
    html_path, json_path = render_report(base, tmp_path)
    page = html_path.read_text()
    assert "Membership inference" in page and "LiRA, critic" in page
    assert "0.850 [0.800, 0.900]" in page  # raw home share with its interval
    figures = json.loads(json_path.read_text())
    assert len(figures["attacks"]["membership"]) == 3 and len(figures["attacks"]["home"]) == 2


def test_synthesis_study_has_its_own_table_and_names_the_best_method(tmp_path: Path) -> None:
    """The synthesis study's rows (jobs/study/synthesis.py) make a table of their own with the
    Markov model in it, the summary names the best method at the study's epsilon, and the rows
    never mix with the evaluated models' rows (same name and epsilon as a published model)."""
    prefix = "synthesis-study:"
    values = {"real_train": 0.01, "uniform_random": 0.5, "markov": 0.05, "pategail": 0.2}
    rows = [("s1", "d", prefix + m, None if m in ("real_train", "uniform_random") else "10.0",
             metric, v) for m, v in values.items() for metric in MOBILITY_METRICS]
    rows += [("s1", "d", prefix + "markov", "10.0", f"{m}_sd", 0.001) for m in MOBILITY_METRICS]
    rows += [("e1", "d", "pategail", "10.0", m, 0.4) for m in MOBILITY_METRICS]
    base = _inputs()
    inputs = ReportInputs("d", pd.DataFrame(rows, columns=base.evaluation.columns),
                          base.map_points, base.training, base.privacy)
    html_path, json_path = render_report(inputs, tmp_path)
    figures = json.loads(json_path.read_text())
    study = pd.DataFrame(figures["tables"]["synthesis_study"])
    assert list(study["name"][:2]) == ["uniform random days (baseline)",
                                       "real training days (floor)"]
    assert set(study["name"][2:]) == {"DP Markov", "PateGAIL"}
    assert study.loc[study["name"] == "DP Markov", "dailyloc_sd"].item() == 0.001
    assert figures["summary"][0].startswith("Synthesis study at epsilon 10: DP Markov is the "
                                            "best method")
    mobility = pd.DataFrame(figures["tables"]["mobility"])
    assert mobility.loc[mobility["name"] == "PateGAIL", "dailyloc"].tolist() == [0.4]
    assert "Synthesis study: which method to publish" in html_path.read_text()

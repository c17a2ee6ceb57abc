"""Each defect measured on the old report (issue 20, item 1) has a test here that failed on it.

Built from small in-memory frames, no JVM: the renderer is pure pandas + matplotlib.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.report.render import ReportInputs, render_report

COLS = ["run_id", "dataset", "method", "setting", "metric", "value"]
MOBILITY = ("distance", "radius", "duration", "dailyloc", "grank", "irank")


def _evaluation(with_attacks: bool = False) -> pd.DataFrame:
    """Rows as the stages write them: the study's LDP metrics (`atp`), evaluate's divergences of
    the same settings (`perturbed_atp`), the release (`atp-release`), a model at ln 2 on DailyLoc,
    the uniform baseline, and a missing (NaN) figure."""
    rows = []
    for mech, base in (("atp", 0.2), ("tp", 0.3), ("exp", 0.35), ("uniform", 0.6)):
        for eps in ("1.0", "10.0", "4.0"):  # string order 1, 10, 4 on purpose
            rows.append(("s1", "d", mech, eps, "NE", base / math.sqrt(float(eps))))
            rows.append(("s1", "d", mech, eps, "PRQ@1km", 1 - base))
            for i, m in enumerate(MOBILITY):
                rows.append(("e1", "d", f"perturbed_{mech}", eps, m, base / 2 + i / 100))
    rows.append(("c1", "d", "atp-release", "2.5", "NE", 0.15))
    rows += [("e1", "d", "perturbed_atp-release", "2.5", m, 0.1) for m in MOBILITY]
    rows += [("e1", "d", "uniform_random", None, m, 0.5) for m in MOBILITY]
    rows += [("e1", "d", "real_train", None, m, 0.01) for m in MOBILITY]
    rows += [("e1", "d", "pategail", "9.8", m, math.log(2) if m == "dailyloc" else 0.2)
             for m in MOBILITY]
    rows.append(("e1", "d", "pategail", "9.8", "grank", float("nan")))  # a missing figure
    if with_attacks:
        for fig, v in (("auc", 0.52), ("auc_lo", 0.45), ("auc_hi", 0.6), ("n_eval", 100.0)):
            rows.append(("e1", "d", "pategail", "9.8", f"whitebox_mia_{fig}", v))
    return pd.DataFrame(rows, columns=COLS)


def _map_points() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for kind in ("real", "perturbed", "synthetic"):
        for who in ("u1", "u2"):
            for seq in range(5):
                rows.append((kind, who, f"{who}/t", seq, 31.2 + rng.normal(0, 0.05),
                             121.4 + rng.normal(0, 0.05)))
    return pd.DataFrame(rows, columns=["kind", "who", "traj", "seq", "lat", "lon"])


HEADER = {"config_hash": "abc123def456", "privacy_unit": "user", "budget": 10.0,
          "window_days": 7, "runs": [{"stage": "evaluate", "run_id": "e1"}],
          "collection": {"windows": 2, "users": 80, "max_window_epsilon": 2.5,
                         "max_total_epsilon": 5.0},
          "training": {"epsilon": 9.8, "delta": 1e-5, "users": 61, "model": "central"}}


def _render(tmp_path: Path, **kw) -> tuple[str, str]:
    inputs = ReportInputs("d", kw.pop("evaluation", _evaluation()), **kw)
    html_path, json_path = render_report(inputs, tmp_path)
    return html_path.read_text(), json_path.read_text()


def _reject(token: str):
    raise ValueError(f"not strict JSON: {token}")


def test_figures_json_is_strict_json_with_null_for_missing(tmp_path: Path) -> None:
    _, text = _render(tmp_path)
    figures = json.loads(text, parse_constant=_reject)  # NaN / Infinity tokens raise
    pategail = [r for r in figures["evaluation"]
                if r["method"] == "pategail" and r["metric"] == "grank"]
    assert None in [r["value"] for r in pategail]


def test_no_nan_shown_on_the_page(tmp_path: Path) -> None:
    page, _ = _render(tmp_path)
    text = re.sub(r"<[^>]+>|data:image/png;base64,[A-Za-z0-9+/=]+", " ", page)
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)


def test_one_name_per_mechanism(tmp_path: Path) -> None:
    page, text = _render(tmp_path)
    for raw in ("perturbed_atp", "atp-release", "uniform_random", "pategail"):
        assert raw not in re.sub(r"data:image[^\"]+", "", page), raw
    tables = json.loads(text)["tables"]
    ldp = {r["name"] for r in tables["ldp_error"]}
    mobility = {r["name"] for r in tables["mobility"]}
    assert {"ATP", "TP", "EXP", "UNIFORM (LDP)"} <= ldp & mobility  # same names in both


def test_epsilon_in_numeric_order_and_one_colour_per_method(tmp_path: Path) -> None:
    _, text = _render(tmp_path)
    charts = json.loads(text)["charts"]
    for name in ("ldp_error", "divergences"):
        assert charts[name]["epsilons"] == sorted(charts[name]["epsilons"])
    assert charts["divergences"]["epsilons"][:3] == [1.0, 2.5, 4.0]
    div = charts["divergences"]
    base = {s.removesuffix(", published"): c for s, c in zip(div["series"], div["colours"],
                                                             strict=True)}
    assert len(set(base.values())) == len(base)  # distinct names never share a colour
    tables = json.loads(text)["tables"]["ldp_error"]
    atp = [r["epsilon"] for r in tables if r["name"] == "ATP" and r["source"] == "study"]
    assert atp == [1.0, 4.0, 10.0]


def test_epsilon_ticks_never_print_over_each_other() -> None:
    """Seen in the 1400 px screenshot: a model trained to epsilon 9.8 put a 9.8 tick on the 10
    tick ("1θ"). Of two ticks closer than MIN_TICK_RATIO, the shorter label stays."""
    from jobs.report.figures import epsilon_ticks

    assert epsilon_ticks([1.0, 2.5, 4.0, 9.8, 10.0]) == [1.0, 2.5, 4.0, 10.0]
    assert epsilon_ticks([10.0, 1.0, 4.0]) == [1.0, 4.0, 10.0]
    assert epsilon_ticks([0.5, 0.55, 7.73]) == [0.5, 7.73]


def test_attacks_hint_only_when_there_are_no_attack_figures(tmp_path: Path) -> None:
    filled, _ = _render(tmp_path / "a", evaluation=_evaluation(with_attacks=True))
    empty, _ = _render(tmp_path / "b")
    assert "trajpriv evaluate --attacks" not in filled
    assert "white-box MIA (critics)" in filled
    assert "trajpriv evaluate --attacks" in empty


def test_warns_where_a_model_is_at_ln2_or_no_better_than_uniform(tmp_path: Path) -> None:
    page, text = _render(tmp_path)
    warnings = json.loads(text)["warnings"]
    assert any("PateGAIL at epsilon 9.8" in w and "maximum divergence ln 2" in w
               and "DailyLoc" in w for w in warnings)
    assert any("PateGAIL at epsilon 9.8" in w and "no better than uniform random days" in w
               for w in warnings)
    assert 'class="warn"' in page and 'class="max"' in page


def test_header_names_data_runs_config_and_privacy_spent(tmp_path: Path) -> None:
    page, text = _render(tmp_path, header=HEADER)
    header = page[page.index("<header"):page.index("</header>")]
    for needle in ("abc123def456", "evaluate", "one user", "budget epsilon 10 per 7-day window",
                   "at most epsilon 2.5", "5 in total", "training spent epsilon 9.8"):
        assert needle in header, needle
    assert json.loads(text)["header"]["config_hash"] == "abc123def456"
    summary = page[page.index('id="summary"'):page.index('id="ldp"')]
    assert "ATP has the lowest normalised error" in summary
    assert "Best synthetic model: PateGAIL" in summary


def _png_width(b64: str) -> int:
    raw = base64.b64decode(b64)
    return struct.unpack(">I", raw[16:20])[0]  # IHDR width


def test_figures_are_drawn_at_page_width(tmp_path: Path) -> None:
    training = pd.DataFrame([(r, m, float(r)) for r in range(1, 5) for m in ("reward", "eps")],
                            columns=["round", "metric", "value"])
    page, _ = _render(tmp_path, map_points=_map_points(), training=training)
    widths = [_png_width(b) for b in re.findall(r"data:image/png;base64,([^\"]+)", page)]
    assert len(widths) == 4
    assert all(1200 <= w <= 1400 for w in widths), widths


def test_map_is_equal_aspect_with_users_apart_and_lines(tmp_path: Path) -> None:
    locations = pd.DataFrame({"lat": [31.1, 31.3], "lon": [121.3, 121.5]})
    _, text = _render(tmp_path, map_points=_map_points(), locations=locations)
    drawn = json.loads(text)["charts"]["map"]
    assert drawn["aspect"] == pytest.approx(1 / math.cos(math.radians(31.2)), rel=0.01)
    assert drawn["users"] == 2
    assert drawn["kinds"] == ["real", "perturbed", "synthetic"]
    assert drawn["lines"] == 6


def test_a_model_at_ln2_does_not_beat_uniform_at_ln2(tmp_path: Path) -> None:
    """Measured: PateGAIL 0.6901 against uniform 0.6931 on DailyLoc read "beats uniform on all
    6 statistics"; both at the maximum, neither has anything in common with real days."""
    from jobs.report.tables import against_uniform, mobility_table

    rows = [("e1", "d", "uniform_random", None, m, 0.6931 if m == "dailyloc" else 0.5)
            for m in MOBILITY]
    rows += [("e1", "d", "pategail", "7.7", m, 0.6901 if m == "dailyloc" else 0.2)
             for m in MOBILITY]
    verdict = against_uniform(mobility_table(pd.DataFrame(rows, columns=COLS))).iloc[0]
    assert verdict["loses to uniform on"] == "DailyLoc"
    assert verdict["at the maximum ln 2"] == "DailyLoc"
    assert verdict["verdict"] == "no better than uniform on 1 of 6 statistics"

"""The tables the LDP and attack benches publish, the papers' figures in their own columns.

Fed made-up figures (no data, no training): what is checked is where each number lands, that
a figure the paper does not state shows as "-", and that the page renders the table.
"""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from types import SimpleNamespace

import pandas as pd

from bench import results
from docs.render_benchmarks import page


def test_ldp_table_puts_the_paper_ne_beside_ours(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts the root first on import
    from bench import reproduce_ldp as rl

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    monkeypatch.setattr(rl, "PAPER_NE", {("chi", "ATP", 4): 0.125})
    index = pd.MultiIndex.from_tuples([("ATP", 4), ("TP", 4)], names=["method", "eps"])
    mean = pd.DataFrame({"NE": [0.2, 0.3], "PRQ@1.0km": [0.1, 0.05]}, index=index)
    sd = pd.DataFrame({"NE": [0.01, None], "PRQ@1.0km": [0.002, 0.001]}, index=index)
    space = SimpleNamespace(n=1000, diameter=50.65)
    rl.publish("chi", space, [[0, 1]] * 7, mean, sd, Namespace(reps=3), [])
    got = json.loads((tmp_path / "ldp_chi.json").read_text())
    assert got["columns"] == ["method", "epsilon", "NE", "paper NE", "PRQ@1.0km"]
    assert got["rows"] == [["ATP", 4, "0.2000 ± 0.0100", "0.1250", "0.1000 ± 0.0020"],
                           ["TP", 4, "0.3000 ± 0.0000", "-", "0.0500 ± 0.0010"]]
    assert "| ATP | 4 | 0.2000 ± 0.0100 | 0.1250 |" in page(tmp_path)


def test_attack_tables_put_the_paper_figures_beside_ours(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    from bench import reproduce_attacks as ra

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    auc = {"auc": 0.55, "auc_ci": (0.5, 0.6), "balanced_accuracy": 0.52, "tpr_at_fpr": 0.02}
    geo = [{"scheme": s, "noise": n, "epsilon": 12.5, "whitebox_mia": auc, "lira_policy": auc,
            "lira_policy_offline": {"auc": 0.51}, "lira_critic": auc}
           for s in ("pategail", "pategail++") for n in (0.01, 0.1)]
    share = {"share_within_km": 0.4, "share_lo": 0.35, "share_hi": 0.45, "n_users": 100}
    chi = [{"method": "atp", "epsilon": 4.0, "night": share, "night_min10": share,
            "allraw": share}]
    ra.publish(Namespace(rounds=25, shadows=4, seed=0, boot=500, min_points=10),
               {"geolife": geo, "chi": chi})
    rows = json.loads((tmp_path / "attacks_geolife.json").read_text())["rows"]
    paper = {(r[0], r[1]): (r[4], r[6]) for r in rows}  # (paper AUC, paper accuracy)
    assert paper == {("pategail", 0.01): ("0.7208", "0.6645"),
                     ("pategail++", 0.01): ("0.4962", "0.5115"),
                     ("pategail", 0.1): ("0.7273", "-"), ("pategail++", 0.1): ("0.4846", "-")}
    assert rows[0][3] == "0.550 [0.500, 0.600]"
    home = json.loads((tmp_path / "attacks_chi_home.json").read_text())["rows"]
    assert home == [["atp", "4", "0.400 [0.350, 0.450]", "0.400 [0.350, 0.450]", "0.400", 100]]


def test_pategail_table_shows_the_paper_only_at_noise_0_1(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    from bench import reproduce_pategail as rp

    assert rp.paper_cell("pategail", "noise 0.1", "dailyloc") == "0.6915"
    assert rp.paper_cell("pategail++", "noise 0.1", "irank") == "0.0607"
    assert rp.paper_cell("pategail++", "noise 1.0", "irank") == "-"
    assert rp.paper_cell("pategail", "noise 0.1", "distance") == "-"

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score, roc_curve

from models.attacks.report import (
    AttackSettings,
    attack_split,
    auc,
    balanced_accuracy,
    best_threshold,
    evaluate_attack,
    tpr_at_fpr,
)
from udfs.errors import InvalidParameterError


def _data(seed: int, n: int = 600, shift: float = 0.8):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.6
    s = np.round(rng.normal(size=n) + shift * y, 1)  # rounding makes ties
    return s, y


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_sklearn(seed):
    s, y = _data(seed)
    assert auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr, _ = roc_curve(y, s)  # oracle: best TPR among sklearn's thresholds with FPR <= 1%
    assert tpr_at_fpr(s, y, 0.01) == pytest.approx(tpr[fpr <= 0.01].max(), abs=1e-12)
    assert tpr_at_fpr(s, y, 0.1) == pytest.approx(tpr[fpr <= 0.1].max(), abs=1e-12)
    assert balanced_accuracy(s, y, 0.3) == pytest.approx(balanced_accuracy_score(y, s >= 0.3))


def test_best_threshold_is_the_brute_force_optimum():
    s, y = _data(1)
    t = best_threshold(s, y)
    brute = max(balanced_accuracy_score(y, s >= c) for c in np.unique(s))
    assert balanced_accuracy(s, y, t) == pytest.approx(brute)


def test_report_intervals_and_extremes():
    s, y = _data(2, n=2000)
    rep = evaluate_attack("x", s, y, threshold=0.4, settings=AttackSettings(n_boot=300, seed=0))
    for v, (lo, hi) in [(rep.auc, rep.auc_ci), (rep.balanced_accuracy, rep.balanced_accuracy_ci),
                        (rep.tpr_at_fpr, rep.tpr_at_fpr_ci)]:
        assert lo <= v <= hi
    assert rep.auc_ci[1] - rep.auc_ci[0] < 0.1
    perfect = evaluate_attack("p", np.r_[np.ones(20), np.zeros(30)], np.r_[[1] * 20, [0] * 30],
                              threshold=0.5, settings=AttackSettings(n_boot=50))
    assert perfect.auc == perfect.tpr_at_fpr == perfect.balanced_accuracy == 1.0
    assert perfect.auc_ci == (1.0, 1.0)
    names = dict(rep.rows())
    assert names["x_auc"] == rep.auc and names["x_n_eval"] == 2000
    assert "x_tpr_at_1pct_fpr" in names


def test_errors_say_why():
    with pytest.raises(InvalidParameterError, match="both members and non-members"):
        auc([0.1, 0.2], [1, 1])
    with pytest.raises(InvalidParameterError, match="NaN"):
        auc([np.nan, 0.2], [1, 0])


def test_attack_split_is_stratified_and_seeded():
    rng = np.random.default_rng(0)
    groups = rng.integers(0, 7, 500)
    y = rng.random(500) < 0.7
    m = attack_split(y, groups, 0.5, seed=3)
    assert np.array_equal(m, attack_split(y, groups, 0.5, seed=3))
    for g in range(7):
        for lab in (True, False):
            cell = (groups == g) & (y == lab)
            assert abs(m[cell].sum() - cell.sum() / 2) <= 1  # half of every cell, +-1 rounding


def test_report_keeps_the_tpr_at_a_tenth_of_a_percent_fpr():
    """2,000 negatives: FPR <= 0.1% admits the 2 highest-scoring negatives; the members above
    the third-highest negative count. Checked against sklearn's ROC curve."""
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(500, bool), np.zeros(2000, bool)]
    s = rng.normal(size=y.size) + 1.5 * y
    rep = evaluate_attack("x", s, y, threshold=0.0, settings=AttackSettings(n_boot=5))
    fpr, tpr, _ = roc_curve(y, s)
    assert rep.extra["tpr_at_0.1pct_fpr"] == pytest.approx(tpr[fpr <= 0.001].max())
    assert rep.extra["tpr_at_0.1pct_fpr"] < rep.tpr_at_fpr

"""Scoring an attack: AUC, balanced accuracy and TPR at a low FPR, with bootstrap intervals.

Every attack here produces one real-valued score per candidate (higher = "member" / "this is the
user's home") and is evaluated on a held-out evaluation split of the attack data only: whatever the
attacker fitted (a random forest, a decision threshold) was fitted on the other split. The
balanced-accuracy threshold therefore comes in as an argument (chosen on the attacker's split,
`best_threshold`), never from the evaluation labels.

Metrics (Carlini et al. 2022, "Membership inference attacks from first principles"):
- AUC: Mann-Whitney statistic with average ranks for ties (equals sklearn's roc_auc_score).
- balanced accuracy: (TPR + TNR) / 2 at the given threshold (score >= threshold -> member).
- TPR at FPR <= 1%: the largest true-positive rate over thresholds whose false-positive rate is at
  most `fpr` (no interpolation; with fewer than 100 negatives this is the TPR at FPR = 0). The
  TPR at FPR <= 0.1% (Carlini et al.'s other operating point) is kept as a point estimate in
  `extra["tpr_at_0.1pct_fpr"]`: with fewer than 1,000 negatives it is the TPR at FPR = 0.
Confidence intervals: percentile bootstrap, resampling members and non-members separately
(stratified, so every replicate has both classes), `n_boot` replicates from a seeded Generator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import rankdata

from udfs.errors import InvalidParameterError


@dataclass(frozen=True)
class AttackSettings:
    """How every attack of a run is scored: the share of candidates held out for evaluation
    (`attack_split`, by user), the seed of that split, of the attacker's own fits and of the
    bootstrap, the bootstrap replicates of each interval, the FPR of the TPR operating
    point, and the trees of the white-box attacker's random forest."""

    eval_fraction: float = 0.5
    seed: int = 0
    n_boot: int = 500
    fpr: float = 0.01
    forest_trees: int = 200


DEFAULT_SETTINGS = AttackSettings()


@dataclass(frozen=True)
class AttackReport:
    """Result of one attack on one model; `rows()` gives (metric, value) pairs for a table."""

    attack: str
    auc: float
    auc_ci: tuple[float, float]
    balanced_accuracy: float
    balanced_accuracy_ci: tuple[float, float]
    tpr_at_fpr: float
    tpr_at_fpr_ci: tuple[float, float]
    fpr: float
    n_members: int  # evaluation split only
    n_nonmembers: int
    threshold: float
    extra: dict | None = None

    def rows(self) -> list[tuple[str, float]]:
        p = self.attack
        pct = f"{self.fpr * 100:g}pct"
        out = [(f"{p}_auc", self.auc), (f"{p}_auc_lo", self.auc_ci[0]),
               (f"{p}_auc_hi", self.auc_ci[1]), (f"{p}_balanced_accuracy", self.balanced_accuracy),
               (f"{p}_balanced_accuracy_lo", self.balanced_accuracy_ci[0]),
               (f"{p}_balanced_accuracy_hi", self.balanced_accuracy_ci[1]),
               (f"{p}_tpr_at_{pct}_fpr", self.tpr_at_fpr),
               (f"{p}_tpr_at_{pct}_fpr_lo", self.tpr_at_fpr_ci[0]),
               (f"{p}_tpr_at_{pct}_fpr_hi", self.tpr_at_fpr_ci[1]),
               (f"{p}_n_eval", float(self.n_members + self.n_nonmembers))]
        return [(k, float(v)) for k, v in out]

    def to_dict(self) -> dict:
        return asdict(self)


def _check(scores, labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels).astype(bool)
    if s.ndim != 1 or s.shape != y.shape:
        raise InvalidParameterError(f"scores {s.shape} and labels {y.shape} must be equal 1-D")
    if not np.isfinite(s).all():
        raise InvalidParameterError("attack scores contain NaN/inf; fix the score function")
    if y.all() or not y.any():
        raise InvalidParameterError("need both members and non-members to score an attack")
    return s, y


def auc(scores, labels) -> float:
    s, y = _check(scores, labels)
    r = rankdata(s)
    n1, n0 = int(y.sum()), int((~y).sum())
    return float((r[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def tpr_at_fpr(scores, labels, fpr: float = 0.01) -> float:
    s, y = _check(scores, labels)
    neg = np.sort(s[~y])[::-1]
    k = int(np.floor(fpr * neg.size))  # at most k negatives may score >= threshold
    # threshold strictly above the (k+1)-th largest negative score
    thr = neg[k] if k < neg.size else -np.inf
    return float((s[y] > thr).mean())


def balanced_accuracy(scores, labels, threshold: float) -> float:
    s, y = _check(scores, labels)
    pred = s >= threshold
    return float(0.5 * (pred[y].mean() + (~pred[~y]).mean()))


def best_threshold(scores, labels) -> float:
    """Threshold maximising balanced accuracy on the given (attacker's own) data."""
    s, y = _check(scores, labels)
    cand = np.unique(s)
    order = np.argsort(s)
    s_sorted, y_sorted = s[order], y[order]
    n1, n0 = y.sum(), (~y).sum()
    # predicted member iff score >= c: members below c are misses, non-members below are hits
    below_pos = np.searchsorted(s_sorted, cand, side="left")
    cum_pos = np.concatenate([[0], np.cumsum(y_sorted)])
    tp = n1 - cum_pos[below_pos]
    tn = below_pos - cum_pos[below_pos]
    ba = 0.5 * (tp / n1 + tn / n0)
    return float(cand[int(np.argmax(ba))])


def _bootstrap(fn, s: np.ndarray, y: np.ndarray, n_boot: int, rng: np.random.Generator,
               level: float) -> tuple[float, float]:
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    vals = np.empty(n_boot)
    for b in range(n_boot):
        idx = np.concatenate([rng.choice(pos, pos.size), rng.choice(neg, neg.size)])
        vals[b] = fn(s[idx], y[idx])
    a = (1 - level) / 2
    lo, hi = np.quantile(vals, [a, 1 - a])
    return float(lo), float(hi)


def evaluate_attack(name: str, scores, labels, *, threshold: float,
                    settings: AttackSettings = DEFAULT_SETTINGS, level: float = 0.95,
                    extra: dict | None = None) -> AttackReport:
    """Report of an attack from its evaluation-split scores and true membership labels
    (`settings`: its fpr, n_boot and seed)."""
    fpr, n_boot, seed = settings.fpr, settings.n_boot, settings.seed
    s, y = _check(scores, labels)
    if not 0 < fpr < 1 or n_boot < 1 or not 0 < level < 1:
        raise InvalidParameterError("need 0 < fpr < 1, n_boot >= 1 and 0 < level < 1")
    rng = np.random.default_rng(seed)
    return AttackReport(
        name,
        auc(s, y), _bootstrap(auc, s, y, n_boot, rng, level),
        balanced_accuracy(s, y, threshold),
        _bootstrap(lambda a, b: balanced_accuracy(a, b, threshold), s, y, n_boot, rng, level),
        tpr_at_fpr(s, y, fpr), _bootstrap(lambda a, b: tpr_at_fpr(a, b, fpr), s, y, n_boot, rng,
                                          level),
        fpr, int(y.sum()), int((~y).sum()), float(threshold),
        {**(extra or {}), "tpr_at_0.1pct_fpr": tpr_at_fpr(s, y, 0.001)})


def attack_split(labels, groups, eval_fraction: float, seed: int) -> np.ndarray:
    """Boolean mask of the evaluation split: within each (group, label) cell a random
    `eval_fraction` (at least one element when the cell has two or more) goes to evaluation."""
    y = np.asarray(labels).astype(bool)
    g = np.asarray(groups)
    if not 0 < eval_fraction < 1:
        raise InvalidParameterError(f"eval_fraction={eval_fraction} must lie in (0, 1)")
    rng = np.random.default_rng(seed)
    mask = np.zeros(y.size, bool)
    keys = np.stack([np.unique(g, return_inverse=True)[1], y.astype(int)], 1)
    _, cell = np.unique(keys, axis=0, return_inverse=True)
    for c in range(int(cell.max()) + 1 if cell.size else 0):
        idx = rng.permutation(np.flatnonzero(cell == c))
        k = int(round(eval_fraction * idx.size))
        if idx.size >= 2:
            k = min(max(k, 1), idx.size - 1)
        mask[idx[:k]] = True
    return mask

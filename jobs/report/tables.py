"""The report's tables, one per family, from the long evaluation rows (pure pandas).

Families: LDP error of the collection settings (NE, PRQ, ACD, Kendall tau), mobility
divergences (every method against real days, next to the uniform baseline it has to beat),
attacks (membership inference, home re-identification, and both beside the utility of the same
run). Every table names methods through `jobs.report.names` (one name per mechanism) and orders
epsilon as a number. Input rows: (run_id, dataset, method, setting, metric, value).
"""

from __future__ import annotations

import math
import re

import pandas as pd

from jobs.report.names import (
    MECHANISM_NAMES,
    MODEL,
    REFERENCE,
    RELEASE,
    STUDY,
    SYNTHESIS_STUDY,
    canonical,
    epsilon_value,
)
from udfs.longrange import LONGRANGE_METRICS, TOP_MOTIFS

MOBILITY_METRICS = ("distance", "radius", "duration", "dailyloc", "grank", "irank")
MOBILITY_LABELS = {"distance": "Distance", "radius": "Radius", "duration": "Duration",
                   "dailyloc": "DailyLoc", "grank": "G-rank", "irank": "I-rank"}
LONGRANGE_LABELS = {"motifs": "Motifs (JSD)",
                    "motif_top_share": f"days in the real top-{TOP_MOTIFS} motifs",
                    "home_return": "Last return home (JSD)",
                    "end_home_gap": "End-at-home gap", "tstr_acc1": "TSTR acc@1",
                    "tstr_acc5": "TSTR acc@5"}
MAX_JSD = math.log(2)  # a JSD in nats is at most ln 2: the two histograms share no mass
AT_MAX = 0.99 * MAX_JSD
# attack metric names (jobs/evaluate/attacks.py): <attack>_<figure>[_lo|_hi]
MEMBERSHIP_METRIC = re.compile(
    r"^(?P<attack>whitebox_mia|lira_policy_offline|lira_policy|lira_critic)_"
    r"(?P<figure>auc|balanced_accuracy|tpr_at_[0-9.]+pct_fpr|n_eval)(?P<side>_lo|_hi)?$")
ATTACK_CONTEXT = ("attack_users", "lira_shadows")
ATTACK_LABELS = {"whitebox_mia": "white-box MIA (critics)", "lira_policy": "LiRA, policy",
                 "lira_policy_offline": "LiRA, policy, offline", "lira_critic": "LiRA, critic"}
UNIFORM_BASELINE = "uniform_random"  # jobs.evaluate.stage's trivial generator beside synthetic days
SOURCE_ORDER = {REFERENCE: 0, MODEL: 1, RELEASE: 2, STUDY: 3}
NAME_ORDER = {name: i for i, name in enumerate(MECHANISM_NAMES.values())}


def is_attack_metric(metric: pd.Series) -> pd.Series:
    """Rows that are attack figures (shown in the attack tables, not in the utility tables)."""
    m = metric.astype(str)
    return (m.str.match(MEMBERSHIP_METRIC.pattern) | m.str.startswith("home_reid_")
            | m.isin(ATTACK_CONTEXT))


def named(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with `name`, `source` (canonical) and a numeric `epsilon` column."""
    parts = rows["method"].map(canonical)
    return rows.assign(name=parts.map(lambda p: p[0]), source=parts.map(lambda p: p[1]),
                       epsilon=rows["setting"].map(epsilon_value))


def _wide(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Long rows -> one row per `keys` group that occurs, one column per metric (mean)."""
    if rows.empty:
        return pd.DataFrame(columns=keys)
    wide = (rows.groupby(keys, dropna=False, sort=False)["value"].mean()
            .unstack("metric").reset_index())
    wide.columns.name = None
    return wide


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    """References, models, the published release, then the study; by name; epsilon ascending."""
    return frame.assign(
        _s=frame["source"].map(SOURCE_ORDER),
        _n=frame["name"].map(lambda n: NAME_ORDER.get(n, len(NAME_ORDER))),
    ).sort_values(["_s", "_n", "name", "epsilon"], na_position="first").drop(
        columns=["_s", "_n"]).reset_index(drop=True)


def ldp_error_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """LDP error per (mechanism, source, epsilon): NE, PRQ@d, ACD, Kendall tau columns."""
    rows = named(evaluation)
    rows = rows[rows["source"].isin([STUDY, RELEASE])
                & ~rows["metric"].isin([*MOBILITY_METRICS, *LONGRANGE_METRICS])
                & ~is_attack_metric(rows["metric"])]
    if rows.empty:
        return pd.DataFrame()
    wide = _ordered(_wide(rows, ["name", "source", "epsilon", "metric"]))
    metrics = [c for c in wide.columns if c not in ("name", "source", "epsilon")]
    first = [m for m in ("NE",) if m in metrics]
    return wide[["name", "source", "epsilon", *first, *sorted(set(metrics) - set(first))]]


def mobility_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Divergences (JSD, nats, lower is better) per (method, source, epsilon), with `baseline`:
    the uniform row each one is judged against (uniform random days for a synthetic model,
    the UNIFORM LDP mechanism at the same epsilon for a perturbed setting)."""
    return _metrics_table(evaluation, MOBILITY_METRICS)


def longrange_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """The long-range statistics (`udfs.longrange`) per (method, source, epsilon): motif and
    home-return JSDs and the end-at-home gap (lower is better), the share of days in the real
    days' top motifs (closest to the real training days' row is best) and the next-place
    accuracies trained on the row's days (higher is better; the real training days' row is
    the reference, uniform random days the floor)."""
    return _metrics_table(evaluation, LONGRANGE_METRICS)


def _metrics_table(evaluation: pd.DataFrame, metrics: tuple[str, ...]) -> pd.DataFrame:
    """One row per (method, source, epsilon), one column per metric of `metrics` present."""
    rows = named(evaluation)
    rows = rows[rows["metric"].isin(metrics)]
    if rows.empty:
        return pd.DataFrame()
    wide = _ordered(_wide(rows, ["name", "source", "epsilon", "metric"]))
    cols = [m for m in metrics if m in wide.columns]
    return wide[["name", "source", "epsilon", *cols]]


def baseline_row(table: pd.DataFrame, row: pd.Series) -> pd.Series | None:
    """The uniform row `row` has to beat, or None (references, or no such row evaluated)."""
    if row["source"] == MODEL:
        base = table[table["name"] == canonical(UNIFORM_BASELINE)[0]]
    elif row["source"] in (STUDY, RELEASE) and row["name"] != MECHANISM_NAMES["uniform"]:
        base = table[(table["name"] == MECHANISM_NAMES["uniform"])
                     & (table["epsilon"] == row["epsilon"])]
    else:
        return None
    return None if base.empty else base.iloc[0]


def against_uniform(table: pd.DataFrame) -> pd.DataFrame:
    """Per row of the mobility table that has a uniform row to beat: the metrics it beats it
    on, the ones it does not, the ones at the maximum divergence ln 2, and a plain verdict.

    A private model (or mechanism) that does not beat uniform on a statistic has kept nothing
    usable of it at its epsilon; the report says so rather than leaving it to the reader."""
    cols = ["name", "source", "epsilon", "beats uniform on", "loses to uniform on",
            "at the maximum ln 2", "verdict"]
    out = []
    if table.empty:
        return pd.DataFrame(columns=cols)
    metrics = [m for m in MOBILITY_METRICS if m in table.columns]
    for _, row in table.iterrows():
        base = baseline_row(table, row)
        if base is None:
            continue
        shared = [m for m in metrics if pd.notna(row[m]) and pd.notna(base[m])]
        wins = [m for m in shared if row[m] < base[m] and row[m] < AT_MAX]  # ln 2 beats nothing
        losses = [m for m in shared if m not in wins]
        at_max = [m for m in metrics if pd.notna(row[m]) and row[m] >= AT_MAX]
        if not shared:
            verdict = "not comparable (no shared statistic)"
        elif not losses:
            verdict = f"beats uniform on all {len(shared)} statistics"
        elif not wins:
            verdict = "NO BETTER THAN UNIFORM on any statistic"
        else:
            verdict = f"no better than uniform on {len(losses)} of {len(shared)} statistics"
        label = [MOBILITY_LABELS[m] for m in wins], [MOBILITY_LABELS[m] for m in losses]
        out.append((row["name"], row["source"], row["epsilon"], ", ".join(label[0]),
                    ", ".join(label[1]), ", ".join(MOBILITY_LABELS[m] for m in at_max),
                    verdict))
    return pd.DataFrame(out, columns=cols)


def _ci(value: float, lo: float, hi: float) -> str | None:
    return None if pd.isna(value) else f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def membership_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, epsilon, attack): AUC, balanced accuracy and TPR at low FPR, each
    with its 95% bootstrap interval, and how many candidate days the figures come from."""
    parts = evaluation["metric"].astype(str).str.extract(MEMBERSHIP_METRIC.pattern)
    rows = evaluation.join(parts).dropna(subset=["attack"])
    if rows.empty:
        return pd.DataFrame()
    rows = named(rows.assign(metric=rows["figure"] + rows["side"].fillna("")))
    wide = _wide(rows, ["name", "epsilon", "attack", "metric"])
    tpr = next((c for c in wide.columns if str(c).startswith("tpr_at_")
                and not str(c).endswith(("_lo", "_hi"))), None)
    pct = tpr[len("tpr_at_"):-len("pct_fpr")] if tpr else "1"
    for fig in ("auc", "balanced_accuracy"):  # an attack may report only some figures
        for col in (fig, f"{fig}_lo", f"{fig}_hi"):
            if col not in wide.columns:
                wide[col] = math.nan
    n_eval = wide["n_eval"] if "n_eval" in wide.columns else pd.Series(pd.NA, index=wide.index)
    out = pd.DataFrame({
        "model": wide["name"], "epsilon": wide["epsilon"],
        "attack": wide["attack"].map(lambda a: ATTACK_LABELS.get(a, a)),
        "AUC [95% CI]": [_ci(*v) for v in wide[["auc", "auc_lo", "auc_hi"]].to_numpy()],
        "balanced accuracy [95% CI]": [
            _ci(*v) for v in wide[["balanced_accuracy", "balanced_accuracy_lo",
                                   "balanced_accuracy_hi"]].to_numpy()],
        f"TPR at {pct}% FPR [95% CI]": [
            _ci(*v) for v in wide[[tpr, f"{tpr}_lo", f"{tpr}_hi"]].to_numpy()] if tpr else None,
        "days evaluated": n_eval.astype("Int64"),
    })
    order = list(ATTACK_LABELS.values())
    return out.assign(_a=out["attack"].map(lambda a: order.index(a) if a in order else 99)
                      ).sort_values(["model", "epsilon", "_a"]).drop(columns="_a").reset_index(
        drop=True)


def home_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Home re-identification per published view: share of users whose inferred home lies
    within 1 km of the true one (95% interval) and the median error; raw first, the UNIFORM
    mechanism (chance) last."""
    home = evaluation[evaluation["metric"].astype(str).str.startswith("home_reid_")]
    if home.empty:
        return pd.DataFrame()
    wide = _wide(named(home), ["name", "source", "epsilon", "metric"]).dropna(
        subset=["home_reid_share_within_km"])
    ends = {canonical("raw")[0]: 0, MECHANISM_NAMES["uniform"]: 2}
    wide = wide.assign(_o=wide["name"].map(lambda m: ends.get(m, 1))).sort_values(
        ["_o", "name", "source", "epsilon"]).drop(columns="_o")
    median = (wide["home_reid_median_error_km"] if "home_reid_median_error_km" in wide.columns
              else pd.Series(math.nan, index=wide.index))
    return pd.DataFrame({
        "published view": wide["name"], "source": wide["source"], "epsilon": wide["epsilon"],
        "home within 1 km [95% CI]": [
            _ci(*v) for v in wide[["home_reid_share_within_km", "home_reid_share_lo",
                                   "home_reid_share_hi"]].to_numpy()],
        "median error (km)": median,
    }).reset_index(drop=True)


def utility_and_attacks(evaluation: pd.DataFrame) -> pd.DataFrame:
    """For each (model, epsilon) that was attacked: its mobility divergences next to the
    membership AUCs of the same run, so privacy and utility are read on one line."""
    parts = evaluation["metric"].astype(str).str.extract(MEMBERSHIP_METRIC.pattern)
    auc = evaluation[(parts["figure"] == "auc") & parts["side"].isna()]
    if auc.empty:
        return pd.DataFrame()
    keep = pd.concat([evaluation[evaluation["metric"].isin(MOBILITY_METRICS)],
                      auc.assign(metric=parts.loc[auc.index, "attack"]
                                 .map(lambda a: f"{ATTACK_LABELS.get(a, a)} AUC"))])
    wide = _wide(named(keep), ["name", "epsilon", "metric"])
    cols = [f"{v} AUC" for v in ATTACK_LABELS.values() if f"{v} AUC" in wide.columns]
    wide = wide.dropna(subset=cols, how="all")  # attacked (model, epsilon) pairs only
    cols = [m for m in MOBILITY_METRICS if m in wide.columns] + cols
    return wide[["name", "epsilon", *cols]].reset_index(drop=True)


def split_synthesis_study(evaluation: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every other row, the synthesis study's rows): the study's models are never released,
    so its rows get a table of their own and never mix with the evaluated models' rows."""
    if evaluation.empty:
        return evaluation, evaluation
    mask = evaluation["method"].map(lambda m: canonical(m)[1] == SYNTHESIS_STUDY)
    return evaluation[~mask], evaluation[mask]


def synthesis_study_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per method of the synthesis study (references first: real training days, the
    floor; uniform random days, the trivial generator), one column per statistic (mean over
    the study's seeds) and `<statistic>_sd` beside it when it ran several seeds."""
    if rows.empty:
        return pd.DataFrame()
    wide = _wide(named(rows), ["name", "epsilon", "metric"])
    refs = wide["epsilon"].isna()
    wide = pd.concat([wide[refs].sort_values("name", ascending=False), wide[~refs]])
    means = [c for c in wide.columns if c not in ("name", "epsilon") and not c.endswith("_sd")]
    known = (*MOBILITY_METRICS, *LONGRANGE_METRICS, "epsilon_spent")
    ordered = ([m for m in known[:-1] if m in means]
               + sorted(m for m in means if m not in known)
               + [m for m in ("epsilon_spent",) if m in means])
    cols = [c for m in ordered for c in (m, f"{m}_sd") if c in wide.columns]
    return wide[["name", "epsilon", *cols]].reset_index(drop=True)


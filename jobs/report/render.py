"""Render the run report: a self-contained HTML page with PNG figures, and figures.json.

Pure pandas + matplotlib (no Spark): `jobs/report/stage.py` collects the small tables and calls
`render_report`. Every number drawn is also written to figures.json, so a reader can check a bar
against its value and a script can diff two runs.
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

MOBILITY_METRICS = ("distance", "radius", "duration", "dailyloc", "grank", "irank")
# attack metric names (jobs/evaluate/attacks.py): <attack>_<figure>[_lo|_hi]
MEMBERSHIP_METRIC = re.compile(
    r"^(?P<attack>whitebox_mia|lira_policy_offline|lira_policy|lira_critic)_"
    r"(?P<figure>auc|balanced_accuracy|tpr_at_[0-9.]+pct_fpr|n_eval)(?P<side>_lo|_hi)?$")
ATTACK_CONTEXT = ("attack_users", "lira_shadows")
ATTACK_LABELS = {"whitebox_mia": "white-box MIA (critics)", "lira_policy": "LiRA, policy",
                 "lira_policy_offline": "LiRA, policy, offline", "lira_critic": "LiRA, critic"}
UNIFORM_BASELINE = "uniform_random"  # jobs.evaluate.stage's trivial generator beside synthetic days
KIND_STYLE = {
    "real": ("#1b9e77", "o"),
    "perturbed": ("#d95f02", "x"),
    "synthetic": ("#7570b3", "^"),
}


@dataclass
class ReportInputs:
    """The small tables a report is drawn from (already collected to the driver)."""

    dataset: str
    evaluation: pd.DataFrame  # run_id, dataset, method, setting, metric, value
    map_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # kind, who, lat, lon
    training: pd.DataFrame = field(default_factory=pd.DataFrame)  # round, metric, value
    privacy: pd.DataFrame = field(default_factory=pd.DataFrame)  # source, setting, epsilon, delta
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_id, stage, status, wall_s


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plot_ne_vs_epsilon(evaluation: pd.DataFrame) -> str | None:
    """NE against epsilon, one line per collection mechanism."""
    ne = evaluation[evaluation["metric"].str.lower() == "ne"].copy()
    if ne.empty:
        return None
    ne["epsilon"] = pd.to_numeric(ne["setting"], errors="coerce")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for method, part in ne.dropna(subset=["epsilon"]).groupby("method"):
        part = part.groupby("epsilon", as_index=False)["value"].mean().sort_values("epsilon")
        ax.plot(part["epsilon"], part["value"], marker="o", label=str(method).upper())
    ax.set_xlabel("epsilon per trajectory")
    ax.set_ylabel("normalised error (NE)")
    ax.set_xscale("log")
    ax.set_title("LDP collection: NE against epsilon (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def plot_divergences(evaluation: pd.DataFrame) -> str | None:
    """Bar chart of the mobility JSDs per method and setting."""
    jsd = evaluation[evaluation["metric"].isin(MOBILITY_METRICS)]
    if jsd.empty:
        return None
    setting = pd.to_numeric(jsd["setting"], errors="coerce").map(
        lambda v: "" if pd.isna(v) else f" {v:.3g}"
    )
    jsd = jsd.assign(label=jsd["method"].astype(str) + setting)
    table = jsd.pivot_table(index="metric", columns="label", values="value", aggfunc="mean")
    table = table.reindex([m for m in MOBILITY_METRICS if m in table.index])
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(table.index) + 2), 3.8))
    table.plot.bar(ax=ax, rot=0, width=0.8)
    ax.set_ylabel("Jensen-Shannon divergence (nats)")
    ax.set_title("Mobility statistics against real days (lower is better)")
    ax.legend(fontsize=7, ncols=2)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def plot_map(points: pd.DataFrame) -> str | None:
    """Real, perturbed and synthetic points of a few pseudonymous users."""
    if points.empty:
        return None
    fig, ax = plt.subplots(figsize=(6, 5))
    for kind, part in points.groupby("kind"):
        colour, marker = KIND_STYLE.get(str(kind), ("#666666", "."))
        ax.scatter(part["lon"], part["lat"], s=14, c=colour, marker=marker, label=kind, alpha=0.7)
    ax.set_xlabel("longitude")
    ax.set_ylabel("latitude")
    ax.set_title("Points of a few users: real vs perturbed vs synthetic")
    ax.legend()
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_training(training: pd.DataFrame) -> str | None:
    """Training curves: one panel per tracked quantity (reward, losses, epsilon spent)."""
    if training.empty:
        return None
    metrics = list(dict.fromkeys(training["metric"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics), 3), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        part = training[training["metric"] == metric].sort_values("round")
        ax.plot(part["round"], part["value"], marker=".")
        ax.set_title(metric)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    fig.suptitle("Training")
    return _png(fig)


def _table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>(none)</p>"
    return frame.to_html(index=False, float_format=lambda v: f"{v:.4g}", border=0, classes="t")


def is_attack_metric(metric: pd.Series) -> pd.Series:
    """Rows that are attack figures (shown in the attack tables, not in the metric table)."""
    m = metric.astype(str)
    return (m.str.match(MEMBERSHIP_METRIC.pattern) | m.str.startswith("home_reid_")
            | m.isin(ATTACK_CONTEXT))


def _ci(value: float, lo: float, hi: float) -> str:
    return "" if pd.isna(value) else f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def membership_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, setting, attack): AUC, balanced accuracy and TPR at low FPR, each
    with its 95% bootstrap interval, and how many candidate days the figures come from."""
    parts = evaluation["metric"].astype(str).str.extract(MEMBERSHIP_METRIC.pattern)
    rows = evaluation.join(parts).dropna(subset=["attack"])
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(key=rows["figure"] + rows["side"].fillna(""),
                       setting=pd.to_numeric(rows["setting"], errors="coerce"))
    wide = rows.pivot_table(index=["method", "setting", "attack"], columns="key",
                            values="value", aggfunc="mean").reset_index()
    tpr = next((c for c in wide.columns if str(c).startswith("tpr_at_")
                and not str(c).endswith(("_lo", "_hi"))), None)
    pct = tpr[len("tpr_at_"):-len("pct_fpr")] if tpr else "1"
    out = pd.DataFrame({
        "method": wide["method"], "setting": wide["setting"],
        "attack": wide["attack"].map(lambda a: ATTACK_LABELS.get(a, a)),
        "AUC [95% CI]": [_ci(*v) for v in wide[["auc", "auc_lo", "auc_hi"]].to_numpy()],
        "balanced accuracy [95% CI]": [
            _ci(*v) for v in wide[["balanced_accuracy", "balanced_accuracy_lo",
                                   "balanced_accuracy_hi"]].to_numpy()],
        f"TPR at {pct}% FPR [95% CI]": [
            _ci(*v) for v in wide[[tpr, f"{tpr}_lo", f"{tpr}_hi"]].to_numpy()] if tpr else "",
        "days evaluated": wide.get("n_eval", pd.Series(dtype=float)).astype("Int64"),
    })
    order = list(ATTACK_LABELS.values())
    return out.assign(_a=out["attack"].map(order.index)).sort_values(
        ["method", "setting", "_a"]).drop(columns="_a")


def home_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Home re-identification per published view: share of users whose inferred home lies
    within 1 km of the true one (95% interval) and the median error."""
    home = evaluation[evaluation["metric"].astype(str).str.startswith("home_reid_")]
    if home.empty:
        return pd.DataFrame()
    wide = _wide(home).dropna(subset=["home_reid_share_within_km"])
    ends = {"raw": 0, "perturbed_uniform": 2}  # the two ends of the scale first and last
    wide = wide.assign(_o=wide["method"].map(lambda m: ends.get(m, 1))).sort_values(
        ["_o", "method", "setting"]).drop(columns="_o")
    return pd.DataFrame({
        "published view": wide["method"], "epsilon": wide["setting"],
        "home within 1 km [95% CI]": [
            _ci(*v) for v in wide[["home_reid_share_within_km", "home_reid_share_lo",
                                   "home_reid_share_hi"]].to_numpy()],
        "median error (km)": wide.get("home_reid_median_error_km"),
    })


def utility_and_attacks(evaluation: pd.DataFrame) -> pd.DataFrame:
    """For each (method, setting) that was attacked: its mobility divergences next to the
    membership AUCs of the same run, so privacy and utility are read on one line."""
    parts = evaluation["metric"].astype(str).str.extract(MEMBERSHIP_METRIC.pattern)
    auc = evaluation[(parts["figure"] == "auc") & parts["side"].isna()]
    if auc.empty:
        return pd.DataFrame()
    keep = pd.concat([evaluation[evaluation["metric"].isin(MOBILITY_METRICS)],
                      auc.assign(metric=parts.loc[auc.index, "attack"]
                                 .map(lambda a: f"{ATTACK_LABELS.get(a, a)} AUC"))])
    wide = _wide(keep)
    cols = [f"{v} AUC" for v in ATTACK_LABELS.values() if f"{v} AUC" in wide.columns]
    wide = wide.dropna(subset=cols, how="all")  # attacked (method, setting) pairs only
    cols = [m for m in MOBILITY_METRICS if m in wide.columns] + cols
    return wide[["method", "setting", *cols]]


def baseline_verdicts(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Per synthetic model of an evaluate run: the mobility metrics on which its days are closer
    to the real held-out days than the same run's uniform random days, and a plain verdict.

    A private model that does not beat uniform on a metric has learnt nothing usable about it
    at its epsilon; the report says so rather than leaving it to a reader to compare rows."""
    from models.config import SCHEMES

    cols = ["method", "setting", "beats uniform on", "loses to uniform on", "verdict"]
    rows = evaluation[evaluation["metric"].isin(MOBILITY_METRICS)]
    out = []
    for _run_id, run in rows.groupby("run_id"):
        base = run[run["method"] == UNIFORM_BASELINE].set_index("metric")["value"]
        if base.empty:
            continue
        for (method, setting), model in run[run["method"].isin(SCHEMES)].groupby(
                ["method", "setting"], dropna=False):
            vals = model.set_index("metric")["value"]
            shared = [m for m in MOBILITY_METRICS if m in vals.index and m in base.index]
            wins = [m for m in shared if vals[m] < base[m]]
            losses = [m for m in shared if m not in wins]
            verdict = ("beats uniform random on every metric" if not losses else
                       f"does NOT beat uniform random on {len(losses)} of {len(shared)} metrics")
            out.append((method, setting, ", ".join(wins), ", ".join(losses), verdict))
    return pd.DataFrame(out, columns=cols)


def _wide(rows: pd.DataFrame) -> pd.DataFrame:
    """(method, setting, metric, value) rows -> one row per (method, setting) that occurs
    (a setting may be missing, as for `raw`), one column per metric."""
    rows = rows.assign(setting=pd.to_numeric(rows["setting"], errors="coerce"))
    wide = (rows.groupby(["method", "setting", "metric"], dropna=False)["value"].mean()
            .unstack("metric").reset_index())
    wide.columns.name = None
    return wide


def metric_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Every utility metric per method and setting, one row per (method, setting); attack
    figures have their own tables."""
    if evaluation.empty:
        return evaluation
    evaluation = evaluation[~is_attack_metric(evaluation["metric"])]
    if evaluation.empty:
        return evaluation
    wide = evaluation.pivot_table(
        index=["method", "setting"], columns="metric", values="value", aggfunc="mean"
    ).reset_index()
    wide.columns.name = None
    order = pd.to_numeric(wide["setting"], errors="coerce")
    return wide.assign(_o=order).sort_values(["method", "_o", "setting"]).drop(columns="_o")


def render_report(inputs: ReportInputs, out_dir: Path) -> tuple[Path, Path]:
    """Write report.html and figures.json into out_dir; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {
        "Collection: NE against epsilon": plot_ne_vs_epsilon(inputs.evaluation),
        "Mobility divergences": plot_divergences(inputs.evaluation),
        "Map of a few users": plot_map(inputs.map_points),
        "Training curves": plot_training(inputs.training),
    }
    membership = membership_table(inputs.evaluation)
    home = home_table(inputs.evaluation)
    verdicts = baseline_verdicts(inputs.evaluation)
    sections = [
        f"<h1>trajpriv report: {html.escape(inputs.dataset)}</h1>",
        "<h2>Every utility metric per method and setting</h2>",
        _table_html(metric_table(inputs.evaluation)),
        "<h2>Synthetic days against uniform random</h2>",
        "<p>Per trained model: the divergences (lower is better) on which its synthetic days "
        "are closer to the real held-out days than days drawn uniformly from the public map "
        "(<code>uniform_random</code> above).</p>",
        _table_html(verdicts),
        "<h2>Utility and attacks of the same run</h2>",
        "<p>Mobility divergences (lower is better) next to the membership-inference AUCs of the "
        "same trained model (0.5 = the attacker cannot tell training days from held-out days "
        "of the same users). Run <code>trajpriv evaluate --attacks</code> to fill this.</p>",
        _table_html(utility_and_attacks(inputs.evaluation)),
        "<h2>Membership inference</h2>",
        "<p>Figures on the attacker's held-out half of the candidate days; an interval that "
        "contains 0.5 (AUC, balanced accuracy) or the FPR itself (TPR) means no signal found "
        "at this sample size.</p>",
        _table_html(membership),
        "<h2>Home re-identification</h2>",
        "<p>Read between raw (no protection) and uniform (chance from the public map).</p>",
        _table_html(home),
        "<h2>Privacy spent</h2>",
        _table_html(inputs.privacy),
    ]
    for title, data in images.items():
        sections.append(f"<h2>{html.escape(title)}</h2>")
        if data is None:
            sections.append("<p>(no data for this figure in this run)</p>")
        else:
            sections.append(f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}">')
    sections += ["<h2>Stage runs</h2>", _table_html(inputs.runs)]
    style = (
        "body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table.t{border-collapse:collapse;font-size:13px}"
        "table.t td,table.t th{border:1px solid #ccc;padding:3px 6px}"
        "img{max-width:100%}"
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>trajpriv report</title>"
        f"<style>{style}</style></head><body>" + "\n".join(sections) + "</body></html>"
    )
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    figures: dict[str, Any] = {
        "dataset": inputs.dataset,
        "evaluation": inputs.evaluation.to_dict(orient="records"),
        "training": inputs.training.to_dict(orient="records"),
        "privacy": inputs.privacy.to_dict(orient="records"),
        "against_uniform": verdicts.to_dict(orient="records"),
        "attacks": {"membership": membership.to_dict(orient="records"),
                    "home": home.to_dict(orient="records")},
        "map_points": int(len(inputs.map_points)),
        "figures_drawn": [title for title, data in images.items() if data is not None],
    }
    json_path = out_dir / "figures.json"
    json_path.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    return html_path, json_path

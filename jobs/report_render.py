"""Render the run report: a self-contained HTML page with PNG figures, and figures.json.

Pure pandas + matplotlib (no Spark): `jobs/report.py` collects the small tables and calls
`render_report`. Every number drawn is also written to figures.json, so a reader can check a bar
against its value and a script can diff two runs.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

MOBILITY_METRICS = ("distance", "radius", "duration", "dailyloc", "grank", "irank")
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


def metric_table(evaluation: pd.DataFrame) -> pd.DataFrame:
    """Every metric per method and setting, one row per (method, setting)."""
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
    sections = [
        f"<h1>trajpriv report: {html.escape(inputs.dataset)}</h1>",
        "<h2>Every metric per method and setting</h2>",
        _table_html(metric_table(inputs.evaluation)),
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
        "map_points": int(len(inputs.map_points)),
        "figures_drawn": [title for title, data in images.items() if data is not None],
    }
    json_path = out_dir / "figures.json"
    json_path.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    return html_path, json_path

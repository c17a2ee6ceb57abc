"""Render the run report: one self-contained HTML page with PNG figures, and figures.json.

Pure pandas + matplotlib (no Spark): `jobs/report/stage.py` collects the small tables and calls
`render_report`. Top to bottom: a header (dataset, runs, config hash, privacy unit and what a
user spent), a summary in words with the warnings, then one section per family (LDP error,
mobility divergences, attacks, privacy spent), the map and the training curves. Every number
shown is also in figures.json, written as strict JSON (missing = null, never NaN), so a script
can diff two runs.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from jobs.report.figures import plot_divergences, plot_ldp_error, plot_map, plot_training
from jobs.report.names import display
from jobs.report.summary import (
    ldp_sentences,
    mobility_sentences,
    privacy_sentence,
    synthesis_sentences,
)
from jobs.report.tables import (
    AT_MAX,
    LONGRANGE_LABELS,
    MOBILITY_LABELS,
    MOBILITY_METRICS,
    against_uniform,
    baseline_row,
    home_table,
    ldp_error_table,
    longrange_table,
    membership_table,
    mobility_table,
    split_synthesis_study,
    synthesis_study_table,
    utility_and_attacks,
)

MISSING = "\u2014"  # an em dash where a table has no figure (never "NaN")
STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:16px 24px;max-width:1320px;
 color:#222;line-height:1.45}
h1{margin:0 0 .3em}h2{margin-top:1.6em;border-bottom:2px solid #ddd;padding-bottom:.2em}
header.meta{background:#f4f6f8;border:1px solid #d8dde3;border-radius:6px;padding:10px 16px}
header.meta dl{display:grid;grid-template-columns:max-content 1fr;gap:3px 18px;margin:0}
header.meta dt{font-weight:600}header.meta dd{margin:0}
.warn{background:#fff4e5;border-left:6px solid #e67700;padding:8px 14px;margin:10px 0}
.warn ul{margin:4px 0 0 0}
table.t{border-collapse:collapse;font-size:14px;margin:8px 0}
table.t td,table.t th{border:1px solid #ccc;padding:3px 8px;text-align:right}
table.t th{background:#f4f6f8}table.t td.s{text-align:left}
td.bad{background:#fde0dc}td.max{background:#f8b4aa;font-weight:700}
figure{margin:12px 0}figure img{width:100%;height:auto;display:block}
figcaption{color:#555;font-size:14px}
code{background:#f4f6f8;padding:0 3px}
"""


@dataclass
class ReportInputs:
    """The small tables a report is drawn from (already collected to the driver)."""

    dataset: str
    evaluation: pd.DataFrame  # run_id, dataset, method, setting, metric, value
    map_points: pd.DataFrame = field(default_factory=pd.DataFrame)  # kind, who, traj, seq, lat, lon
    training: pd.DataFrame = field(default_factory=pd.DataFrame)  # round, metric, value
    privacy: pd.DataFrame = field(default_factory=pd.DataFrame)  # source, setting, epsilon, ...
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_id, stage, status, wall_s
    header: dict[str, Any] = field(default_factory=dict)  # see `_header_html`
    locations: pd.DataFrame = field(default_factory=pd.DataFrame)  # the public set: lat, lon


def _missing(value: Any) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float | np.floating) and not math.isfinite(float(value))


def jsonable(value: Any) -> Any:
    """A value strict JSON can hold: NaN / inf / NA become null, numpy scalars plain."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return [jsonable(r) for r in value.to_dict(orient="records")]
    if _missing(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dt.date | dt.datetime | pd.Timestamp):
        return value.isoformat()
    if isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _cell(column: str, value: Any) -> str:
    if _missing(value):
        return MISSING
    if column == "epsilon" and isinstance(value, float | int | np.number):
        return f"{float(value):.3g}"
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}"
    return html.escape(str(value))


def table_html(frame: pd.DataFrame, css=None, labels: dict[str, str] | None = None) -> str:
    """A plain HTML table: missing cells as a dash, numbers right-aligned, text left;
    `css(column, row) -> class` marks cells (a model losing to uniform, say)."""
    if frame is None or frame.empty:
        return "<p>(none in this run)</p>"
    labels = labels or {}
    head = "".join(f"<th>{html.escape(labels.get(str(c), str(c)))}</th>" for c in frame.columns)
    body = []
    for _, row in frame.iterrows():
        cells = []
        for col in frame.columns:
            value = row[col]
            cls = (css(col, row) if css else "") or ""
            if isinstance(value, str):
                cls = f"{cls} s".strip()
            attr = f' class="{cls}"' if cls else ""
            cells.append(f"<td{attr}>{_cell(str(col), value)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="t"><tr>{head}</tr>' + "".join(body) + "</table>"


def _mobility_css(table: pd.DataFrame):
    """Cells that lose to the row's uniform baseline (light red) or sit at ln 2 (dark red)."""
    def css(col: str, row: pd.Series) -> str:
        if col not in MOBILITY_METRICS or _missing(row[col]):
            return ""
        if row[col] >= AT_MAX:
            return "max"
        base = baseline_row(table, row)
        if base is not None and not _missing(base[col]) and row[col] >= base[col]:
            return "bad"
        return ""

    return css


def _figure(title: str, drawn, caption: str) -> str:
    if drawn is None:
        return f"<p>(no data for the figure &ldquo;{html.escape(title)}&rdquo; in this run)</p>"
    return (f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{drawn[0]}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _warnings_html(warnings: list[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    return f'<div class="warn"><strong>&#9888; Warning</strong><ul>{items}</ul></div>'


def _header_html(dataset: str, header: dict[str, Any]) -> str:
    rows = [("Dataset", dataset)]
    if header.get("generated_at"):
        rows.append(("Generated", str(header["generated_at"])))
    if header.get("config_hash"):
        rows.append(("Config hash", f"<code>{html.escape(str(header['config_hash']))}</code>"))
    runs = header.get("runs") or []
    if runs:
        rows.append(("Runs", "<br>".join(
            f"{html.escape(str(r.get('stage')))}: <code>{html.escape(str(r.get('run_id')))}"
            f"</code>" for r in runs)))
    if header.get("release"):
        r = header["release"]
        rows.append(("Published release",
                     html.escape(f"{display(str(r['mechanism']))} at epsilon "
                                 f"{float(r['epsilon']):g} ({r.get('release_id', '')})")))
    if header.get("privacy_unit"):
        rows.append(("Privacy unit", html.escape(
            f"one {header['privacy_unit']}; budget epsilon {header.get('budget', 0):g} per "
            f"{header.get('window_days', '?')}-day window")))
    spent = privacy_sentence(header)
    if spent:
        rows.append(("Spent per " + str(header.get("privacy_unit", "user")),
                     html.escape(spent.removeprefix("Privacy: "))))
    body = "".join(f"<dt>{k}</dt><dd>{v if k != 'Dataset' else html.escape(v)}</dd>"
                   for k, v in rows)
    return f'<header class="meta"><dl>{body}</dl></header>'


def render_report(inputs: ReportInputs, out_dir: Path) -> tuple[Path, Path]:
    """Write report.html and figures.json into out_dir; returns both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    r = _report_parts(inputs)
    sections = [*_summary_section(r), *_ldp_section(r), *_synthesis_section(r),
                *_mobility_section(r), *_attacks_section(r), *_closing_sections(r)]
    page = ("<!doctype html><html><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width'>"
            f"<title>trajpriv report: {html.escape(inputs.dataset)}</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(sections) + "</body></html>")
    html_path = out_dir / "report.html"
    html_path.write_text(page, encoding="utf-8")
    json_path = out_dir / "figures.json"
    json_path.write_text(json.dumps(_figures(r), indent=1, allow_nan=False), encoding="utf-8")
    return html_path, json_path


def _report_parts(inputs: ReportInputs) -> SimpleNamespace:
    """Every table, sentence, warning and chart of the report, computed once: the page's
    sections and figures.json read them."""
    ev, synth_rows = split_synthesis_study(inputs.evaluation)
    synthesis = synthesis_study_table(synth_rows)
    ldp = ldp_error_table(ev)
    mobility = mobility_table(ev)
    longrange = longrange_table(ev)
    verdicts = against_uniform(mobility)
    membership, home, joint = membership_table(ev), home_table(ev), utility_and_attacks(ev)
    ldp_words, ldp_warn = ldp_sentences(ldp)
    mob_words, mob_warn = mobility_sentences(mobility, verdicts)
    spent = privacy_sentence(inputs.header)
    synth_words = synthesis_sentences(synthesis)
    words = ldp_words + synth_words + mob_words + ([spent] if spent else [])
    warnings = ldp_warn + mob_warn
    study_warn = [w for w in warnings if "(study)" in w]
    summary_warn = [w for w in warnings if w not in study_warn] + (
        [f"{len(study_warn)} setting(s) of the study are no better than uniform on some "
         "statistic: see the tables below."] if study_warn else [])
    charts = {
        "ldp_error": plot_ldp_error(ldp),
        "divergences": plot_divergences(mobility),
        "map": plot_map(inputs.map_points, inputs.locations),
        "training": plot_training(inputs.training),
    }
    return SimpleNamespace(
        inputs=inputs, synthesis=synthesis, ldp=ldp, mobility=mobility, longrange=longrange,
        verdicts=verdicts, membership=membership, home=home, joint=joint, ldp_warn=ldp_warn,
        mob_warn=mob_warn, spent=spent, words=words, warnings=warnings,
        summary_warn=summary_warn, charts=charts, labels={**MOBILITY_LABELS, "name": "method"},
        attacked=not (membership.empty and home.empty and joint.empty))


def _summary_section(r: SimpleNamespace) -> list[str]:
    """The title, the run's header and the summary in words."""
    return [
        f"<h1>trajpriv report: {html.escape(r.inputs.dataset)}</h1>",
        _header_html(r.inputs.dataset, r.inputs.header),
        '<section id="summary"><h2>Summary</h2>',
        "<ul>" + "".join(f"<li>{html.escape(s)}</li>" for s in r.words) + "</ul>"
        if r.words else "<p>(no evaluation figures in this run)</p>",
        _warnings_html(r.summary_warn),
        "</section>",
    ]


def _ldp_section(r: SimpleNamespace) -> list[str]:
    """The LDP collection's error table and chart."""
    return [
        '<section id="ldp"><h2>LDP collection: error of each mechanism</h2>',
        "<p>Each (mechanism, epsilon) of the latest study and the published release against "
        "the raw trajectories. NE: normalised error (lower is better); PRQ: share of points "
        "within the radius (higher is better); ACD and Kendall tau: how well the most visited "
        "locations keep their counts and order.</p>",
        _warnings_html(r.ldp_warn),
        table_html(r.ldp, labels=r.labels),
        _figure("LDP error against epsilon", r.charts["ldp_error"],
                "One colour per mechanism; lines: the study, stars: the published release."),
        "</section>",
    ]


def _synthesis_section(r: SimpleNamespace) -> list[str]:
    """The synthesis study: which method to publish."""
    return [
        '<section id="synthesis-study"><h2>Synthesis study: which method to publish</h2>',
        "<p>Each synthesis method of <code>study.synthesis_methods</code> trained on the "
        "training days at the same epsilon (the configured training target) and scored "
        "against the held-out days, beside real training days (the floor) and uniform random "
        "days (the trivial generator). JSD in nats, lower is better; <code>_sd</code>: the "
        "spread over the study's seeds. Trusted zone: these models are not released; only "
        "<code>train.method</code> is.</p>",
        table_html(r.synthesis, labels={**r.labels, **LONGRANGE_LABELS,
                                      "epsilon_spent": "epsilon spent"})
        if not r.synthesis.empty
        else "<p>No synthesis study in this run (<code>study.synthesis_methods</code> is "
             "empty, or <code>trajpriv study</code> has not run).</p>",
        "</section>",
    ]


def _mobility_section(r: SimpleNamespace) -> list[str]:
    """The mobility divergences, against uniform, and the long-range statistics."""
    return [
        '<section id="mobility"><h2>Mobility divergences against real days</h2>',
        "<p>Jensen-Shannon divergence (nats, 0 = identical, ln 2 = 0.693 = nothing in common) "
        "of each statistic against real days. Synthetic models are judged against uniform "
        "random days from the public map; perturbed settings against the UNIFORM (LDP) "
        "mechanism at the same epsilon. Light red: no better than that uniform baseline; dark "
        "red: at the maximum ln 2.</p>",
        _warnings_html(r.mob_warn),
        table_html(r.mobility, css=_mobility_css(r.mobility), labels=r.labels),
        "<h3>Against uniform, in words</h3>",
        table_html(r.verdicts, labels=r.labels),
        _figure("Mobility divergences", r.charts["divergences"],
                "Lines: perturbed settings of the study by epsilon; stars: the published "
                "release; diamonds: synthetic models at their training epsilon; dashed: uniform "
                "random days; dotted: real training days (the floor)."),
        "<h3>Long-range statistics (what a first-order chain cannot fit)</h3>",
        "<p>Against the same real days: the JSD of the daily mobility motifs (the network of a "
        "day's places) and of the slot of the last return home, the gap between the shares "
        "of days that end at home (lower is better); the share of days whose motif is one of "
        "the real days' ten most common (closest to the real training days' row is best) and "
        "the accuracy of a next-place predictor trained on the row's days and tested on the "
        "real days' moves (higher is better: the real training days' row is what a synthesis "
        "as good as real days reaches, uniform random days the floor). Definitions: "
        "docs/concepts/statistics.md.</p>",
        table_html(r.longrange, labels={**r.labels, **LONGRANGE_LABELS}),
        "</section>",
    ]


def _attacks_section(r: SimpleNamespace) -> list[str]:
    """The attacks on our own output."""
    return [
        '<section id="attacks"><h2>Attacks on our own output</h2>',
        "" if r.attacked else "<p>No attack figures in this run: run <code>trajpriv evaluate "
        "--attacks</code> to fill this section.</p>",
        "<h3>Utility and attacks of the same model</h3>",
        "<p>Divergences next to the membership-inference AUCs of the same trained model "
        "(0.5 = the attacker cannot tell training days from held-out days).</p>",
        table_html(r.joint, labels=r.labels),
        "<h3>Membership inference</h3>",
        "<p>On the attacker's held-out half of the candidate days; an interval containing 0.5 "
        "(AUC, balanced accuracy) or the FPR itself (TPR) means no signal at this sample "
        "size.</p>",
        table_html(r.membership, labels=r.labels),
        "<h3>Home re-identification</h3>",
        "<p>Read between raw points (no protection) and the UNIFORM mechanism (chance).</p>",
        table_html(r.home, labels=r.labels),
        "</section>",
    ]


def _closing_sections(r: SimpleNamespace) -> list[str]:
    """Privacy spent, the map, training curves and the stage runs."""
    return [
        '<section id="privacy"><h2>Privacy spent</h2>',
        f"<p>{html.escape(r.spent)}</p>" if r.spent else "",
        table_html(r.inputs.privacy),
        "</section>",
        '<section id="map"><h2>Map: real, perturbed and synthetic</h2>',
        _figure("Map", r.charts["map"],
                "A few pseudonymous users over the public location set (grey), equal-aspect "
                "(longitude scaled by cos latitude); one colour per user, one line per "
                "trajectory; synthetic days belong to no user (one colour per day)."),
        "</section>",
        '<section id="training"><h2>Training</h2>',
        _figure("Training curves", r.charts["training"], "Per training round."),
        "</section>",
        '<section id="runs"><h2>Stage runs</h2>',
        table_html(r.inputs.runs),
        "</section>",
    ]


def _figures(r: SimpleNamespace) -> dict:
    """figures.json: the report's figures as JSON values."""
    ev_all = r.inputs.evaluation
    evaluation = ev_all.assign(name=ev_all["method"].map(display)) if not ev_all.empty else ev_all
    return jsonable({
        "dataset": r.inputs.dataset,
        "header": r.inputs.header,
        "summary": r.words,
        "warnings": r.warnings,
        "tables": {"ldp_error": r.ldp, "synthesis_study": r.synthesis, "mobility": r.mobility,
                   "longrange": r.longrange, "against_uniform": r.verdicts,
                   "utility_and_attacks": r.joint, "privacy": r.inputs.privacy},
        "against_uniform": r.verdicts,
        "attacks": {"membership": r.membership, "home": r.home},
        "evaluation": evaluation,
        "training": r.inputs.training,
        "privacy": r.inputs.privacy,
        "charts": {k: v[1] for k, v in r.charts.items() if v is not None},
        "map_points": int(len(r.inputs.map_points)),
        "figures_drawn": [k for k, v in r.charts.items() if v is not None],
    })

"""The report's charts (matplotlib, Agg): each returns (PNG base64, the series it drew) or None.

Sized for the page: every figure is FIG_WIDTH inches at DPI, so about 1300 px, the width the
page shows it at (1400 px window), and text stays at its set size instead of being scaled
down. One colour per method name (`jobs.report.names.colour_of`), epsilon on a numeric axis.
The series list goes into figures.json so a test (or a reader) can check what was drawn.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from jobs.report.names import MODEL, REFERENCE, RELEASE, STUDY, colour_of  # noqa: E402
from jobs.report.tables import MAX_JSD, MOBILITY_LABELS, MOBILITY_METRICS  # noqa: E402

FIG_WIDTH = 13.0  # inches; at DPI 100 -> 1300 px
DPI = 100
KINDS = ("real", "perturbed", "synthetic")
KIND_TITLES = {"real": "real (raw points, snapped to the public set)",
               "perturbed": "perturbed (as published)", "synthetic": "synthetic days"}
USER_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
plt.rcParams.update({"font.size": 12, "axes.titlesize": 13, "legend.fontsize": 11})
Drawn = tuple[str, dict[str, Any]]


def _png(fig: plt.Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


#: Two ticks closer than this factor print over each other at the page width (9.8 beside 10).
MIN_TICK_RATIO = 1.2


def epsilon_ticks(epsilons: list[float]) -> list[float]:
    """The epsilons to label, in numeric order: all of them, except that of two closer than
    MIN_TICK_RATIO only the one with the shorter label stays (10 over a model's 9.8); the
    points themselves are all drawn."""
    kept: list[float] = []
    for e in sorted({float(x) for x in epsilons if x > 0}, key=lambda x: (len(f"{x:.3g}"), x)):
        if all(max(e, k) / min(e, k) >= MIN_TICK_RATIO for k in kept):
            kept.append(e)
    return sorted(kept)


def _epsilon_axis(ax: plt.Axes, epsilons: list[float]) -> None:
    """Log epsilon axis ticked at the epsilons shown (`epsilon_ticks`), in numeric order."""
    ticks = epsilon_ticks(epsilons)
    ax.set_xscale("log")
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{e:.3g}" for e in ticks])
    ax.minorticks_off()
    ax.set_xlabel("epsilon")
    ax.grid(alpha=0.3)


def plot_ldp_error(table: pd.DataFrame) -> Drawn | None:
    """LDP error against epsilon, one panel per metric, one line per mechanism (study) and a
    star for the published release."""
    if table.empty:
        return None
    metrics = [c for c in table.columns if c not in ("name", "source", "epsilon")][:4]
    epsilons = sorted(table["epsilon"].dropna().unique().tolist())
    fig, axes = plt.subplots(1, len(metrics), figsize=(FIG_WIDTH, 4.4), squeeze=False,
                             layout="constrained")
    series: list[str] = []
    for ax, metric in zip(axes[0], metrics, strict=True):
        for (name, source), part in table.groupby(["name", "source"], sort=False):
            part = part.dropna(subset=["epsilon", metric]).sort_values("epsilon")
            if part.empty:
                continue
            label = name if source == STUDY else f"{name}, published"
            style = {"marker": "o", "lw": 2} if source == STUDY else {
                "marker": "*", "ms": 16, "lw": 0}
            ax.plot(part["epsilon"], part[metric], color=colour_of(name), label=label, **style)
            if label not in series:
                series.append(label)
        ax.set_title(f"{metric} ({'higher' if metric.startswith(('PRQ', 'Kendall')) else 'lower'}"
                     " is better)")
        _epsilon_axis(ax, epsilons)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
    return _png(fig), {"series": series, "epsilons": epsilons,
                       "colours": [colour_of(s.removesuffix(", published")) for s in series]}


def plot_divergences(table: pd.DataFrame) -> Drawn | None:
    """One panel per mobility statistic: perturbed settings as lines against epsilon, synthetic
    models as large markers at their epsilon, uniform random days and the real floor as
    horizontal lines, the maximum ln 2 in red."""
    if table.empty:
        return None
    metrics = [m for m in MOBILITY_METRICS if m in table.columns]
    epsilons = sorted(table["epsilon"].dropna().unique().tolist())
    ncols = 3
    nrows = math.ceil(len(metrics) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(FIG_WIDTH, 3.6 * nrows + 0.9),
                             squeeze=False, layout="constrained")
    series: list[str] = []
    for ax, metric in zip(axes.flat, metrics, strict=False):
        for (name, source), part in table.groupby(["name", "source"], sort=False):
            part = part.dropna(subset=[metric])
            label = name if source != RELEASE else f"{name}, published"
            colour = colour_of(name)
            if source == REFERENCE:
                style = "--" if name.startswith("uniform") else ":"
                ax.axhline(part[metric].mean(), color=colour, ls=style, lw=2, label=label)
            elif source == MODEL:
                ax.plot(part["epsilon"], part[metric], "D", ms=11, color=colour, label=label)
            elif source == RELEASE:
                ax.plot(part["epsilon"], part[metric], "*", ms=18, color=colour, label=label)
            else:
                part = part.sort_values("epsilon")
                ax.plot(part["epsilon"], part[metric], "-o", lw=2, color=colour, label=label)
            if label not in series:
                series.append(label)
        ax.axhline(MAX_JSD, color="#C00000", lw=1, alpha=0.6)
        ax.set_title(MOBILITY_LABELS[metric])
        ax.set_ylim(0, MAX_JSD * 1.08)
        ax.set_ylabel("JSD (nats)")
        if epsilons:
            _epsilon_axis(ax, epsilons)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="#C00000", lw=1))
    labels.append("maximum ln 2 (no overlap at all)")
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
    fig.suptitle("Mobility statistics against real days (JSD, lower is better)")
    return _png(fig), {"series": series, "epsilons": epsilons,
                       "colours": [colour_of(s.removesuffix(", published")) for s in series]}


def _extent(points: pd.DataFrame) -> tuple[float, float, float, float]:
    lon0, lon1 = points["lon"].min(), points["lon"].max()
    lat0, lat1 = points["lat"].min(), points["lat"].max()
    pad_lon = max((lon1 - lon0) * 0.08, 0.005)
    pad_lat = max((lat1 - lat0) * 0.08, 0.005)
    return lon0 - pad_lon, lon1 + pad_lon, lat0 - pad_lat, lat1 + pad_lat


def plot_map(points: pd.DataFrame, locations: pd.DataFrame | None = None) -> Drawn | None:
    """Real / perturbed / synthetic side by side over the public location set (grey).

    Equal-aspect: one km is as long east-west as north-south (longitude scaled by cos of the
    mean latitude). A user keeps one colour in the real and perturbed panels; each trajectory is
    a line in its point order (`traj`, `seq`). Synthetic days belong to no user: one colour per
    day."""
    if points.empty:
        return None
    points = points.copy()
    for col, default in (("traj", "0"), ("seq", 0)):
        if col not in points.columns:
            points[col] = default
    x0, x1, y0, y1 = _extent(points)
    aspect = 1.0 / max(math.cos(math.radians((y0 + y1) / 2)), 0.05)
    kinds = [k for k in KINDS if k in set(points["kind"])]
    fig, axes = plt.subplots(1, 3, figsize=(FIG_WIDTH, 5.2), squeeze=False,
                             layout="constrained")
    users = list(dict.fromkeys(points.loc[points["kind"] != "synthetic", "who"].astype(str)))
    colours = {u: USER_COLOURS[i % len(USER_COLOURS)] for i, u in enumerate(users)}
    for ax, kind in zip(axes[0], KINDS, strict=True):
        if locations is not None and not locations.empty:
            ctx = locations[locations["lon"].between(x0, x1) & locations["lat"].between(y0, y1)]
            ax.scatter(ctx["lon"], ctx["lat"], s=6, c="#BBBBBB", lw=0, zorder=1)
        part = points[points["kind"] == kind]
        for i, ((who, _traj), line) in enumerate(part.groupby(["who", "traj"], sort=True)):
            colour = (USER_COLOURS[i % len(USER_COLOURS)] if kind == "synthetic"
                      else colours.get(str(who), "#333333"))
            line = line.sort_values("seq")
            ax.plot(line["lon"], line["lat"], "-o", color=colour, lw=1.4, ms=4, alpha=0.85,
                    zorder=2)
        ax.set_xlim(x0, x1)
        ax.set_ylim(y0, y1)
        ax.set_aspect(aspect)
        ax.set_title(KIND_TITLES[kind] if kind in kinds else f"{kind}: none in this run")
        ax.set_xlabel("longitude")
        ax.tick_params(labelsize=9)
    axes[0][0].set_ylabel("latitude")
    handles = [plt.Line2D([], [], color=colours[u], marker="o", label=f"user {u[:10]}")
               for u in users]
    handles.append(plt.Line2D([], [], color="#BBBBBB", marker="o", lw=0,
                              label="public location set"))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6))
    return _png(fig), {"users": len(users), "kinds": kinds, "aspect": round(aspect, 4),
                       "lines": int(points.groupby(["kind", "who", "traj"]).ngroups)}


def plot_training(training: pd.DataFrame) -> Drawn | None:
    """Training curves, one panel per tracked quantity; constrained layout keeps the title
    clear of the panels."""
    if training.empty:
        return None
    metrics = list(dict.fromkeys(training["metric"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(FIG_WIDTH, 3.8), squeeze=False,
                             layout="constrained")
    for ax, metric in zip(axes[0], metrics, strict=True):
        part = training[training["metric"] == metric].sort_values("round")
        ax.plot(part["round"], part["value"], marker="o", color=USER_COLOURS[0])
        ax.set_title(metric)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    fig.suptitle("Training, per round")
    return _png(fig), {"series": metrics,
                       "rounds": int(np.nanmax(training["round"])) if len(training) else 0}


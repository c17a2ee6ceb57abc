"""The report's words: the header line items, a summary and the warnings.

A newcomer should read off the page which setting to use and what it costs in privacy, and be
told plainly where a model or mechanism is no better than uniform (a private model that loses
to uniform random days on a statistic has kept nothing usable of it at its epsilon). Pure
functions of the tables in `jobs.report.tables`.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from jobs.report.names import MECHANISM_NAMES, MODEL, REFERENCE_NAMES, RELEASE, STUDY
from jobs.report.tables import MAX_JSD, MOBILITY_LABELS, MOBILITY_METRICS


def _eps(value: Any) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{float(value):.3g}"


def _at(name: str, epsilon: Any) -> str:
    e = _eps(epsilon)
    return f"{name} at epsilon {e}" if e else name


def ldp_sentences(ldp: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Which mechanism has the lowest NE per epsilon studied, the published release's NE, and
    warnings where a mechanism's NE is no lower than the UNIFORM mechanism's."""
    if ldp.empty or "NE" not in ldp.columns:
        return [], []
    words, warnings = [], []
    study = ldp[(ldp["source"] == STUDY) & ldp["NE"].notna()]
    if not study.empty:
        best = study.loc[study.groupby("epsilon")["NE"].idxmin()].sort_values("epsilon")
        names = set(best["name"])
        figures = ", ".join(f"{r.NE:.3g} at {r.epsilon:g}" for r in best.itertuples())
        if len(names) == 1:
            words.append(f"Collection: {best['name'].iloc[0]} has the lowest normalised error "
                         f"(NE) at every epsilon studied ({figures}).")
        else:
            words.append("Collection, lowest normalised error (NE) per epsilon studied: "
                         + "; ".join(f"{r.name} at {r.epsilon:g} ({r.NE:.3g})"
                                     for r in best.itertuples()) + ".")
        uniform = study[study["name"] == MECHANISM_NAMES["uniform"]].set_index("epsilon")["NE"]
        for r in study[study["name"] != MECHANISM_NAMES["uniform"]].itertuples():
            if r.epsilon in uniform.index and r.NE >= uniform[r.epsilon]:
                warnings.append(f"{_at(r.name, r.epsilon)} (study) is no better than uniform: "
                                f"NE {r.NE:.3g} against {uniform[r.epsilon]:.3g} for "
                                f"{MECHANISM_NAMES['uniform']}.")
    for r in ldp[(ldp["source"] == RELEASE) & ldp["NE"].notna()].itertuples():
        words.append(f"The published release uses {_at(r.name, r.epsilon)}: NE {r.NE:.3g}.")
    return words, warnings


def _mean_jsd(row: pd.Series) -> float:
    vals = [row[m] for m in MOBILITY_METRICS if m in row.index and pd.notna(row[m])]
    return float(sum(vals) / len(vals)) if vals else math.nan


def mobility_sentences(mobility: pd.DataFrame,
                       verdicts: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Best perturbed setting and best model by mean divergence, each model's verdict against
    uniform, and a warning per row that loses to uniform or sits at the maximum ln 2."""
    if mobility.empty:
        return [], []
    words, warnings = [], []
    mean = mobility.assign(mean=mobility.apply(_mean_jsd, axis=1))
    perturbed = mean[mean["source"].isin([STUDY, RELEASE])
                     & (mean["name"] != MECHANISM_NAMES["uniform"])].dropna(subset=["mean"])
    if not perturbed.empty:
        r = perturbed.loc[perturbed["mean"].idxmin()]
        words.append(f"Perturbed days closest to the real ones (mean JSD over the mobility "
                     f"statistics): {_at(r['name'], r['epsilon'])} ({r['mean']:.3f}).")
    models = mean[mean["source"] == MODEL].dropna(subset=["mean"])
    if not models.empty:
        r = models.loc[models["mean"].idxmin()]
        words.append(f"Best synthetic model: {_at(r['name'], r['epsilon'])} "
                     f"(mean JSD {r['mean']:.3f}; 0 = as close as real days, "
                     f"ln 2 = {MAX_JSD:.3f} = nothing in common).")
    for v in verdicts.to_dict("records"):
        who, losses, at_max = _at(v["name"], v["epsilon"]), v["loses to uniform on"], \
            v["at the maximum ln 2"]
        if v["source"] == MODEL:
            words.append(f"{who}: {v['verdict']} against uniform random days"
                         + (f" (not on {losses})." if losses and v["beats uniform on"] else "."))
        if losses:
            base = ("uniform random days" if v["source"] == MODEL
                    else f"{MECHANISM_NAMES['uniform']} at the same epsilon")
            warnings.append(f"{who} ({v['source']}) is no better than {base} on {losses}.")
        if at_max:
            warnings.append(f"{who} ({v['source']}) scores the maximum divergence ln 2 = "
                            f"{MAX_JSD:.3f} on {at_max}: on that statistic its days and the "
                            "real days have nothing in common.")
    if not models.empty and verdicts[verdicts["source"] == MODEL].empty:
        warnings.append("No uniform random days were evaluated next to the synthetic models: "
                        "nothing says whether they beat the trivial generator.")
    return words, warnings


def privacy_sentence(header: dict[str, Any]) -> str | None:
    """What one user paid: the collection budget per window and the training epsilon."""
    unit = header.get("privacy_unit")
    parts = []
    c = header.get("collection") or {}
    if c.get("users"):
        parts.append(
            f"collection spent at most epsilon {c['max_window_epsilon']:.3g} of the budget "
            f"{header.get('budget', float('nan')):g} per {header.get('window_days', '?')}-day "
            f"window (local epsilon per {unit}), {c['max_total_epsilon']:.3g} in total over "
            f"{c['windows']} window(s), across {c['users']} {unit}s")
    t = header.get("training") or {}
    if t.get("epsilon") is not None:
        parts.append(f"training spent epsilon {t['epsilon']:.3g} (delta {t.get('delta', 0):g}, "
                     f"{t.get('model', 'central')}) per trained {unit}"
                     + (f" ({t['users']} {unit}s)" if t.get("users") else ""))
    if not parts:
        return None
    return "Privacy: " + "; ".join(parts) + "."


def synthesis_sentences(study: pd.DataFrame) -> list[str]:
    """The synthesis study in words: which method is best at the study's epsilon (lowest mean
    divergence over the paper's six statistics) and on how many it beats uniform days."""
    if study.empty:
        return []
    metrics = [m for m in MOBILITY_METRICS if m in study.columns]
    methods = study[study["epsilon"].notna()].dropna(subset=metrics, how="all")
    uniform = study[study["name"] == REFERENCE_NAMES["uniform_random"]]
    if methods.empty or not metrics:
        return []
    mean = methods.assign(mean=methods[metrics].mean(axis=1))
    best = mean.loc[mean["mean"].idxmin()]
    firsts = {m: methods.loc[methods[m].idxmin(), "name"] for m in metrics
              if methods[m].notna().any()}
    wins = sum(1 for name in firsts.values() if name == best["name"])
    words = [f"Synthesis study at epsilon {best['epsilon']:g}: {best['name']} is the best "
             f"method (mean JSD {best['mean']:.3f} over the {len(metrics)} mobility statistics; "
             f"lowest on {wins} of {len(firsts)})."]
    if not uniform.empty:
        base = uniform.iloc[0]
        for r in mean.itertuples():
            beats = [MOBILITY_LABELS[m] for m in metrics
                     if pd.notna(getattr(r, m)) and getattr(r, m) < base[m]]
            words.append(f"{r.name} beats uniform random days on {len(beats)} of "
                         f"{len(metrics)} statistics in the study.")
    return words

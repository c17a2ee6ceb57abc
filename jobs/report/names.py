"""One name and one colour per method in the report, and epsilon in numeric order.

The evaluation table names a mechanism differently per stage (`atp` in the study's LDP metrics,
`perturbed_atp` in evaluate's divergences, `atp-release` / `perturbed_atp-release` for the
published release). A reader should see one mechanism under one name, so every table and chart
goes through `canonical`, which splits a raw method into (name, source): ("ATP", "study"),
("ATP", "published release"); the synthesis study's `synthesis-study:markov` is
("DP Markov", "synthesis study"). Colours come from a fixed qualitative palette by name, so a
method keeps its colour in every chart; epsilon labels are sorted as numbers, never as strings
("1, 4, 10", not "1, 10, 4").
"""

from __future__ import annotations

import math

from jobs.methods import methods
from jobs.spark.tables import SYNTHESIS_STUDY_PREFIX

MECHANISM_NAMES = {"atp": "ATP", "tp": "TP", "exp": "EXP", "uniform": "UNIFORM (LDP)",
                   "ngram": "N-gram", "tracs_d": "TraCS-D", "tracs_c": "TraCS-C"}
REFERENCE_NAMES = {"uniform_random": "uniform random days (baseline)",
                   "real_train": "real training days (floor)",
                   "raw": "raw points (no protection)"}
STUDY, RELEASE, MODEL, REFERENCE = "study", "published release", "synthetic model", "reference"
SYNTHESIS_STUDY = "synthesis study"


# Okabe-Ito (colour-blind safe) then Tableau's extra hues: 14 distinct colours; names beyond
# that reuse a colour with a different line style in the charts (`style_of`).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000", "#8C564B", "#7F7F7F", "#BCBD22", "#17BECF", "#9467BD", "#E377C2")
FIXED_COLOURS = {"ATP": PALETTE[0], "TP": PALETTE[1], "EXP": PALETTE[2],
                 "UNIFORM (LDP)": PALETTE[8], "N-gram": PALETTE[4], "TraCS-D": PALETTE[5],
                 "TraCS-C": PALETTE[13], "PateGAIL": PALETTE[3], "PateGAIL++": PALETTE[12],
                 "DP Markov": PALETTE[6], "PateGAIL-LDP": PALETTE[10],
                 "PateGAIL++-LDP": PALETTE[11],
                 REFERENCE_NAMES["uniform_random"]: "#7F7F7F",
                 REFERENCE_NAMES["real_train"]: "#000000",
                 REFERENCE_NAMES["raw"]: "#000000"}


def model_names() -> dict[str, str]:
    """Display name of each synthesis method (the registry's labels, jobs.methods)."""
    return {name: m.label for name, m in methods().items()}


def canonical(method: str) -> tuple[str, str]:
    """(display name, source) of a raw evaluation method name."""
    raw = str(method)
    labels = model_names()
    if raw.startswith(SYNTHESIS_STUDY_PREFIX):
        base = raw.removeprefix(SYNTHESIS_STUDY_PREFIX)
        return REFERENCE_NAMES.get(base) or labels.get(base, base), SYNTHESIS_STUDY
    if raw in REFERENCE_NAMES:
        return REFERENCE_NAMES[raw], REFERENCE
    if raw in labels:
        return labels[raw], MODEL
    base = raw.removeprefix("perturbed_")
    source = STUDY
    if base.endswith("-release"):
        base, source = base.removesuffix("-release"), RELEASE
    return MECHANISM_NAMES.get(base, base.upper()), source


def display(method: str) -> str:
    """The one label of a method in running text and legends."""
    name, source = canonical(method)
    return f"{name}, published" if source == RELEASE else name


def colour_of(name: str, taken: dict[str, str] | None = None) -> str:
    """A fixed colour for a known name; unknown names take the first palette colour unused."""
    if name in FIXED_COLOURS:
        return FIXED_COLOURS[name]
    taken = {} if taken is None else taken
    if name not in taken:
        used = set(taken.values()) | set(FIXED_COLOURS.values())
        free = [c for c in PALETTE if c not in used] or list(PALETTE)
        taken[name] = free[len(taken) % len(free)]
    return taken[name]


def epsilon_value(setting: object) -> float:
    """A setting as a number (NaN where it is not one: references have no epsilon)."""
    try:
        value = float(setting)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return value

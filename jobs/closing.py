"""The closing summary of a stage: what it wrote (with row counts where they are public), the
privacy it spent, and the command that queries the result or runs the next stage.

Why: a stage ended on one `ok key=value ...` line; a newcomer had to know the table names
and the next command from the README. The summary is printed by the harness on stdout after
that line and is built from the stage's *public* figures only (`harness.public_view`): raw
tables are named without their counts (those are trusted-zone figures, in the run folder).
The table of what each stage writes lives here, beside the names in `jobs.spark.tables`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.spark import tables as T


@dataclass(frozen=True)
class Written:
    """A table (or a file figure) a stage writes; `rows`: the figure holding its row count."""

    name: str
    rows: str | None = None
    path: bool = False  # `name` is a figure holding a path, not a table


@dataclass(frozen=True)
class Closing:
    written: tuple[Written, ...]
    query: str | None = None  # a command that shows the result
    next: tuple[str, ...] = ()  # the next stage(s): alternatives, said with "or"


_PUB_COUNT = ('trajpriv sql "SELECT mechanism, epsilon, count(*) AS trajectories FROM '
              f'{T.PERTURBED_TRAJECTORIES} GROUP BY 1, 2 ORDER BY 1, 2"')
_SYNTH_COUNT = ('trajpriv sql "SELECT model, epsilon, count(*) AS days FROM '
                f'{T.SYNTHETIC_TRAJECTORIES} GROUP BY 1, 2 ORDER BY 1, 2"')

STAGES: dict[str, Closing] = {
    "datagen": Closing((Written("output", path=True), Written(T.LOCATIONS, "stations")),
                       next=("trajpriv ingest",)),
    "ingest": Closing((Written(T.POINTS), Written(T.TRAJECTORIES), Written(T.SLOT_DAYS),
                       Written(T.QUARANTINE), Written(T.LOCATIONS, "locations")),
                      query=f'trajpriv sql "SELECT count(*) AS locations FROM {T.LOCATIONS}"',
                      next=("trajpriv study", "trajpriv collect", "trajpriv train")),
    "study": Closing((Written(T.STUDY_PERTURBED), Written(T.EVALUATION)),
                     query=f'trajpriv sql --trusted "SELECT method, setting, metric, value FROM '
                           f'{T.EVALUATION} WHERE run_id = \'{{run_id}}\'"',
                     next=("trajpriv collect",)),
    "collect": Closing((Written(T.PERTURBED_TRAJECTORIES, "trajectories_released"),
                        Written(T.RELEASES), Written(T.PRIVACY_LEDGER)),
                       query=_PUB_COUNT, next=("trajpriv train",)),
    "train": Closing((Written("artefacts", path=True), Written(T.SLOT_DAYS_SPLIT),
                      Written(T.PRIVACY_LEDGER)),
                     query="trajpriv budget", next=("trajpriv synthesize",)),
    "synthesize": Closing((Written(T.SYNTHETIC_TRAJECTORIES, "days"),),
                          query=_SYNTH_COUNT, next=("trajpriv evaluate",)),
    "evaluate": Closing((Written(T.EVALUATION, "rows"),),
                        query=f'trajpriv sql --trusted "SELECT method, setting, metric, value '
                              f'FROM {T.EVALUATION} WHERE run_id = \'{{run_id}}\'"',
                        next=("trajpriv report",)),
    "report": Closing((Written("report", path=True), Written("figures_json", path=True)),
                      next=("open the report in a browser",)),
}


def closing_lines(stage: str, public: dict[str, Any], run_id: str,
                  config: str | None = None) -> list[str]:
    """The summary lines of `stage` from its public figures (`config`: a non-default
    `--config`, repeated in the commands so they open the same catalog)."""
    spec = STAGES.get(stage)
    if spec is None:
        return []
    lines, uncounted = [], []
    for out in spec.written:
        if out.path:
            if public.get(out.name):
                lines.append(f"wrote {public[out.name]}")
        elif out.rows is not None and isinstance(public.get(out.rows), int):
            lines.append(f"wrote {out.name}: {public[out.rows]:,} rows")
        else:
            uncounted.append(out.name)
    private = [n for n in uncounted if n.startswith((T.RAW_DB + ".", T.TRUSTED_DB + "."))]
    public_names = [n for n in uncounted if n not in private]
    if public_names:
        lines.append("wrote " + ", ".join(public_names))
    if private:
        lines.append("wrote " + ", ".join(private) + " (not published: their row counts stay "
                     "in the run folder)")
    lines += epsilon_lines(stage, public)
    suffix = f" --config {config}" if config else ""
    if spec.query:
        lines.append("query: " + _with_config(spec.query.format(run_id=run_id), suffix))
    if spec.next:
        nxt = " or ".join(f"{c}{suffix}" if c.startswith("trajpriv") else c for c in spec.next)
        lines.append(f"next: {nxt}")
    return lines


def _with_config(command: str, suffix: str) -> str:
    """`trajpriv sql "..."` -> `trajpriv sql --config X "..."` (options before the query)."""
    if not suffix:
        return command
    head, sep, rest = command.partition(' "')
    return f"{head}{suffix}{sep}{rest}"


def epsilon_lines(stage: str, public: dict[str, Any]) -> list[str]:
    """What the run cost in privacy, from public figures (the ledger has it per user)."""
    if stage == "collect":
        if not public.get("release_id"):
            return ["epsilon: nothing released, nothing spent"]
        spent = public.get("epsilon_spent")
        return [f"epsilon: {public.get('epsilon'):g} per released trajectory (local DP), "
                f"{spent:g} charged in all; per user: trajpriv budget"
                if isinstance(spent, (int, float)) else
                f"epsilon: {public.get('epsilon'):g} per released trajectory (local DP)"]
    if stage in ("train", "synthesize") and isinstance(public.get("epsilon"), (int, float)):
        delta = public.get("delta")
        cost = f"epsilon {public['epsilon']:.3g}" + (
            f", delta {delta:g}" if isinstance(delta, (int, float)) else "")
        if stage == "train":
            return [f"privacy: {cost} per trained user ({public.get('privacy_model', 'central')})"]
        return [f"privacy: no new spend (samples of a model trained at {cost})"]
    return []


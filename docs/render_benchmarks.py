"""Render the benchmarks page from what the benches wrote: one current table per bench.

Each bench that reports figures calls `bench.results.write_result`, which writes
`bench/results/<name>.json` with the command, date, machine and commit that produced it. This
script turns those files into `benchmarks.md` (the docs build calls `page()`); a figure no bench
wrote is not on the page. `python docs/render_benchmarks.py` prints the page.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def _cell(value: object) -> str:
    if isinstance(value, float):
        value = f"{value:.4g}"
    return str(value).replace("|", "\\|")


def table(result: dict) -> str:
    lines = [f"## {result['title']}\n",
             f"- command: `{result['command']}`",
             f"- date: {result['date']}",
             f"- machine: {result['machine']}",
             f"- load average (1 / 5 / 15 min): {result.get('load', 'not recorded')}",
             f"- commit: `{result['commit']}`\n"]
    if result.get("notes"):
        lines.append(result["notes"] + "\n")
    lines.append("| " + " | ".join(result["columns"]) + " |")
    lines.append("|" + "---|" * len(result["columns"]))
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in result["rows"]]
    return "\n".join(lines) + "\n"


def page(results_dir: Path = RESULTS) -> str:
    parts = ["# Benchmarks\n",
             "Every measured figure of the docs lives here, one current table per bench, each "
             "written by the bench itself (`bench/results/<name>.json`) with the command, date, "
             "machine and commit that produced it. Rerun the command to refresh a table; "
             "other pages link here instead of quoting figures. How to run the benches: "
             "[development](development.md#benches).\n"]
    files = sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []
    if not files:
        parts.append("No bench has written results in this checkout yet.\n")
    for path in files:
        parts.append(table(json.loads(path.read_text())))
    pending = not_run()
    if pending:
        parts.append("## Benches without a table yet\n")
        parts.append("These benches print figures but have not written a table in this "
                     "checkout; each says why.\n")
        parts += [f"- `{bench}`: {why}" for bench, why in sorted(pending.items())]
        parts.append("")
    return "\n".join(parts)


def not_run() -> dict[str, str]:
    """`bench.results.NOT_RUN`, read without importing the bench package (the docs build
    imports this module on its own)."""
    import ast

    src = (RESULTS.parent / "results.py").read_text()
    for node in ast.parse(src).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "NOT_RUN":
            return ast.literal_eval(node.value)
    return {}


if __name__ == "__main__":
    print(page(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS))

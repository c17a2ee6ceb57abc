"""Print a statement's result as a table (Spark's `show` layout), CSV or JSON.

`table` keeps the layout `DataFrame.show(truncate=False)` printed before the server existed
(scripts and tests parse `|value |` cells); `csv` is RFC 4180 with a header row (arrays and
structs as JSON text in their cell); `json` prints one JSON array of row objects per statement,
each on its own line, with `null` for a missing value.
"""

from __future__ import annotations

import csv
import json
import math
from typing import Any, TextIO

FORMATS = ("table", "csv", "json")


def render(result: dict[str, Any], fmt: str, out: TextIO) -> None:
    """Write `result` (`jobs.sql.engine.run_statement`'s dict) to `out` in `fmt`."""
    columns, rows = result["columns"], result["rows"]
    if fmt == "json":
        records = [dict(zip(columns, (_json_safe(v) for v in row), strict=True)) for row in rows]
        out.write(json.dumps(records, ensure_ascii=False, allow_nan=False) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_cell(v) for v in row])
    elif fmt == "table":
        out.write(table_text(columns, rows))
        if result.get("truncated"):
            out.write(f"only showing top {len(rows)} row{'s' if len(rows) != 1 else ''}\n")
    else:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def table_text(columns: list[str], rows: list[list[Any]]) -> str:
    """Spark's show layout: a ruled header, cells padded on the right, NULL for None."""
    cells = [[_show_cell(v) for v in row] for row in rows]
    widths = [max([3, len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    rule = "+" + "+".join("-" * w for w in widths) + "+\n"

    def line(values: list[str]) -> str:
        return "|" + "|".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + "|\n"

    return rule + line(columns) + rule + "".join(line(r) for r in cells) + rule


def _show_cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_show_cell(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} -> {_show_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return json.dumps(_json_safe(value), ensure_ascii=False)
    return str(value)


def _json_safe(value: Any) -> Any:
    """NaN and infinities (not JSON) as null; the rest unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value

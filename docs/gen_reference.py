"""The reference pages of the docs site, generated from the code at every build.

`docs/hooks.py` adds them to the site while `mkdocs build` runs, so they are never committed and
never stale: the CLI from the argparse parsers (`jobs.cli`), every config key from the pydantic
models (`jobs.config`: type, default, and the meaning its field description or source comment
gives), every table and column from the catalogue (`jobs.spark.tables`), the quarantine reasons
(`jobs.ingest.readers.common.Reason`) and the bad-input catalogue the reliability test prints.

`python docs/gen_reference.py OUT_DIR` writes the same pages as files (to read them without
MkDocs).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import logging
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERATED_NOTE = "*Generated from the code by `docs/gen_reference.py` at every docs build.*\n"


def _help_of(argv: list[str]) -> str:
    """What `trajpriv <argv>` prints (the parsers' own help)."""
    from jobs import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main(argv)
    return out.getvalue().rstrip()


def cli_md() -> str:
    from jobs import cli

    parts = ["# Command line\n", GENERATED_NOTE, "## `trajpriv --help`\n",
             "```text\n" + _help_of(["--help"]) + "\n```\n"]
    for command in (*cli.STAGES, "run", "sql", "budget", "serve"):
        parts.append(f"## `trajpriv {command}`\n")
        parts.append("```text\n" + _help_of([command, "--help"]) + "\n```\n")
    return "\n".join(parts)


# --- configuration ----------------------------------------------------------------------------

_FIELD_LINE = re.compile(r"^    (\w+): [^=]+?(?:=|$)")


def _source_meanings(cls: type) -> dict[str, str]:
    """{field: meaning} from the class sources along the MRO: the field's trailing `# comment`,
    else the comment lines right above it."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__ != cls.__module__:
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        block: list[str] = []
        for line in lines:
            stripped = line.strip()
            if line.startswith("    #") and not line.startswith("     "):
                block.append(stripped.lstrip("#").strip())
                continue
            m = _FIELD_LINE.match(line)
            if m and not stripped.startswith(("def ", "@", "return")):
                trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
                text = trailing or " ".join(block)
                if text:
                    out[m.group(1)] = text
            if not line.startswith("    #"):
                block = []
    return out


def _type_text(annotation: object) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "").replace("pathlib.", "")
    text = re.sub(r"\b(?:jobs|udfs|models)(?:\.\w+)*\.(\w+)", r"\1", text)
    return text.replace("datetime.", "").replace("|", "\\|")


def _default_text(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        return "(section)" if _is_model(field.annotation) else "(computed)"
    if field.default is PydanticUndefined:
        return "(required)"
    return "`" + repr(field.default).replace("PosixPath", "Path").replace("|", "\\|") + "`"


def _first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring on one line ('' without one)."""
    text = " ".join(inspect.cleandoc(doc or "").split())
    return text.split(". ")[0].rstrip(".") + "." if text else ""


def _is_model(annotation: object) -> bool:
    from pydantic import BaseModel

    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _section_rows(prefix: str, model: type) -> tuple[list[str], list[tuple[str, type]]]:
    meanings = _source_meanings(model)
    rows, nested = [], []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        if _is_model(field.annotation):
            nested.append((key, field.annotation))
        meaning = field.description or meanings.get(name, "")
        if not meaning and _is_model(field.annotation):
            meaning = " ".join((f"section `{key}` below.",
                                _first_sentence(field.annotation.__doc__))).strip()
        meaning = meaning.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{key}` | {_type_text(field.annotation)} | {_default_text(field)} "
                    f"| {meaning} |")
    return rows, nested


def config_md() -> str:
    from jobs.config import Config

    parts = ["# Configuration\n", GENERATED_NOTE,
             "Every stage reads one YAML file of these keys (`--config FILE`, default "
             "`conf/default.yaml`) and takes overrides as `--set key=value`. A misspelt key or a "
             "bad value stops the stage before any Spark work, naming the key.\n"]
    todo: list[tuple[str, type]] = [("", Config)]
    while todo:
        prefix, model = todo.pop(0)
        rows, nested = _section_rows(prefix, model)
        title = prefix.rstrip(".") or "top level"
        doc = inspect.cleandoc(model.__doc__ or "").replace("\n", " ")
        parts += [f"## `{title}`\n", doc + "\n" if doc else "",
                  "| key | type | default | meaning |", "|---|---|---|---|", *rows, ""]
        todo += [(f"{key}.", sub) for key, sub in nested]
    return "\n".join(parts)


# --- tables -----------------------------------------------------------------------------------

def tables_md() -> str:
    from jobs.spark import tables as t

    catalogue = [v for v in vars(t).values() if isinstance(v, t.Table)]
    zones = {t.RAW_DB: "raw zone: personal data, owner only",
             t.TRUSTED_DB: "trusted zone: figures from raw data without accounted noise",
             t.PUB_DB: "published zone: what analysts read"}
    parts = ["# Tables\n", GENERATED_NOTE,
             "Every table and view of the catalogue (`jobs/spark/tables.py`); the same column "
             "comments are what `trajpriv sql \"DESCRIBE <table>\"` shows.\n"]
    for db, words in zones.items():
        parts.append(f"## `{db}` ({words})\n")
        for table in sorted((x for x in catalogue if x.db == db), key=str):
            kind = "view" if table.view else "table"
            part = (f"; partitioned by {', '.join(table.partition_by)}"
                    if table.partition_by else "")
            parts += [f"### `{table}`\n", f"{kind}{part}: {table.holds}\n",
                      "| column | type | meaning |", "|---|---|---|"]
            types = table.column_types()
            for col, text in table.comments().items():
                text = text.replace("|", "\\|")
                parts.append(f"| `{col}` | `{types[col]}` | {text} |")
            parts.append("")
    return "\n".join(parts)


# --- quarantine reasons and bad input ---------------------------------------------------------

def _reason_meanings() -> dict[str, str]:
    from jobs.ingest.readers import common

    src = inspect.getsource(common.Reason).splitlines()
    out, block = {}, []
    for line in src:
        s = line.strip()
        if s.startswith("#"):
            block.append(s.lstrip("#").strip())
            continue
        m = re.match(r'(\w+) = "(\w+)"(?:\s+# (.*))?', s)
        if m:
            out[m.group(2)] = m.group(3) or " ".join(block)
        block = []
    return out


def _bad_input_table() -> str:
    path = ROOT / "tests" / "reliability" / "test_bad_inputs.py"
    spec = importlib.util.spec_from_file_location("trajpriv_bad_inputs", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    logging.disable(logging.CRITICAL)  # the cases' own log lines are not the page's business
    try:
        return module.markdown()
    finally:
        logging.disable(logging.NOTSET)


def bad_inputs_md() -> str:
    from jobs.ingest.readers.common import REASONS

    meanings = _reason_meanings()
    parts = ["# Quarantine reasons and bad input\n", GENERATED_NOTE,
             "## Quarantine reasons\n",
             "`ingest` never drops a record silently: a record it cannot use goes to "
             "`trajpriv_raw.quarantine` with one of these reasons, and read = accepted + "
             "quarantined.\n", "| reason | meaning |", "|---|---|"]
    parts += [f"| `{r}` | {meanings.get(r, '')} |" for r in REASONS]
    parts += ["", "## The bad-input catalogue\n",
              "Every case of `tests/reliability/test_bad_inputs.py`, run now, with what the "
              "project did with it.\n", _bad_input_table(), ""]
    return "\n".join(parts)


PAGES: dict[str, typing.Callable[[], str]] = {
    "reference/cli.md": cli_md,
    "reference/config.md": config_md,
    "reference/tables.md": tables_md,
    "reference/bad-inputs.md": bad_inputs_md,
}


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "site-reference"
    for name, make in PAGES.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make())
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

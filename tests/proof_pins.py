"""Pins of the privacy proofs to the code they prove.

Each section of `udfs/PROOF.md` and `models/PROOF.md` carries one line

    Proves: module.function @ <hash>; module.Class.method @ <hash>

naming the functions (or classes) the section's argument is about, each with the first 12 hex
digits of the SHA-256 of its source lines (read from the file, nothing imported).
`tests/test_proof_pins.py` fails when a pinned source changes and its hash does not: whoever
changes a proven function re-reads the section, then records the new hashes with

    python -m tests.proof_pins --update

(run from the repository root; `--check` prints what is stale and exits 1).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROOFS = (ROOT / "udfs" / "PROOF.md", ROOT / "models" / "PROOF.md")
UPDATE = "python -m tests.proof_pins --update"
_LINE = re.compile(r"^Proves: (?P<pins>.+)$")
_PIN = re.compile(r"^(?P<name>[A-Za-z_][\w.]*) @ (?P<hash>[0-9a-f]{12})$")
_HEADING = re.compile(r"^#{2,6} ")


@dataclass(frozen=True)
class Pin:
    proof: Path
    section: str
    name: str
    recorded: str

    def current(self) -> str:
        return source_hash(self.name)


def _locate(name: str) -> tuple[Path, list[str]]:
    """(source file, attribute path inside it) of a dotted name: the longest prefix that is a
    module file of the repository, then the names of nested definitions."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path, parts[i:]
    raise FileNotFoundError(f"no module of the repository in {name!r}")


def source_of(name: str) -> str:
    """The source lines of a pinned function or class (decorators included), read from its
    file without importing it."""
    path, attrs = _locate(name)
    text = path.read_text()
    node: ast.AST = ast.parse(text)
    for attr in attrs:
        found = [n for n in ast.iter_child_nodes(node)
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                 and n.name == attr]
        if not found:
            raise LookupError(f"{name}: {attr!r} is not defined in {path.relative_to(ROOT)}")
        node = found[-1]  # a redefinition (property setter) follows its getter
    if not attrs:
        raise LookupError(f"{name}: pin a function or class, not a module")
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "".join(text.splitlines(keepends=True)[first - 1:node.end_lineno])


def source_hash(name: str) -> str:
    return hashlib.sha256(source_of(name).encode()).hexdigest()[:12]


def sections(proof: Path) -> list[tuple[str, list[str]]]:
    """(heading, body lines) of each section of a proof file; a heading directly followed by
    another heading (a container of subsections) has an empty body."""
    out: list[tuple[str, list[str]]] = []
    for line in proof.read_text().splitlines():
        if _HEADING.match(line):
            out.append((line.lstrip("#").strip(), []))
        elif out and line.strip():
            out[-1][1].append(line)
    return out


def pins(proof: Path) -> tuple[list[Pin], list[str]]:
    """Every pin of `proof`, and the problems (a section without a pin line, a bad pin)."""
    found, problems = [], []
    for heading, body in sections(proof):
        if not body:
            continue
        lines = [m for m in map(_LINE.match, body) if m]
        if len(lines) != 1:
            problems.append(f"{proof.name} section {heading!r}: needs exactly one "
                            f"'Proves: name @ hash; ...' line, has {len(lines)}")
            continue
        for item in lines[0]["pins"].split("; "):
            m = _PIN.match(item.strip())
            if m is None:
                problems.append(f"{proof.name} section {heading!r}: bad pin {item!r} "
                                "(want 'module.name @ <12 hex>')")
                continue
            found.append(Pin(proof, heading, m["name"], m["hash"]))
    return found, problems


def stale() -> list[str]:
    """Every pin whose source changed (or vanished), and every section problem."""
    out = []
    for proof in PROOFS:
        found, problems = pins(proof)
        out += problems
        for pin in found:
            try:
                now = pin.current()
            except (LookupError, OSError) as exc:
                out.append(f"{proof.name} section {pin.section!r}: {pin.name} cannot be read "
                           f"({exc}); point the pin at the code that proves it")
                continue
            if now != pin.recorded:
                out.append(f"{proof.name} section {pin.section!r}: {pin.name} changed "
                           f"({pin.recorded} -> {now}); re-read the section, then run {UPDATE}")
    return out


def update() -> int:
    """Rewrite every pin line with the current hashes; the number of pins that changed."""
    changed = 0
    for proof in PROOFS:
        lines = proof.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            m = _LINE.match(line.rstrip("\n"))
            if not m:
                continue
            items = []
            for item in m["pins"].split("; "):
                name = item.split(" @ ")[0].strip()
                new = source_hash(name)
                changed += item.strip() != f"{name} @ {new}"
                items.append(f"{name} @ {new}")
            lines[i] = "Proves: " + "; ".join(items) + "\n"
        proof.write_text("".join(lines))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.proof_pins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="record the current hashes")
    args = parser.parse_args(argv)
    if args.update:
        print(f"{update()} pin(s) updated")
    problems = stale()
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())

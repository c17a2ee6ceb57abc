"""MkDocs hooks: the generated pages (reference from the code, benchmarks from the benches'
JSON) are added to the site at build time, so no committed copy can go stale."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.structure.files import File

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_reference  # noqa: E402
import render_benchmarks  # noqa: E402


def on_files(files, config):
    pages = {**gen_reference.PAGES, "benchmarks.md": render_benchmarks.page}
    for name, make in pages.items():
        files.append(File.generated(config, name, content=make()))
    return files

"""Every bench that prints figures has a current table on the benchmarks page.

A bench (a script under bench/ with a `__main__` block) must write its figures through
`bench.results.write_result`, and bench/results must hold a table it wrote, unless
`bench.results.NOT_RUN` says why it has none yet. The page is rendered from bench/results at
the docs build, so it is stale when a table on it no longer matches a bench: a table whose
command names a script that is gone, that lacks its provenance, or a bench listed as not run
that has a table after all. No Spark, no data: these read files only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import results
from docs.render_benchmarks import not_run, page

BENCH = results.ROOT / "bench"
PROVENANCE = ("title", "command", "date", "machine", "commit", "columns", "rows")


def _benches() -> list[str]:
    return sorted(f"bench/{p.name}" for p in BENCH.glob("*.py")
                  if 'if __name__ == "__main__":' in p.read_text())


def _results() -> dict[Path, dict]:
    return {p: json.loads(p.read_text()) for p in sorted(results.RESULTS.glob("*.json"))}


def test_every_bench_writes_its_figures_through_write_result():
    silent = [b for b in _benches() if "write_result" not in (results.ROOT / b).read_text()]
    assert not silent, f"benches printing figures without bench.results.write_result: {silent}"


@pytest.mark.parametrize("bench", _benches())
def test_each_bench_has_a_table_or_says_why_not(bench):
    have = {results.bench_of(r) for r in _results().values()}
    if bench in results.NOT_RUN:
        assert bench not in have, (f"{bench} has a table in bench/results: drop it from "
                                   "bench.results.NOT_RUN")
        assert len(results.NOT_RUN[bench]) > 20, f"{bench}: say why it has no table"
    else:
        assert bench in have, (f"{bench} prints figures but bench/results has no table it "
                               "wrote: run it (docs/development.md#benches) or add it to "
                               "bench.results.NOT_RUN with the reason")


def test_no_table_is_stale():
    benches = set(_benches())
    for path, r in _results().items():
        missing = [k for k in PROVENANCE if k not in r]
        assert not missing, f"{path.name} lacks {missing}"
        assert results.bench_of(r) in benches, (
            f"{path.name} was written by {r['command']!r}, not by a bench of bench/")
        assert all(len(row) == len(r["columns"]) for row in r["rows"]), path.name
    assert {k.split()[0] for k in results.NOT_RUN} <= benches, (
        "NOT_RUN names a script that is not a bench")


def test_the_page_renders_every_table_and_every_bench_without_one():
    md = page()
    for r in _results().values():
        assert f"## {r['title']}\n" in md
        assert f"`{r['command']}`" in md
    assert not_run() == results.NOT_RUN
    for bench in results.NOT_RUN:
        assert f"- `{bench}`:" in md

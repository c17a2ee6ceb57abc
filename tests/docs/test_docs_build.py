"""The documentation as a product: the site builds strictly, the README stays one page, the
runnable examples of the README and the docs run, the CLI explains itself, and a headless
browser renders the built site."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs import cli, harness
from jobs.spark import tables
from jobs.spark.zones import check_read_only

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Lab-notebook phrasing: figures belong to the benchmarks page, written by the benches.
LAB_NOTES = re.compile(r"measured (on )?20\d\d-|this sitting|last session|\(was \d"
                       r"|, was \d+(\.\d+)? s")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def test_the_site_builds_strictly_with_every_page_in_the_nav(site: Path) -> None:
    for page in ("index.html", "reference/cli/index.html", "reference/config/index.html",
                 "reference/tables/index.html", "reference/bad-inputs/index.html",
                 "benchmarks/index.html", "proofs/collection/index.html"):
        assert (site / page).is_file(), page


def test_the_site_loads_nothing_from_elsewhere(site: Path) -> None:
    """Read offline as it is read online: no page pulls a script, a style sheet or a font from
    another host (Material's Google fonts and mermaid's CDN script did)."""
    external = re.compile(r"""<(?:script|link)[^>]+(?:src|href)=["']https?://""")
    pages = sorted(site.rglob("*.html"))
    assert pages
    assert [str(p.relative_to(site)) for p in pages if external.search(p.read_text())] == []
    assert "raw zone (owner only)" in (site / "index.html").read_text()  # the zones diagram


def test_generated_reference_is_never_stale(site: Path) -> None:
    """The reference pages are generated at build time; they carry what the code says now."""
    tables_html = (site / "reference/tables/index.html").read_text()
    for table in (t for t in vars(tables).values() if isinstance(t, tables.Table)):
        assert str(table) in tables_html, table
    assert "trajpriv_pub.synthetic_trajectories" in tables_html
    assert "trajpriv_pub.synthetic_points" in tables_html
    config_html = (site / "reference/config/index.html").read_text()
    assert "collect.epsilon" in config_html and "storage.metastore_wait_s" in config_html
    cli_html = (site / "reference/cli/index.html").read_text()
    for command in harness.COMMAND_SUMMARY:
        assert f"trajpriv {command}" in cli_html, command
    proof_html = (site / "proofs/collection/index.html").read_text()
    assert "Why TP and ATP are epsilon-LDP" in proof_html  # rendered from udfs/PROOF.md


def test_readme_is_one_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150


def test_no_lab_notes_in_the_docs() -> None:
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}" for p in _pages()
             for i, line in enumerate(p.read_text().splitlines(), 1) if LAB_NOTES.search(line)]
    assert not found, "\n".join(found)


def test_no_docstring_cites_a_design_file_outside_the_repo() -> None:
    cited = [f"{p.relative_to(ROOT)}" for pkg in ("jobs", "udfs", "models", "airflow_dags")
             for p in (ROOT / pkg).rglob("*.py") if "DESIGN.md" in p.read_text()]
    assert not cited, cited


def _runnable_commands() -> list[str]:
    """The commands of every fenced block marked ```bash runnable, continuation lines joined."""
    out = []
    for page in _pages():
        for block in re.findall(r"```bash runnable\n(.*?)```", page.read_text(), re.S):
            for line in block.splitlines():
                line = line.split("  #", 1)[0].rstrip()
                if line.startswith("trajpriv "):
                    out.append(line)
                elif line.strip() and out:
                    out[-1] += " " + line.strip()
    return out


def _run(argv: list[str]) -> tuple[int, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, buf.getvalue()


def test_runnable_examples() -> None:
    """`--help` lines run as written; `trajpriv sql` queries are read-only and name only
    published tables of the catalogue (running them on data is the SQL tests' job)."""
    commands = _runnable_commands()
    assert len(commands) >= 3
    known = {str(t) for t in vars(tables).values() if isinstance(t, tables.Table)}
    for command in commands:
        argv = shlex.split(command)[1:]
        if "--help" in argv:
            assert _run(argv)[0] == 0, command
            continue
        assert argv[0] == "sql", command
        query = argv[1]
        check_read_only(query)
        for name in re.findall(r"\btrajpriv_\w+\.\w+", query):
            assert name in known and name.startswith(tables.PUB_DB), (command, name)


def test_help_lists_every_command_with_a_line() -> None:
    code, text = _run(["--help"])
    assert code == 0
    for command, summary in harness.COMMAND_SUMMARY.items():
        assert re.search(rf"^  {command} +{re.escape(summary)}$", text, re.M), command
    assert set(harness.COMMAND_SUMMARY) == {*cli.STAGES, "run", "sql", "budget", "serve"}


@pytest.mark.parametrize("command", ["collect", "sql", "budget", "serve"])
def test_command_help_lists_flags_with_defaults(command: str) -> None:
    code, text = _run([command, "--help"])
    assert code == 0
    assert harness.COMMAND_SUMMARY[command] in " ".join(text.split())
    assert "--config" in text and "(default:" in text


@pytest.mark.slow
def test_headless_browser_renders_the_site(site: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed: `make browser` installs Debian's chromium")
    for page, expect in (("index.html", "privacy layer"),
                         ("reference/config/index.html", "collect.epsilon")):
        shot = tmp_path / (page.replace("/", "_") + ".png")
        args = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
                "--virtual-time-budget=3000"]
        subprocess.run([*args, f"--screenshot={shot}", (site / page).as_uri()],
                       check=True, timeout=120, capture_output=True)
        assert shot.stat().st_size > 20_000, page  # a blank page is a few KB
        dom = subprocess.run([*args, "--dump-dom", (site / page).as_uri()], check=True,
                             timeout=120, capture_output=True, text=True).stdout
        assert expect in dom and 'class="md-nav' in dom, page
        if os.environ.get("TRAJPRIV_KEEP_SHOTS"):
            shutil.copy(shot, Path(os.environ["TRAJPRIV_KEEP_SHOTS"]) / shot.name)

"""The house's import rules (pyproject.toml [tool.importlinter], DESIGN section 1) hold: the
layers jobs > models > udfs, no Spark in the core or in a stage's pure modules, stages importing
one another only downwards. Checked with import-linter on the source tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LINT), "--config", str(config), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


def test_every_import_contract_is_kept():
    out = lint(ROOT / "pyproject.toml")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_broken_rule_is_reported(tmp_path):
    """The check can fail: a contract the tree breaks (the adapter imports pyspark)."""
    config = tmp_path / "broken.toml"
    config.write_text(textwrap.dedent("""
        [tool.importlinter]
        root_packages = ["jobs"]
        include_external_packages = true

        [[tool.importlinter.contracts]]
        name = "no Spark in the adapter (false on purpose)"
        type = "forbidden"
        source_modules = ["jobs.spark.session"]
        forbidden_modules = ["pyspark"]
    """))
    out = lint(config)
    assert out.returncode != 0 and "BROKEN" in out.stdout, out.stdout[-2000:]

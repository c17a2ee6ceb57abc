"""`trajpriv` runs the stages of its registry and fails loudly when one is missing."""

from __future__ import annotations

import pytest

from jobs import cli


def test_every_stage_of_the_registry_imports_with_its_run():
    for name in cli.STAGES:
        module = cli.load_stage(name)
        assert module.__name__ == f"jobs.{name}.stage" and callable(module.run)


def test_a_missing_stage_fails_run_with_one_line(monkeypatch, capsys):
    """Before: a stage whose module was renamed was skipped ("not built yet") and `trajpriv
    run` reported success."""
    monkeypatch.setattr(cli, "STAGES", (*cli.STAGES, "renamed_stage"))
    assert cli.main(["run", "--set", "storage.root=/nonexistent/never-used"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("trajpriv run: error: stage renamed_stage does not import"), err
    assert cli.main(["renamed_stage"]) == 1


def test_unknown_command_is_a_usage_error(capsys):
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    with pytest.raises(Exception, match="unknown stage"):
        cli.load_stage("nope")

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


def test_a_failure_line_names_the_cause_spark_wrapped():
    """Measured defect: the last line kept only the wrapper's first line (`PythonException: An
    exception was thrown from the Python worker:`), not the worker's error."""
    from jobs.harness import MESSAGE_LIMIT, describe_failure

    class PythonException(Exception):
        pass

    class Py4JJavaError(Exception):
        pass

    worker = PythonException(
        "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n  File \"/x/stage.py\", line 3, in kernel\n"
        "    n = int(v)\nOverflowError: cannot convert float infinity to integer\n")
    line = describe_failure(worker)
    assert line.startswith("PythonException: OverflowError: cannot convert float infinity")
    jvm = Py4JJavaError(
        "An error occurred while calling o262.insertInto.\n: org.apache.spark.SparkException: "
        "Job aborted.\n\tat org.apache.spark.X.y(X.scala:1)\nCaused by: java.io.IOException: "
        "No space left on device\n\tat java.io.FileOutputStream.write(Native Method)\n")
    assert "java.io.IOException: No space left on device" in describe_failure(jvm)
    huge = describe_failure(ValueError("x" * 4_000_000))
    assert len(huge) <= MESSAGE_LIMIT and "\n" not in huge
    assert describe_failure(ValueError("plain")) == "ValueError: plain"

"""The harness every stage runs in (`trajpriv <stage>`, `spark-submit jobs/submit.py <stage>`).

A stage is a function `run(spark, cfg, ctx) -> dict` of figures. The harness parses the command
line, validates the config before any Spark work, builds the session, records the run in
`trajpriv_pub.runs` (status ok/failed with the figures) and turns every expected failure into one
clear line on stderr and a non-zero exit: a data engineer reads why, not a Java stack trace.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import logging
import os
import re
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.closing import closing_lines
from jobs.config import Config, load_config, packaged_config
from jobs.progress import spark_progress
from jobs.run_folder import write_trusted_figures
from udfs.errors import ConfigError, TrajprivError

log = logging.getLogger("trajpriv")

#: The `--config` default of every command: the project's own conf/default.yaml, wherever the
#: command runs from (a relative `conf/default.yaml` opened another folder's config, or none);
#: without a checkout, the copy the wheel ships as `jobs.conf`, also from a `--py-files` zip,
#: where it is no file path (a Traversable: pass it as is, never as `str`).
DEFAULT_CONFIG = packaged_config()

EXIT_USER_ERROR = 2
EXIT_FAILURE = 1


@dataclass
class StageContext:
    """What a stage knows about its own execution: ids, flags and where to put figures."""

    stage: str
    run_id: str
    started_at: dt.datetime
    args: argparse.Namespace
    figures: dict[str, Any] = field(default_factory=dict)


StageFn = Callable[[Any, Config, StageContext], dict[str, Any] | None]
ArgsFn = Callable[[argparse.ArgumentParser], None]


def new_run_id(stage: str) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"{stage}-{stamp}-{secrets.token_hex(3)}"


def add_overrides(
    parser: argparse.ArgumentParser,
    help: str = "override a config value (repeatable), e.g. --set study.epsilons=[1,4]",
) -> None:
    """`--set KEY.PATH=VALUE` (repeatable) into args.overrides: every entry point's override."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE", help=help
    )


#: One line per command of `trajpriv`: what `trajpriv --help` lists and each parser describes.
COMMAND_SUMMARY: dict[str, str] = {
    "datagen": "generate a Telecom-Shanghai-shaped slice of phone records (no real data needed)",
    "ingest": "read a raw source into the raw zone; refused records go to the quarantine",
    "study": "sweep mechanisms and epsilons in the trusted zone (nothing published or charged)",
    "collect": "release each trajectory once under local DP, charged to its user's budget",
    "train": "train the private model of users' days (central DP, charged per user)",
    "synthesize": "sample synthetic days from a train run (post-processing, spends nothing)",
    "evaluate": "score releases and synthetic days against real data; --attacks attacks them",
    "report": "render the evaluation into report.html and figures.json",
    "run": "every enabled stage in order, in one Spark session",
    "sql": "query the published tables (read-only)",
    "budget": "privacy spent and remaining per budget window",
    "serve": "JDBC/ODBC and Spark Connect endpoints over the published tables for analysts",
}


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's help ends with its default, unless the help already says it in words."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        return text if "default" in text else super()._get_help_string(action)


def build_parser(stage: str, add_args: ArgsFn | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"trajpriv {stage}", description=COMMAND_SUMMARY.get(stage, f"trajpriv {stage}"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="YAML config file")
    add_overrides(parser)
    parser.add_argument("--run-id", default=None, help="run id to record (default: generated)")
    parser.add_argument("--verbose", action="store_true",
                        help="Spark's INFO log and trajpriv's DEBUG lines (otherwise WARN, INFO)")
    if add_args is not None:
        add_args(parser)
    return parser


def apply_verbose(args: argparse.Namespace) -> None:
    """`--verbose`: Spark's INFO lines (TRAJPRIV_VERBOSE, read by jobs.spark.session before the
    JVM starts) and trajpriv's own DEBUG lines (a LiRA shadow's rounds, per-table figures)."""
    if getattr(args, "verbose", False):
        os.environ["TRAJPRIV_VERBOSE"] = "1"
        for name in ("trajpriv", "jobs", "models"):
            logging.getLogger(name).setLevel(logging.DEBUG)


def configure_logging() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
    for noisy in ("py4j", "pyspark"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


MESSAGE_LIMIT = 800  # characters of a failure line (a CR-only file made a 3.8 M-char one)
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning)\b(:.*)?$")


def describe_failure(exc: BaseException) -> str:
    """One readable line for an unexpected failure, its cause first, at most MESSAGE_LIMIT
    characters. Spark wraps the real error: a Python worker's exception is the last
    `SomethingError: ...` line of the worker traceback inside the PythonException, a JVM one
    the deepest `Caused by:` (both used to be lost behind the wrapper's first line)."""
    if isinstance(exc, TrajprivError):  # our own message: kept as written, only bounded
        text = str(exc)
        return text if len(text) <= 4 * MESSAGE_LIMIT else text[: 4 * MESSAGE_LIMIT - 1] + "…"
    name = type(exc).__name__
    lines = [ln.strip() for ln in str(exc).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("at ")]  # JVM stack frames
    cause = ""
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        cause = next((ln for ln in reversed(lines) if _EXC_LINE.match(ln)), "")
    if not cause:
        caused = [ln for ln in lines if ln.startswith("Caused by:")]
        cause = caused[-1].removeprefix("Caused by:").strip() if caused else ""
    first = lines[0] if lines else ""
    if cause and cause != first:
        return _clip(f"{name}: {cause} (in: {first[:120]})")
    return _clip(f"{name}: {first}")


_ENV_ERRNO = {  # errno -> (what happened, the fix): the machine's fault, not the code's
    errno.ENOSPC: ("no space left on device", "free space or move storage.root to a larger disk"),
    errno.EDQUOT: ("disk quota exceeded", "free space or move storage.root elsewhere"),
    errno.EROFS: ("read-only file system", "point storage.root at a writable folder"),
}
_ENV_TEXT = {"No space left on device": errno.ENOSPC, "Disk quota exceeded": errno.EDQUOT,
             "Read-only file system": errno.EROFS}


def environment_failure(exc: BaseException, root: Path) -> str | None:
    """One line for a failure of the machine rather than of the job (a disk that fills during
    a write, a root remounted read-only): what happened, the path, the fix; None for anything
    else. Found as an OSError in the exception chain, or as the OS's words inside a wrapped
    JVM or Python-worker error (`java.io.IOException: No space left on device`)."""
    seen, cur = set(), exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in _ENV_ERRNO:
            what, fix = _ENV_ERRNO[cur.errno]
            return f"{what} at {cur.filename or root} (storage.root {root}): {fix}"
        cur = cur.__cause__ or cur.__context__
    text = str(exc)
    for words, code in _ENV_TEXT.items():
        if words in text:
            what, fix = _ENV_ERRNO[code]
            at = re.search(re.escape(str(root)) + r"[^\s'\"),;]*", text)
            return f"{what} at {at.group(0) if at else root} (storage.root {root}): {fix}"
    return None


def _clip(text: str) -> str:
    text = " ".join(text.split())  # one line, whatever the message held
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def execute(
    stage: str,
    fn: StageFn,
    cfg: Config,
    args: argparse.Namespace,
    spark: Any,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Run one stage in an existing session and record it; re-raises after recording a failure."""
    from jobs.spark.catalog import RunRecord, record_run

    ctx = StageContext(
        stage=stage,
        run_id=run_id or new_run_id(stage),
        started_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
        args=args,
    )
    t0 = time.perf_counter()
    public_keys = public_figures_of(fn)
    log.info("stage %s started (run %s, dataset %s)", stage, ctx.run_id, cfg.dataset)
    status = "failed"
    try:
        finish_interrupted_ingests(spark, cfg, ctx)
        with spark_progress(spark, stage):  # the stage's own phases report in more detail
            result = fn(spark, cfg, ctx) or {}
        ctx.figures.update(result)
        status = "ok"
        return ctx.figures
    except BaseException as exc:
        ctx.figures["error"] = describe_failure(exc)
        raise
    finally:
        ctx.figures["wall_s"] = round(time.perf_counter() - t0, 3)
        published = ctx.figures
        if public_keys is not None:
            # The stage lists which figures are public by design; the rest are trusted-zone
            # (raw-derived counts, diagnostics) and stay in the run folder.
            published = public_view(fn, ctx.figures)
            try:
                write_trusted_figures(cfg, ctx.run_id, ctx.figures)
            except OSError as exc:
                log.warning("could not write the run folder of %s: %s", ctx.run_id, exc)
        try:
            record_run(spark, RunRecord(
                run_id=ctx.run_id,
                stage=stage,
                config_yaml=cfg.to_yaml(),
                started_at=ctx.started_at,
                finished_at=dt.datetime.now(dt.UTC).replace(tzinfo=None),
                status=status,
                figures=published,
            ))
        except Exception as rec_exc:  # recording must not hide the stage's own outcome
            log.warning("could not record run %s: %s", ctx.run_id, describe_failure(rec_exc))
        log.info("stage %s %s in %.1f s", stage, status, ctx.figures["wall_s"])


def public_figures_of(fn: StageFn):
    """The stage module's PUBLIC_FIGURES (None: the stage publishes every figure)."""
    return getattr(sys.modules.get(getattr(fn, "__module__", "")), "PUBLIC_FIGURES", None)


def public_view(fn: StageFn, figures: dict[str, Any]) -> dict[str, Any]:
    """The figures of a run that may leave the trusted zone: the runs table and the console
    line (Airflow keeps task logs where its users read them)."""
    keys = public_figures_of(fn)
    if keys is None:
        return figures
    return {k: v for k, v in figures.items() if k in keys or k == "error"}


def finish_interrupted_ingests(spark: Any, cfg: Config, ctx: StageContext) -> None:
    """Before any stage reads a table: finish an ingest killed among its table writes, so
    the raw tables are never a mix of two ingests (`jobs.ingest.stage.finish_pending`)."""
    staging = cfg.storage.root.resolve() / "staging"
    if staging.is_dir() and any(staging.glob("ingest-*/READY.json")):
        from jobs.ingest.stage import finish_pending

        ctx.figures["finished_ingests"] = finish_pending(spark, cfg)


def main(
    stage: str, fn: StageFn, argv: list[str] | None = None, add_args: ArgsFn | None = None
) -> int:
    """Entry point of one stage: parse, validate, run, report. Returns the process exit code."""
    configure_logging()
    parser = build_parser(stage, add_args)
    args = parser.parse_args(argv)
    apply_verbose(args)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"trajpriv {stage}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    from jobs.spark.session import get_spark, stop_spark

    spark = None
    try:
        spark = get_spark(cfg)
        run_id = args.run_id or new_run_id(stage)
        figures = execute(stage, fn, cfg, args, spark, run_id)
        print_outcome(stage, fn, figures, run_id, args)
        return 0
    except TrajprivError as exc:
        print(f"trajpriv {stage}: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Exception as exc:
        log.debug("stage %s failed", stage, exc_info=True)
        env = environment_failure(exc, cfg.storage.root.resolve())
        if env is not None:  # the machine's fault: exit 2 with the path, cause in the log
            log.error("stage %s: %s", stage, describe_failure(exc))
            print(f"trajpriv {stage}: error: {env}", file=sys.stderr)
            return EXIT_USER_ERROR
        print(f"trajpriv {stage}: failed: {describe_failure(exc)}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        stop_spark(spark)


def print_outcome(stage: str, fn: StageFn, figures: dict[str, Any], run_id: str,
                  args: argparse.Namespace, show_next: bool = True) -> None:
    """The `ok` line and the closing summary (tables written, epsilon, next command) on
    stdout, from the public figures only: Airflow shows stdout where its users read it."""
    public = public_view(fn, figures)
    print(f"trajpriv {stage}: ok {summarise(public)}")
    config = getattr(args, "config", None)
    custom = config is not None and str(config) != str(DEFAULT_CONFIG)
    for line in closing_lines(stage, public, run_id, str(config) if custom else None):
        if show_next or not line.startswith("next: "):
            print(f"  {line}")
    sys.stdout.flush()


def summarise(figures: dict[str, Any]) -> str:
    """A short one-line view of the scalar figures of a stage (for the console)."""
    scalars = {k: v for k, v in figures.items() if isinstance(v, (int, float, str))}
    return " ".join(f"{k}={v}" for k, v in list(scalars.items())[:12])

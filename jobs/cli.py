"""`trajpriv` command line: one sub-command per stage, `run` for all of them, `sql` to query.

Every stage is `jobs/<stage>/stage.py` with a `run(spark, cfg, ctx)` (and optionally `add_args`);
`STAGES` lists them in pipeline order and is the one path both entry points take (`trajpriv
<stage>` here, `spark-submit jobs/submit.py <stage>`). Stage modules are imported only when asked
for, so `trajpriv sql` does not load torch; a stage that does not import is an error, never a
silent skip.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path
from types import ModuleType

from jobs import harness
from jobs.config import STAGES as PIPELINE_STAGES
from udfs.errors import ConfigError, TrajprivError

log = logging.getLogger("trajpriv")

# Pipeline order (`jobs.config.STAGES`); `trajpriv run` runs every stage its config enables.
STAGES = PIPELINE_STAGES
USAGE = (
    "usage: trajpriv {" + ",".join((*STAGES, "run", "sql", "budget", "serve"))
    + "} [--config FILE] [--set K=V ...]\n"
    '       trajpriv sql "SELECT ..." | -f SCRIPT [--format table|csv|json] [--limit N] '
    "[--trusted] [--no-server]\n"
    "       trajpriv sql --stop\n"
    "       trajpriv budget [--config FILE] [--trusted] [--user USER_ID]\n"
    "       trajpriv serve [--config FILE] [--stop] [--wait] [--print-systemd-unit]"
)
HELP = (USAGE + "\n\ncommands:\n"
        + "\n".join(f"  {name:<11} {text}" for name, text in harness.COMMAND_SUMMARY.items())
        + "\n\n`trajpriv <command> --help` lists a command's flags with their defaults.")


def load_stage(name: str) -> ModuleType:
    """The stage's module, `jobs.<name>.stage`; an unknown name or a module that does not import
    raises (a renamed stage must fail `trajpriv run`, not vanish from it)."""
    if name not in STAGES:
        raise ConfigError(f"unknown stage {name!r}; the stages are {', '.join(STAGES)}")
    return importlib.import_module(f"jobs.{name}.stage")


def stage_enabled(name: str, cfg) -> bool:
    section = getattr(cfg, name, None)
    return bool(getattr(section, "enabled", True))


def load_or_say(name: str, prog: str) -> ModuleType | None:
    """`load_stage`, or None after one line on stderr saying which stage does not import."""
    try:
        return load_stage(name)
    except ImportError as exc:
        print(f"{prog}: error: stage {name} does not import ({type(exc).__name__}: {exc}); "
              f"every stage of jobs.cli.STAGES must exist as jobs/{name}/stage.py",
              file=sys.stderr)
        return None


def run_one(name: str, argv: list[str]) -> int:
    module = load_or_say(name, f"trajpriv {name}")
    if module is None:
        return harness.EXIT_FAILURE
    return harness.main(name, module.run, argv, getattr(module, "add_args", None))


def run_all(argv: list[str]) -> int:
    """Every enabled stage of `STAGES` in order, in one Spark session; stops at the first
    failure."""
    harness.configure_logging()
    present = {name: load_or_say(name, "trajpriv run") for name in STAGES}
    if None in present.values():
        return harness.EXIT_FAILURE

    def add_all_args(parser: argparse.ArgumentParser) -> None:
        for mod in present.values():
            if hasattr(mod, "add_args"):
                mod.add_args(parser)

    args = harness.build_parser("run", add_all_args).parse_args(argv)
    harness.apply_verbose(args)
    try:
        cfg = harness.load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"trajpriv run: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    from jobs.spark.session import get_spark, stop_spark

    spark = None
    current = "session"
    try:
        spark = get_spark(cfg)
        last = [name for name in present if stage_enabled(name, cfg)][-1:]
        for name, mod in present.items():
            current = name
            if not stage_enabled(name, cfg):
                print(f"trajpriv run: {name} disabled in config, skipped")
                continue
            run_id = harness.new_run_id(name)
            figures = harness.execute(name, mod.run, cfg, args, spark, run_id)
            # the next stage runs anyway: "next:" only after the last one
            harness.print_outcome(name, mod.run, figures, run_id, args, [name] == last)
        return 0
    except TrajprivError as exc:
        print(f"trajpriv {current}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    except Exception as exc:
        env = harness.environment_failure(exc, cfg.storage.root.resolve())
        if env is not None:  # a full or read-only disk: exit 2 naming the path
            print(f"trajpriv {current}: error: {env}", file=sys.stderr)
            return harness.EXIT_USER_ERROR
        print(f"trajpriv {current}: failed: {harness.describe_failure(exc)}", file=sys.stderr)
        return harness.EXIT_FAILURE
    finally:
        stop_spark(spark)


def _catalog_command(prog: str, args: argparse.Namespace, body) -> int:
    """Load the config, open the catalog, run `body(spark, cfg)`, always release the session;
    every failure is one line on stderr and exit 2 (what `sql` and `budget` share)."""
    harness.configure_logging()
    try:
        cfg = harness.load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    from jobs.spark.session import get_spark, stop_spark

    spark = None
    try:
        spark = get_spark(cfg, readonly=True)
        body(spark, cfg)
        return 0
    except Exception as exc:
        print(f"{prog}: error: {harness.describe_failure(exc)}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    finally:
        stop_spark(spark)


def _sql_parser() -> argparse.ArgumentParser:
    """`trajpriv sql`'s options."""
    from jobs.sql.render import FORMATS

    parser = argparse.ArgumentParser(
        prog="trajpriv sql", description=harness.COMMAND_SUMMARY["sql"],
        formatter_class=harness.HelpFormatter)
    parser.add_argument("query", nargs="?", help="one or more statements separated by ;")
    parser.add_argument("-f", "--file", help="a script of statements separated by ;")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table, csv or json (one array of rows per statement)")
    parser.add_argument("--config", default=harness.DEFAULT_CONFIG,
                        help="YAML config")
    harness.add_overrides(parser)
    parser.add_argument("--limit", type=int, default=None,
                        help="rows to print (None: 100 for table, all for csv and json); a "
                             "cut result says so on stderr")
    parser.add_argument("--trusted", action="store_true",
                        help="also read the raw and trusted zones (data stewards only)")
    parser.add_argument("--no-server", action="store_true",
                        help="run in this process (a fresh Spark session) instead of the "
                             "warm server")
    parser.add_argument("--stop", action="store_true",
                        help="stop this root's warm server and exit")
    parser.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                        help="seconds a server started now waits for the next query before "
                             "it stops (default $TRAJPRIV_SQL_IDLE_S or 600)")
    return parser


def run_sql(argv: list[str]) -> int:
    """Print the results of read-only statements over the published zone: the first thing a
    data engineer does. Answered by the warm server of the root (`jobs.sql`), started on first
    use; `--no-server` runs them in this process instead."""
    args = _sql_parser().parse_args(argv)
    if args.limit is None:  # an export (csv, json) is whole unless asked otherwise
        args.limit = TABLE_ROWS if args.format == "table" else -1
    prog = "trajpriv sql"
    try:
        cfg = harness.load_config(args.config, args.overrides)
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    from jobs.spark.relocation import require_existing_root
    from jobs.sql import client

    root = cfg.storage.root.resolve()
    if args.stop:
        try:
            pid = client.stop_server(root)
        except TrajprivError as exc:
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return harness.EXIT_USER_ERROR
        print(f"{prog}: stopped the server of {root} (pid {pid})" if pid is not None
              else f"{prog}: no server running for {root}", file=sys.stderr)
        return 0
    try:
        statements = _statements(args)  # the text first: a refusal needs no root
        require_existing_root(root)
    except TrajprivError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    if args.trusted:
        print(f"{prog}: --trusted: the raw and trusted zones are readable in this query",
              file=sys.stderr)
    if args.no_server or _spark_in_this_process():
        return _sql_here(args, cfg, statements)
    from jobs.sql import endpoint

    if not args.trusted and endpoint.serving(cfg):  # one zone rule: the endpoints' own
        return _sql_here(args, cfg, statements, remote=endpoint.connect_url(cfg))
    try:
        client.ensure_server(root, str(Path(str(args.config)).resolve()), args.overrides,
                             client.idle_timeout(args.idle_timeout))
        reply = client.request(root, {"op": "query", "statements": [s.text for s in statements],
                                      "trusted": args.trusted, "limit": args.limit})
    except TrajprivError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    if reply is None:
        print(f"{prog}: error: the sql server of {root} stopped before it answered (a stage "
              "took the root?): rerun", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    return _print_results(args, statements, reply)


#: Rows `trajpriv sql` prints as a table when no --limit is given (a screenful, not an export).
TABLE_ROWS = 100


def _statements(args: argparse.Namespace):
    """The statements to run, from the query or `-f`, each checked read-only before any
    session starts."""
    from jobs.spark.zones import check_read_only
    from jobs.sql.script import split_statements

    if (args.query is None) == (args.file is None):
        raise ConfigError("give a query or -f SCRIPT (one of them)")
    if args.file is not None:
        path = Path(args.file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        statements = split_statements(text, str(path))
    else:
        statements = split_statements(args.query, "the query")
    if not statements:
        raise ConfigError("no statement to run")
    for st in statements:
        check_read_only(st.text)
    return statements


def _spark_in_this_process() -> bool:
    """Whether this process already holds a Spark session (a notebook, a test): the query runs
    in it, since a server could not open the root this process holds."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is not None


def _sql_here(args: argparse.Namespace, cfg, statements, remote: str | None = None) -> int:
    """Run the statements in this process's session (`--no-server`), or as a Spark Connect
    client of the running endpoints (`remote`), whose catalog and guard hold for it too."""
    from jobs.spark.session import get_spark, stop_spark, verbose

    harness.configure_logging()
    server_log = logging.getLogger("trajpriv.sql.server")
    level = server_log.level
    if not verbose():  # a failure is one line here; its trace is for --verbose
        server_log.setLevel(logging.WARNING)
    spark = None
    try:
        if remote is not None:
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(remote).getOrCreate()
        else:
            spark = get_spark(cfg, readonly=True)
        from jobs.sql.server import run_script

        reply = run_script(spark, [s.text for s in statements], args.trusted, args.limit)
    except Exception as exc:
        log.debug("trajpriv sql failed", exc_info=True)
        print(f"trajpriv sql: error: {harness.describe_failure(exc)}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    finally:
        stop_spark(spark)
        server_log.setLevel(level)  # an in-process caller (a notebook, a test) keeps its own
    return _print_results(args, statements, reply)


def _print_results(args: argparse.Namespace, statements, reply: dict) -> int:
    """Every result on stdout in the chosen format; a failure as one line on stderr."""
    from jobs.sql.render import render

    results = reply.get("results", [])
    for i, result in enumerate(results):
        render(result, args.format, sys.stdout)
        if result.get("truncated"):
            which = f"statement {i + 1}: " if len(statements) > 1 else ""
            print(f"trajpriv sql: {which}printed {len(result['rows'])} of "
                  f"{result.get('total', '?')} rows (--limit {args.limit}); pass a larger "
                  "--limit, or --limit -1 for all", file=sys.stderr)
    sys.stdout.flush()
    if reply.get("ok"):
        return 0
    where = ""
    failed = reply.get("failed")
    if failed is not None and len(statements) > 1:
        st = statements[failed]
        source = args.file or "the query"
        where = f"statement {failed + 1} of {len(statements)} ({source}, line {st.line}): "
    print(f"trajpriv sql: error: {where}{reply.get('error')}", file=sys.stderr)
    return harness.EXIT_USER_ERROR


def run_budget(argv: list[str]) -> int:
    """Privacy spent and remaining per budget window (distribution; per user with --trusted)."""
    parser = argparse.ArgumentParser(prog="trajpriv budget",
                                     description=harness.COMMAND_SUMMARY["budget"],
                                     formatter_class=harness.HelpFormatter)
    parser.add_argument("--config", default=harness.DEFAULT_CONFIG,
                        help="YAML config")
    harness.add_overrides(parser)
    parser.add_argument("--trusted", action="store_true",
                        help="per user (raw user ids: data stewards only)")
    parser.add_argument("--user", default=None, help="one user's rows (implies --trusted)")
    parser.add_argument("--limit", type=int, default=100, help="rows to print")
    args = parser.parse_args(argv)

    def body(spark, cfg) -> None:
        from jobs.spark.ledger import budget_table

        per_user = bool(args.trusted or args.user)
        table = budget_table(spark, cfg.dataset, cfg.privacy.budget, cfg.privacy.window_days,
                             per_user=per_user)
        if args.user:
            table = table.where(table.user_id == args.user)
        print(f"trajpriv budget: dataset {cfg.dataset}, privacy unit {cfg.privacy.unit}, "
              f"budget {cfg.privacy.budget:g} per {cfg.privacy.window_days} days (collection, "
              "local epsilon); training (epsilon, delta) per user beside it"
              + ("" if per_user else "; distribution over users (--trusted: per user)"))
        table.show(args.limit, truncate=False)

    return _catalog_command("trajpriv budget", args, body)


def run_serve(argv: list[str]) -> int:
    """Start (or `--stop`) the analysts' endpoints: Spark's Thrift JDBC/ODBC server and Spark
    Connect over the published zone (`jobs.sql.endpoint`)."""
    parser = argparse.ArgumentParser(
        prog="trajpriv serve", description=harness.COMMAND_SUMMARY["serve"],
        formatter_class=harness.HelpFormatter)
    parser.add_argument("--config", default=harness.DEFAULT_CONFIG,
                        help="YAML config")
    harness.add_overrides(parser)
    parser.add_argument("--stop", action="store_true", help="stop the running endpoints")
    parser.add_argument("--wait", action="store_true",
                        help="run in the foreground until stopped (a service manager's unit)")
    parser.add_argument("--print-systemd-unit", action="store_true",
                        help="print a hardened systemd unit that runs the endpoints as this "
                             "account, and exit")
    args = parser.parse_args(argv)
    prog = "trajpriv serve"
    try:
        cfg = harness.load_config(args.config, args.overrides)
        from jobs.sql import endpoint

        if args.print_systemd_unit:
            from jobs.sql.unit import home_warning, unit_text

            sys.stdout.write(unit_text(cfg, args.config, args.overrides))
            warning = home_warning()
            if warning:
                print(f"{prog}: warning: {warning}", file=sys.stderr)
            return 0
        if args.stop:
            pid = endpoint.stop(cfg)
            print(f"{prog}: stopped the endpoints (pid {pid})" if pid is not None
                  else f"{prog}: no endpoints running on port {cfg.serve.port}", file=sys.stderr)
            return 0
        if args.wait:
            return endpoint.start(cfg, wait=True)
        pid = endpoint.start(cfg)
    except TrajprivError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return harness.EXIT_USER_ERROR
    print(f"{prog}: ready (pid {pid}): JDBC/ODBC {endpoint.jdbc_url(cfg)}, Spark Connect "
          f"{endpoint.connect_url(cfg)}; log {endpoint.log_path(cfg)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(HELP if argv else USAGE)
        return 0 if argv else harness.EXIT_USER_ERROR
    command, rest = argv[0], argv[1:]
    if command == "sql":
        return run_sql(rest)
    if command == "budget":
        return run_budget(rest)
    if command == "serve":
        return run_serve(rest)
    if command == "run":
        return run_all(rest)
    if command in STAGES:
        return run_one(command, rest)
    print(f"trajpriv: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return harness.EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

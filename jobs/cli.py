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
import sys
from types import ModuleType

from jobs import harness
from udfs.errors import ConfigError, TrajprivError

# Pipeline order; `trajpriv run` runs every stage here that its config enables.
STAGES = ("datagen", "ingest", "study", "collect", "train", "synthesize", "evaluate", "report")
USAGE = (
    "usage: trajpriv {" + ",".join((*STAGES, "run", "sql", "budget"))
    + "} [--config FILE] [--set K=V ...]\n"
    '       trajpriv sql "SELECT ..." [--config FILE] [--limit N] [--trusted]\n'
    "       trajpriv budget [--config FILE] [--trusted] [--user USER_ID]"
)


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
        for name, mod in present.items():
            current = name
            if not stage_enabled(name, cfg):
                print(f"trajpriv run: {name} disabled in config, skipped")
                continue
            figures = harness.execute(name, mod.run, cfg, args, spark)
            print(f"trajpriv {name}: ok {harness.summarise(harness.public_view(mod.run, figures))}")
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


def run_sql(argv: list[str]) -> int:
    """Print a query's result over the published zone: the first thing a data engineer does."""
    parser = argparse.ArgumentParser(prog="trajpriv sql")
    parser.add_argument("query")
    parser.add_argument("--config", default="conf/default.yaml")
    harness.add_overrides(parser)
    parser.add_argument("--limit", type=int, default=100, help="rows to print (default 100)")
    parser.add_argument("--trusted", action="store_true",
                        help="also read the raw and trusted zones (data stewards only)")
    args = parser.parse_args(argv)

    def body(spark, cfg) -> None:
        from jobs.spark.zones import check_read_only

        check_read_only(args.query)  # also with --trusted: sql never writes
        if args.trusted:
            print("trajpriv sql: --trusted: the raw and trusted zones are readable in this query",
                  file=sys.stderr)
        else:
            from jobs.spark.zones import check_analyst_query

            check_analyst_query(spark, args.query)
        spark.sql(args.query).show(args.limit, truncate=False)

    return _catalog_command("trajpriv sql", args, body)


def run_budget(argv: list[str]) -> int:
    """Privacy spent and remaining per budget window (distribution; per user with --trusted)."""
    parser = argparse.ArgumentParser(prog="trajpriv budget")
    parser.add_argument("--config", default="conf/default.yaml")
    harness.add_overrides(parser)
    parser.add_argument("--trusted", action="store_true",
                        help="per user (raw user ids: data stewards only)")
    parser.add_argument("--user", default=None, help="one user's rows (implies --trusted)")
    parser.add_argument("--limit", type=int, default=100, help="rows to print (default 100)")
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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else harness.EXIT_USER_ERROR
    command, rest = argv[0], argv[1:]
    if command == "sql":
        return run_sql(rest)
    if command == "budget":
        return run_budget(rest)
    if command == "run":
        return run_all(rest)
    if command in STAGES:
        return run_one(command, rest)
    print(f"trajpriv: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return harness.EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())

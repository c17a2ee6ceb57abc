"""Benchmark: the `trajpriv evaluate` stage, the committed code (HEAD) against the working tree.

    .venv/bin/python bench/bench_evaluate_stage.py --root /tmp/evalroot --prepare \
        --set datagen.users=1500                    # datagen + ingest + collect first, if needed
    .venv/bin/python bench/bench_evaluate_stage.py --root /tmp/full   # a root already collected
    .venv/bin/python bench/bench_evaluate_stage.py --root /tmp/full --ref 6a6322e
                                                    # against an older commit

Input: a data root where `trajpriv datagen`, `ingest` and `collect` have run for the config's
dataset (default conf/telecom_shanghai.yaml: ATP, TP and EXP at epsilon 1, 4 and 10). With
`--prepare` the bench runs the missing stages itself, each as its own `trajpriv <stage>`
process (`bench.bench_pipeline.run_measured`), and keeps the root.

Both variants run through the stage harness (`jobs.harness.execute`) in one Spark session, back
to back (`--repeat` alternates them again): "old" is `jobs/evaluate/stage.py` and
`jobs/evaluate/summaries.py` as committed at `--ref` (loaded from `git show` into a temporary
folder, pickled by value for the Python workers; the ref must have the per-stage layout of
jobs/, so refs before the house move cannot be loaded), "new" is the working tree. The bench then
checks that both runs wrote the same evaluation rows (method, setting, metric, value), bit for
bit, and prints the wall time of each run with the stage's own per-part timings. CPU seconds of
the whole process tree say how much work each did on a shared machine. Attacks are off
(`evaluate.attacks=false`) unless a `--set` turns them on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_pipeline import machine, stage_rows  # noqa: E402
from bench.proc_tree import tree_cpu_seconds  # noqa: E402
from bench.results import write_result  # noqa: E402
from jobs.harness import add_overrides  # noqa: E402

PREPARE = ("datagen", "ingest", "collect")


def has_rows(spark, table: str, dataset: str) -> bool:
    return spark.catalog.tableExists(table) and bool(
        spark.table(table).where(f"dataset = '{dataset}'").limit(1).count()
    )


def prepare(args: argparse.Namespace, root: Path) -> list[dict]:
    """Run datagen, ingest and collect (each its own process) into `root`."""
    code, rows, log = stage_rows(list(PREPARE), args.config, root, args.overrides)
    for row in rows:
        print(f"prepare: {row['stage']} {row['status']} in {row['wall_s']:.1f} s", flush=True)
    if code != 0:
        print(log[-3000:], file=sys.stderr)
        raise SystemExit(code)
    return rows


def old_modules(ref: str, folder: Path):
    """jobs/evaluate/stage.py and jobs/evaluate/summaries.py at `ref` as modules `_old_evaluate` and
    `_old_mobility_spark` (the former importing the latter), pickled by value for Spark."""
    from pyspark import cloudpickle

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout

    (folder / "_old_mobility_spark.py").write_text(show("jobs/evaluate/summaries.py"))
    text = show("jobs/evaluate/stage.py")
    text = text.replace("from jobs.evaluate.summaries ", "from _old_mobility_spark ")
    (folder / "_old_evaluate.py").write_text(text)
    sys.path.insert(0, str(folder))
    mods = {}
    for name in ("_old_mobility_spark", "_old_evaluate"):
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        cloudpickle.register_pickle_by_value(mod)
        mods[name] = mod
    return mods["_old_evaluate"]


def evaluation_rows(spark, run_id: str) -> list[tuple]:
    pdf = (
        spark.table("trajpriv_trusted.evaluation")
        .where(f"run_id = '{run_id}'")
        .select("method", "setting", "metric", "value")
        .toPandas()
    )
    # repr: NaN (a null setting, an undefined value) equals itself, and a float's repr
    # round-trips exactly, so equal text means equal bits
    return sorted((m, repr(s), k, repr(v)) for m, s, k, v in pdf.itertuples(index=False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "conf" / "telecom_shanghai.yaml"))
    parser.add_argument("--root", required=True, help="data root (kept)")
    add_overrides(parser, "config override (repeatable)")
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="run datagen, ingest and collect into --root when it has no collection yet",
    )
    parser.add_argument(
        "--ref",
        default="HEAD",
        help="git revision of the old code (6a6322e: before the one-pass rewrite)",
    )
    parser.add_argument("--variants", default="old,new", help="order of the timed runs")
    parser.add_argument("--repeat", type=int, default=1, help="run the variants this many times")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    root = Path(args.root).resolve()

    from jobs.config import load_config
    from jobs.evaluate import stage as new_evaluate
    from jobs.harness import execute
    from jobs.spark.session import get_spark

    # the divergences only (attacks train shadow models: --set evaluate.attacks=true to add them)
    sets = [f"storage.root={root}", "evaluate.attacks=false", *args.overrides]
    cfg = load_config(args.config, sets)
    prepared: list[dict] = []
    if not (root / "metastore_db").is_dir():
        if not args.prepare:
            parser.error(f"--root {root} holds no catalog: pass --prepare to fill it")
        prepared = prepare(args, root)
    spark = get_spark(cfg)
    if not has_rows(spark, "trajpriv_pub.perturbed_trajectories", cfg.dataset):
        if not args.prepare:
            parser.error(f"no collection of {cfg.dataset!r} under {root}: pass --prepare")
        spark.stop()
        prepared = prepare(args, root)
        spark = get_spark(cfg)
    from pyspark.sql import functions as F

    pub = spark.table("trajpriv_pub.perturbed_trajectories").where(f"dataset = '{cfg.dataset}'")
    size = (
        pub.groupBy("mechanism", "epsilon")
        .agg(F.count(F.lit(1)).alias("t"), F.sum("n").alias("p"))
        .collect()
    )
    print(
        f"input: {cfg.dataset} under {root}: {len(size)} settings, "
        f"{sum(r['t'] for r in size):,} published trajectories, "
        f"{sum(r['p'] for r in size):,} published points",
        flush=True,
    )

    with tempfile.TemporaryDirectory(prefix="bench_evaluate_old_") as tmp:
        variants = {"new": new_evaluate}
        if "old" in args.variants:
            variants["old"] = old_modules(args.ref, Path(tmp))
        runs = []
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for rep in range(args.repeat):
            for name in args.variants.split(","):
                run_id = f"bench-evaluate-{name}-{stamp}-{rep}"
                ns = argparse.Namespace(attacks=False)
                cpu0, t0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
                figures = execute("evaluate", variants[name].run, cfg, ns, spark, run_id)
                wall = time.perf_counter() - t0
                cpu = tree_cpu_seconds(os.getpid()) - cpu0
                runs.append(
                    {
                        "variant": name,
                        "run_id": run_id,
                        "wall_s": round(wall, 1),
                        "cpu_s": round(cpu, 1),
                        "parts_s": figures.get("seconds"),
                        "rows": figures.get("rows"),
                    }
                )
                print(
                    f"{name:<4} run {rep}: {wall:8.1f} s wall, {cpu:8.1f} s CPU (process "
                    f"tree), parts {figures.get('seconds')}",
                    flush=True,
                )
    evaluation_rows_cache = {r["run_id"]: evaluation_rows(spark, r["run_id"]) for r in runs}
    reference = evaluation_rows_cache[runs[0]["run_id"]]
    same = {k: rows == reference for k, rows in evaluation_rows_cache.items()}
    spark.stop()
    print(f"evaluation rows: {len(reference)} per run; identical across runs: {all(same.values())}")
    for r in runs:
        if not same[r["run_id"]]:
            theirs = set(evaluation_rows_cache[r["run_id"]])
            print(
                f"  {r['run_id']} DIFFERS from {runs[0]['run_id']}: "
                f"{sorted(theirs ^ set(reference))[:6]}"
            )
    write_result("evaluate_stage", f"Evaluate stage on {cfg.dataset}, variants {args.variants}",
                 ["variant", "run", "wall s", "CPU s", "parts s"],
                 [[r["variant"], r["run_id"].rsplit("-", 1)[1], r["wall_s"], r["cpu_s"],
                   json.dumps(r["parts_s"])] for r in runs],
                 notes=f"Old code: git revision {args.ref}. Evaluation rows identical across "
                       f"runs: {all(same.values())}.")
    figures = {
        "config": args.config,
        "overrides": args.overrides,
        "root": str(root),
        "prepared": prepared,
        "runs": runs,
        "identical_rows": all(same.values()),
        "machine": machine(),
    }
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Empirical privacy audit: lower confidence bounds on the privacy loss of every mechanism.

Usage: .venv/bin/python bench/audit_privacy.py [--samples 1000000] [--seed 0] [--out PATH]

The command line of the auditor in `models/audit.py` (method, rows and bounds are documented
there): runs the table, writes it as markdown to `--out` (default bench/out/audit_privacy.md)
and prints it. Exits 1 if a correct row fails, 3 if a broken row (a deliberately over-spending
variant) passes.
Runtime about 4 minutes on one busy core at the default sample size (printed at the end).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402
from models.audit import (  # noqa: E402
    ALPHA,
    Row,
    check_pgpp_equivalence,
    failures,
    rows,
    run_table,
)

OUT = Path(__file__).resolve().parent / "out" / "audit_privacy.md"

# How the audited table is shown (the markdown file and the benchmarks page): presentation, so
# it lives with the bench, not with the audit.
COLUMNS = ["mechanism", "epsilon claimed", "empirical lower bound (95%)", "samples per input",
           "event", "neighbouring inputs", "verdict"]


def table_rows(table: list[Row]) -> list[list[str]]:
    """One row of COLUMNS per audited row (the markdown table and the benchmarks page)."""
    out = []
    for r in table:
        b = r.bound
        verdict = ("FAIL (expected: broken)" if r.broken and r.failed else
                   "PASS (NO POWER: broken row passed)" if r.broken else
                   "FAIL" if r.failed else "pass")
        claim = f"{r.eps:.4g}" + (f" (delta {r.delta:g})" if r.delta else "")
        out.append([r.mechanism, claim, f"{b.value:.3f}", f"{b.n:,}",
                    f"{b.event} ({b.direction})", r.inputs, verdict])
    return out


def method_note(table: list[Row], n: int, seconds: float, alpha: float, seed: int) -> str:
    n_rows = sum(not r.broken for r in table)
    return (f"Held-out selection split (first half selects the event, second half bounds "
            f"it); one-sided Clopper-Pearson at alpha_row/4 per probability and direction; "
            f"alpha_row = {alpha:g} / {n_rows} correct rows (family-wise 95%: all correct "
            f"rows hold at once with probability >= {1 - alpha:g}); seed {seed}; {n:,} draws "
            f"per input (half select, half bound); total {seconds:.0f} s.")


def markdown(table: list[Row], n: int, seconds: float, alpha: float, seed: int) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---" * len(COLUMNS) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(table)]
    lines.append("")
    lines.append(method_note(table, n, seconds, alpha, seed))
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000, help="draws per input")
    ap.add_argument("--seed", type=int, default=20260601, help="the project seed (conf)")
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help="family-wise error of the whole table (split evenly over its rows)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", default="", help="comma-separated families (debugging)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    check_pgpp_equivalence()
    t0 = time.time()
    table = rows()
    if args.only:
        keep = {s.strip().lower() for s in args.only.split(",")}
        table = [r for r in table if r.family.lower() in keep]
    run_table(table, args.samples, args.seed, args.alpha,
              progress=lambda line: print(line, flush=True))
    seconds = time.time() - t0
    md = markdown(table, args.samples, seconds, args.alpha, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md)
    print(md)
    if not args.only:  # a partial table is for debugging, not for the page
        write_result("audit_privacy", "Empirical privacy audit: lower confidence bounds on the "
                     "privacy loss of every mechanism", COLUMNS, table_rows(table),
                     notes=method_note(table, args.samples, seconds, args.alpha, args.seed))
    bad, weak = failures(table)
    for r in bad:
        print(f"AUDIT FAILED: {r.mechanism} at eps {r.eps}: bound {r.bound.value:.3f}",
              file=sys.stderr)
    for r in weak:
        print(f"AUDIT HAS NO POWER: broken {r.mechanism} passed (bound {r.bound.value:.3f})",
              file=sys.stderr)
    return 1 if bad else 3 if weak else 0


if __name__ == "__main__":
    sys.exit(main())

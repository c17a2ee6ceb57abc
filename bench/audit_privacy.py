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
    COLUMNS,
    check_pgpp_equivalence,
    failures,
    markdown,
    method_note,
    rows,
    run_table,
    table_rows,
)

OUT = Path(__file__).resolve().parent / "out" / "audit_privacy.md"


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

"""What the issue-16 levers buy, measured with the project's accountant (no training).

Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/accounting_levers.py [--method rdp|pld]

Reward releases only (the start distribution is left out), delta 1e-5, B = 64 * 47 = 3,008
generated pairs a round:
1. Laplace vs Gaussian at the same per-pair noise sd (Laplace sd = sqrt(2) lambda): a Laplace
   round is B composed LaplaceDpEvent(lambda N) (models.aggregation.uniform.UniformLaplace), a
   Gaussian round one GaussianDpEvent(sigma N / sqrt(B)) (UniformGaussian); and the noise sd
   each needs to reach epsilon 1, 4, 10 (bisection on log sd, as models.budget does).
2. Poisson user sampling (Gaussian): the sd needed when each round samples each user with
   probability q, accounted with amplification (PoissonSampledDpEvent(q, Gaussian(sigma q N /
   sqrt(B)))), against a fixed-size round of q N users charged in full.
Sizes: Geolife N = 83 users and 50 rounds; Telecom N = 9,207 users and 10 rounds.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

import dp_accounting as dpa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402
from models.accounting import PrivacyAccountant  # noqa: E402

B, DELTA = 64 * 47, 1e-5
SIZES = {"Geolife": (83, 50), "Telecom": (9207, 10)}


def eps_laplace(sd: float, n: float, rounds: int, method: str) -> float:
    acc = PrivacyAccountant(DELTA, method=method)
    acc.spend(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(sd / math.sqrt(2) * n), B * rounds))
    return acc.epsilon()


def eps_gaussian(sd: float, n: float, rounds: int, method: str, q: float = 1.0) -> float:
    acc = PrivacyAccountant(DELTA, method=method)
    g = dpa.GaussianDpEvent(sd * n / math.sqrt(B))
    acc.spend(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, g) if q < 1 else g, rounds))
    return acc.epsilon()


def sd_for(fn, target: float, rel_tol: float = 1e-3) -> float:
    """The smallest sd whose epsilon is <= target (bisection on log sd)."""
    lo, hi = 1e-4, 1.0
    while fn(hi) > target:
        lo, hi = hi, hi * 4
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if fn(mid) > target else (lo, mid)
    return hi


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="rdp", choices=("rdp", "pld"))
    ap.add_argument("--sds", default="0.5,1,2,5")
    ap.add_argument("--qs", default="0.1,0.01")
    args = ap.parse_args()
    # dp_accounting's RDP drops fractional orders whose series does not converge (a looser but
    # still valid bound) and logs each one; keep the table readable
    logging.getLogger("absl").setLevel(logging.ERROR)
    t0 = time.time()
    m = args.method
    where = f"accountant {m}, delta {DELTA:g}, B = {B} pairs a round, reward releases only"
    print(where + "\n")
    equal = []
    for name, (n, r) in SIZES.items():
        for sd in (float(x) for x in args.sds.split(",")):
            el, eg = eps_laplace(sd, n, r, m), eps_gaussian(sd, n, r, m)
            equal.append([name, n, r, sd, f"{el:.4g}", f"{eg:.4g}", f"{el / eg:.3f}"])
    _table("accounting_levers_equal_sd", f"Accounting: epsilon at equal per-pair noise sd "
           f"({where})", ["data", "N", "rounds", "sd", "Laplace", "Gaussian", "ratio L/G"], equal)
    needed = []
    for name, (n, r) in SIZES.items():
        for e in (1.0, 4.0, 10.0):
            sl = sd_for(lambda sd, n=n, r=r: eps_laplace(sd, n, r, m), e)
            sg = sd_for(lambda sd, n=n, r=r: eps_gaussian(sd, n, r, m), e)
            needed.append([name, e, f"{sl:.4g}", f"{sl / math.sqrt(2):.4g}", f"{sg:.4g}",
                           f"{sl / sg:.3f}"])
    _table("accounting_levers_sd_for_epsilon", f"Accounting: per-pair noise sd to reach "
           f"epsilon ({where})", ["data", "epsilon", "Laplace sd", "(lambda)", "Gaussian sd",
                                  "ratio L/G"], needed)
    sampled = []
    for name, (n, r) in SIZES.items():
        for q in (float(x) for x in args.qs.split(",")):
            for e in (1.0, 4.0, 10.0):
                sp = sd_for(lambda sd, n=n, r=r, q=q: eps_gaussian(sd, q * n, r, m, q), e)
                sf = sd_for(lambda sd, n=n, r=r, q=q: eps_gaussian(sd, q * n, r, m), e)
                sampled.append([name, q, e, f"{sp:.4g}", f"{sf:.4g}", f"{sf / sp:.2f}"])
    _table("accounting_levers_sampling", "Accounting: Gaussian sd to reach epsilon with user "
           f"sampling rate q (N = q * N_total a round; {where})",
           ["data", "q", "epsilon", "Poisson (amplified)", "fixed q N (not)", "ratio"], sampled)
    print(f"\n{time.time() - t0:.0f} s")


def _table(name: str, title: str, columns: list[str], rows: list[list]) -> None:
    """Print one table and write it for the benchmarks page."""
    print(f"\n{title}\n" + " | ".join(columns))
    for row in rows:
        print(" | ".join(str(v) for v in row))
    write_result(name, title, columns, rows,
                 notes="Sizes: Geolife N = 83 users and 50 rounds; Telecom N = 9,207 users and "
                       "10 rounds.")


if __name__ == "__main__":
    main()

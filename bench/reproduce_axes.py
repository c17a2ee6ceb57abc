"""The PateGAIL++ paper's other axes on the shared Geolife split (issue 16): one lever at a time.

Every row trains PateGAIL++ (sensitivity-aware release, WGAN-GP critics) with the base config
(`--noise`, `--rounds`, participation 100 %, lambda_GP 10, no spectral norm) and changes one
field: participation 100 / 80 / 40 % (a fixed-size sample each round, charged in full: no
amplification claimed, models/config.py), lambda_GP 1 / 10 / 20, spectral norm off / on. The
LDP variants (`ldp`: every user perturbs its own rewards, uniform Laplace; `ldp++`: with the
sensitivity-aware weights) are compared at equal local epsilon: each one's noise is found by
bisection on the accountant's plan (models.budget.noise_for_epsilon) so that `--ldp-epsilon`
is reached after `--rounds` rounds. Paper-mode JSD of udfs.mobility against test.data, mean
+- sd over `--seeds`; epsilon at delta 1e-5 (RDP), as bench/reproduce_pategail.py, whose
helpers this uses. About 8 configurations x 3 seeds x 25-50 rounds: 10-20 minutes on one core.
Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/reproduce_axes.py [--rounds 50] [--noise 0.1]
       [--seeds 0,1,2] [--ldp-epsilon 35] [--out axes.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reproduce_pategail import COLS, geolife_setup, run_one, summarise  # noqa: E402
from bench.results import write_result  # noqa: E402
from models.budget import noise_for_epsilon  # noqa: E402
from models.config import TrainConfig  # noqa: E402


def plans(base: TrainConfig, n_users: int, coords, rounds: int, ldp_eps: float):
    """(axis, setting, config) of every row: the base, then one changed field per row."""
    out = [("base", "participation 100%, lambda_GP 10, SN off", base)]
    for q in (0.8, 0.4):
        out.append(("participation", f"{q:.0%}", dataclasses.replace(base, participation=q)))
    for lam in (1.0, 20.0):
        out.append(("lambda_GP", f"{lam:g}", dataclasses.replace(base, lambda_gp=lam)))
    out.append(("spectral norm", "on", dataclasses.replace(base, spectral_norm=True)))
    for scheme in ("ldp", "ldp++"):
        local = dataclasses.replace(base, scheme=scheme, critic_kind=None)
        noise = noise_for_epsilon(local, n_users, coords, rounds, ldp_eps)
        out.append(("LDP, equal local epsilon", f"{scheme} (noise {noise:.4g})",
                    dataclasses.replace(local, noise=noise,
                                        target_epsilon=ldp_eps * (1 + 1e-9))))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--ldp-epsilon", type=float, default=35.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("absl").setLevel(logging.ERROR)
    seeds = [int(x) for x in args.seeds.split(",")]
    data, _, test, env, true_starts, reference, uni = geolife_setup(seeds)
    base = TrainConfig(rounds=args.rounds, episodes_per_round=args.episodes, scheme="pategail++",
                       critic_kind=None, noise=args.noise, beta=0.0)
    rows: list[dict] = [{"axis": "", "setting": "real.data (reference)",
                         **{c: (v, 0.0) for c, v in reference.items()}},
                        {"axis": "", "setting": "uniform random", **summarise(uni, COLS)}]
    for axis, setting, cfg in plans(base, data.n_users, data.coords, args.rounds,
                                    args.ldp_epsilon):
        runs = []
        for seed in seeds:
            runs.append(run_one(dataclasses.replace(cfg, seed=seed), data, env, test,
                                true_starts, seed))
            print(f"{axis} {setting} seed {seed}: {runs[-1]['seconds']:.0f}s "
                  f"{runs[-1]['rounds']} rounds eps {runs[-1]['epsilon']:.4g}", flush=True)
        rows.append({"axis": axis, "setting": setting, **summarise(runs), "runs": runs})

    def cell(v, fmt=".4f"):
        return "-" if v is None else f"{v[0]:{fmt}} ± {v[1]:{fmt}}"

    print(f"\nPateGAIL++ on Geolife, noise {args.noise:g}, {args.rounds} rounds, seeds {seeds}\n")
    print("| axis | setting | " + " | ".join(COLS) + " | epsilon | rounds |")
    print("|---|---|" + "---|" * (len(COLS) + 2))
    for r in rows:
        print(f"| {r['axis']} | {r['setting']} | " + " | ".join(cell(r[c]) for c in COLS)
              + f" | {cell(r.get('epsilon'), '.4g')} | {cell(r.get('rounds'), '.0f')} |")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    write_result("pategail_axes", f"PateGAIL++ on Geolife, one lever at a time: noise "
                 f"{args.noise:g}, {args.rounds} rounds, seeds {','.join(map(str, seeds))}",
                 ["axis", "setting", *COLS, "epsilon", "rounds"],
                 [[r["axis"], r["setting"], *(cell(r[c]) for c in COLS),
                   cell(r.get("epsilon"), ".4g"), cell(r.get("rounds"), ".0f")] for r in rows],
                 notes="Paper-mode JSD of udfs.mobility against test.data, mean ± sd over the "
                       "seeds; epsilon at delta 1e-5 (RDP). The LDP rows are compared at equal "
                       f"local epsilon {args.ldp_epsilon:g}.")


if __name__ == "__main__":
    main()

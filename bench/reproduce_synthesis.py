"""Private synthesis on Geolife at epsilon 1 / 4 / 10: is PateGAIL worth its cost? (issue 16)

Every private row spends at most the stated epsilon at delta 1e-5 (RDP accountant, the
training default) on the shared Geolife split (real.data per user; paper-mode JSD of
udfs.mobility against test.data, as bench/reproduce_pategail.py, whose helpers this imports):
- DP Markov: models.markov.fit_markov (Gaussian noise), the simple baseline;
- PateGAIL Laplace / PateGAIL Gaussian: the uniform scheme with `mechanism` laplace / gaussian,
  its noise found by bisection so that the plan (start distribution + `--rounds` rounds) reaches
  the epsilon (models.budget.noise_for_epsilon), target_epsilon set to it; the DP start
  distribution takes `--start-share` of the epsilon in pure epsilon (start_hist_epsilon);
- uniform random (every slot an independent uniform location) and real.data (the reference).
`--mechanisms` picks the PateGAIL release mechanisms (default laplace,gaussian) and
`--destinations` the destination modes (default public; `public,learned` adds a row per
mechanism with the policy's learned destination head, train.destination: learned, issue 16
lever 5, at the same noise and epsilon).
Each cell: mean +- sd over `--seeds`. Default `--rounds 50` (reproduce_pategail's; the papers
train longer): 18 trainings of about 0.4 s a round at one thread, about 7 minutes in all under
load 3 (25 rounds: 3.5 minutes). Prints a table and writes JSON (--out).
Usage: OMP_NUM_THREADS=1 .venv/bin/python bench/reproduce_synthesis.py [--rounds 50]
       [--seeds 0,1,2] [--epsilons 1,4,10] [--mechanisms laplace,gaussian]
       [--destinations public,learned] [--out results.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reproduce_pategail import geolife_setup, run_one, summarise  # noqa: E402
from models.budget import noise_for_epsilon  # noqa: E402
from models.config import TrainConfig  # noqa: E402
from models.markov import fit_markov  # noqa: E402
from udfs.mobility import jsd_metrics  # noqa: E402

METRICS = ("dailyloc", "grank", "irank", "distance", "radius", "duration")
DELTA = 1e-5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--epsilons", default="1,4,10")
    ap.add_argument("--start-share", type=float, default=0.25)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mechanisms", default="laplace,gaussian")
    ap.add_argument("--destinations", default="public")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("absl").setLevel(logging.ERROR)
    t_all = time.perf_counter()
    seeds = [int(x) for x in args.seeds.split(",")]
    data, real, test, env, true_starts, reference, uni = geolife_setup(seeds)
    n = len(test)
    rows: list[dict] = [{"method": "real.data (reference)", "epsilon": "",
                         **{c: (v, 0.0) for c, v in reference.items()}}]
    rows.append({"method": "uniform random", "epsilon": "", **summarise(uni, METRICS)})
    for e in [float(x) for x in args.epsilons.split(",") if x]:
        runs = []
        for seed in seeds:
            m = fit_markov(data.days_per_user, data.coords, e, DELTA, seed)
            days = m.sample(n, np.random.default_rng(seed + 1))
            runs.append({"spent": m.epsilon, **jsd_metrics(test, days, data.coords, "paper")})
        rows.append({"method": "DP Markov (Gaussian)", "epsilon": e, "setting": "",
                     **summarise(runs, (*METRICS, "spent")), "runs": runs})
        print(f"markov eps {e:g}: spent {runs[-1]['spent']:.4g}", flush=True)
        for mech, dest in [(m, d) for m in args.mechanisms.split(",") if m
                           for d in args.destinations.split(",") if d]:
            base = TrainConfig(rounds=args.rounds, episodes_per_round=args.episodes,
                               scheme="pategail", critic_kind=None, mechanism=mech, beta=0.0,
                               start_hist_epsilon=args.start_share * e, delta=DELTA,
                               destination=dest)
            lam = noise_for_epsilon(base, data.n_users, data.coords, args.rounds, e)
            sd = lam * (np.sqrt(2) if mech == "laplace" else 1.0)
            runs = []
            for seed in seeds:
                cfg = dataclasses.replace(base, seed=seed, noise=lam,
                                          target_epsilon=e * (1 + 1e-9))
                r = run_one(cfg, data, env, test, true_starts, seed)
                runs.append({**r, "spent": r["epsilon"]})
                print(f"pategail {mech} {dest} eps {e:g} seed {seed}: {r['seconds']:.0f}s "
                      f"{r['rounds']} rounds spent {r['epsilon']:.4g} (noise sd {sd:.4g})",
                      flush=True)
            label = f"PateGAIL {mech.capitalize()}" + (" learned dest" if dest == "learned"
                                                        else "")
            rows.append({"method": label, "epsilon": e,
                         "setting": f"sd {sd:.3g}", **summarise(runs, (*METRICS, "spent",
                                                                     "rounds")), "runs": runs})

    def cell(v, fmt=".4f"):
        return "-" if v is None else f"{v[0]:{fmt}}+-{v[1]:{fmt}}"

    print(f"\n{'method':34s} {'eps':>4s} {'noise':>9s} " + " ".join(f"{c:>15s}" for c in METRICS)
          + f" {'spent':>13s}")
    for r in rows:
        print(f"{r['method']:34s} {r['epsilon']!s:>4s} {r.get('setting', ''):>9s} "
              + " ".join(f"{cell(r[c]):>15s}" for c in METRICS)
              + f" {cell(r.get('spent'), '.3f'):>13s}")
    print(f"\n{args.rounds} rounds, seeds {seeds}, delta {DELTA:g}; "
          f"total {time.perf_counter() - t_all:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

"""Reproduce the PateGAIL vs PateGAIL++ matched-noise comparison on the shared Geolife split.

Trains on real.data (per user), evaluates synthetic days against test.data with the paper-mode
JSD metrics of udfs.mobility, at noise 0.01 / 0.10 / 1.00, plus two trivial generators:
- uniform: every slot an independent uniform location (the README's reference baseline);
- env-freq: the environment driven by the real per-slot action frequencies (labelled from
  real.data with the environment's own code; explore/return targets from the environment's
  public distributions), start locations from the real start frequencies. Not private.
Prints a table and writes JSON (--out). Realdata: needs ../shared/data.
Usage: .venv/bin/python bench/reproduce_pategail.py [--rounds 120] [--out results.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from models.config import TrainConfig
from models.data import load_geolife
from models.env import SLOTS, MobilityEnv
from models.features import expert_trajectories
from models.synthesis import synthesize
from models.train import fit
from udfs.mobility import jsd_metrics

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "geolife_pategail"
COLS = ("dailyloc", "grank", "irank", "distance", "radius")


def env_freq_days(env: MobilityEnv, real: np.ndarray, n: int, seed: int) -> np.ndarray:
    traj = expert_trajectories(env, real)
    freq = torch.zeros(SLOTS - 1, 4)
    for t in range(SLOTS - 1):
        freq[t] = torch.bincount(traj.actions[:, t], minlength=4).float()
    g = torch.Generator().manual_seed(seed)
    start_p = torch.bincount(torch.as_tensor(real[:, 0]), minlength=env.n_locations).float()
    state = env.reset(torch.multinomial(start_p, n, replacement=True, generator=g))
    for t in range(SLOTS - 1):
        w = freq[t].expand(n, -1) * env.action_mask(state)
        a = torch.multinomial(w + 1e-12 * (w.sum(1, keepdim=True) == 0), 1, generator=g).squeeze(1)
        state = env.step(state, a, env.sample_targets(state, a, g))
    return state.history.numpy()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=120)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noises", default="0.01,0.1,1.0")
    ap.add_argument("--beta", type=float, default=0.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    data, real, test = load_geolife(DATA)
    env = MobilityEnv(data.coords)
    n = len(test)
    rows: list[dict] = [{"method": "real.data (reference)", "noise": None, "epsilon": None,
                         **jsd_metrics(test, real, data.coords, "paper")}]
    rng = np.random.default_rng(args.seed)
    rows.append({"method": "uniform random", "noise": None, "epsilon": None,
                 **jsd_metrics(test, rng.integers(env.n_locations, size=(n, SLOTS)),
                               data.coords, "paper")})
    rows.append({"method": "env + real action freq", "noise": None, "epsilon": None,
                 **jsd_metrics(test, env_freq_days(env, real, n, args.seed), data.coords,
                               "paper")})
    base = TrainConfig(rounds=args.rounds, episodes_per_round=args.episodes, seed=args.seed,
                       beta=args.beta)
    for noise in [float(x) for x in args.noises.split(",")]:
        for scheme in ("pategail", "pategail++"):
            cfg = dataclasses.replace(base, scheme=scheme, noise=noise,
                                      critic_kind="bce" if scheme == "pategail" else "wgan")
            t0 = time.perf_counter()
            res = fit(cfg, data)
            secs = time.perf_counter() - t0
            days = synthesize(res.policy(), env, res.start_probs, n,
                              torch.Generator().manual_seed(args.seed + 1))
            rows.append({"method": scheme, "noise": noise, "epsilon": res.accountant["epsilon"],
                         "basic_epsilon": res.accountant["basic_epsilon"], "seconds": secs,
                         "rounds": res.rounds_done,
                         "final_action_freq": res.history[-1]["action_freq"],
                         **jsd_metrics(test, days, data.coords, "paper")})
            print(f"{scheme} noise={noise}: {secs:.0f}s", flush=True)
    print(f"\n{'method':26s} {'noise':>6s} " + " ".join(f"{c:>9s}" for c in COLS)
          + f" {'epsilon(1e-5)':>14s}")
    for r in rows:
        nz = "" if r["noise"] is None else f"{r['noise']:.2f}"
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.4g}"
        print(f"{r['method']:26s} {nz:>6s} " + " ".join(f"{r[c]:9.4f}" for c in COLS)
              + f" {eps:>14s}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

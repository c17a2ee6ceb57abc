"""Seconds per training round: batched critics vs a per-user Python loop over the same critics.

Synthetic users on the public Shanghai-like map (random coordinates; no real data needed).
For U in (83, 9481) and each thread count: one full round of fit's loop (rollout, critic steps,
scoring, release, PPO) is timed, and the critic phase (critic_steps training steps + scoring the
generated batch into per-sample moments) is timed both batched (`critic_step` + `local_moments`)
and as a Python loop over per-user `SingleCritic` modules, each with its own torch.optim.Adam,
autograd for the gradient penalty and float64 moment sums (the same maths, written per user the
natural way). The loop at 9,481 users is timed over `--loop-users` users and scaled linearly
(stated in the output). Every figure is the best of `--repeat` runs; the 1-minute load average
is printed with it (the machine is shared).
Usage: .venv/bin/python bench/bench_train.py [--users 83,9481] [--threads 1,2] [--loop-users 500]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from models.config import TrainConfig
from models.critics import SingleCritic, critic_losses, critic_step, local_moments, sample_batches
from models.data import TrainData
from models.ppo import rollout
from models.train import _Run


def synthetic(n_users: int, n_loc: int = 3000, days: int = 3, seed: int = 0) -> TrainData:
    rng = np.random.default_rng(seed)
    coords = np.column_stack([30.6 + rng.random(n_loc) * 1.3, 120.8 + rng.random(n_loc) * 1.4])
    per_user = []
    for _ in range(n_users):
        home, work = rng.choice(n_loc, 2, replace=False)
        d = np.full((days, 48), home, dtype=np.int64)
        d[:, 16:36] = work
        d[:, 36 + rng.integers(0, 8)] = rng.integers(n_loc)
        per_user.append(d)
    return TrainData(per_user, coords, list(range(n_users)))


def loop_critic_phase(run: _Run, feats: torch.Tensor, users: list[int]) -> float:
    cfg = run.cfg
    mods = [SingleCritic(run.critics, u) for u in users]
    opts = [torch.optim.Adam(m.parameters(), lr=cfg.critic_lr, betas=(0.5, 0.9)) for m in mods]
    g = torch.Generator().manual_seed(0)
    s = torch.zeros(feats.shape[0], dtype=torch.float64)
    q = torch.zeros_like(s)
    t0 = time.perf_counter()
    for u, m, o in zip(users, mods, opts, strict=True):
        for _ in range(cfg.critic_steps):
            rb, gb, al = sample_batches(run.real, run.counts, feats, torch.tensor([u]),
                                        cfg.critic_batch, g)
            loss = critic_losses(lambda x, m=m: m(x), rb, gb, al, cfg.critic_kind, cfg.lambda_gp)
            o.zero_grad()
            loss.sum().backward()
            o.step()
        with torch.no_grad():
            r = torch.sigmoid(m(feats)).double()
            s += r
            q += r * r
    return time.perf_counter() - t0


def batched_critic_phase(run: _Run, feats: torch.Tensor, g: torch.Generator
                         ) -> tuple[float, float]:
    """(seconds of the critic_steps training steps, seconds of scoring) for all users."""
    cfg = run.cfg
    users = torch.arange(run.critics.n_users)
    t0 = time.perf_counter()
    for _ in range(cfg.critic_steps):
        critic_step(run.critics, run.critic_opt, run.real, run.counts, feats, users,
                    cfg.critic_batch, cfg.critic_kind, cfg.lambda_gp, g)
    t1 = time.perf_counter()
    local_moments(run.critics, feats, users, cfg.score_chunk_elems)
    return t1 - t0, time.perf_counter() - t1


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", default="83,9481")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--loop-users", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for n in [int(x) for x in args.users.split(",")]:
        torch.set_num_threads(1)
        run = _Run(TrainConfig(seed=0), synthetic(n))
        run.setup_start_histogram()
        g = torch.Generator().manual_seed(1)
        starts = torch.multinomial(run.start_probs.float(), run.cfg.episodes_per_round,
                                   replacement=True, generator=g)
        feats = rollout(run.policy, run.value, run.env, starts, g).traj.flat("features")
        for threads in [int(x) for x in args.threads.split(",")]:
            torch.set_num_threads(threads)
            secs, rec = [], {}
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                rec = run.one_round()
                secs.append(time.perf_counter() - t0)
                run.round += 1
            ld_round = load()
            best = min((batched_critic_phase(run, feats, g) for _ in range(args.repeat)),
                       key=sum)
            ld_batched = load()
            m = min(n, args.loop_users)
            loop = min(loop_critic_phase(run, feats, list(range(m)))
                       for _ in range(args.repeat)) * n / m
            ld_loop = load()
            note = "" if m == n else f", timed on {m} users and scaled x{n / m:.1f}"
            batched = sum(best)
            print(f"users={n} threads={threads} B={feats.shape[0]} generated pairs\n"
                  f"  round {min(secs):.2f}s best of {args.rounds} ({ld_round}; phases of the "
                  "last: " + ", ".join(f"{k} {v:.2f}s" for k, v in rec["seconds"].items())
                  + ")\n"
                  f"  critic phase batched {batched:.2f}s = {run.cfg.critic_steps} steps "
                  f"{best[0]:.2f}s + scoring {best[1]:.2f}s (best of {args.repeat}, "
                  f"{ld_batched})\n"
                  f"  critic phase per-user loop {loop:.2f}s (best of {args.repeat}, {ld_loop}"
                  f"{note})\n"
                  f"  speedup {loop / batched:.1f}x", flush=True)


if __name__ == "__main__":
    main()

"""Seconds per training round: batched critics vs a per-user Python loop over the same critics.

Synthetic users on the public Shanghai-like map (random coordinates; no real data needed).
For U in (83, 9481): one full round of fit's loop (rollout, critic steps, scoring, release, PPO)
is timed, and the critic phase (critic_steps training steps + scoring the generated batch) is
timed both batched (`critic_step` + `local_moments`) and as a Python loop over per-user
`SingleCritic` modules with torch.optim.Adam (the same maths). The loop at 9,481 users is timed
over `--loop-users` users and scaled linearly (stated in the output).
Usage: .venv/bin/python bench/bench_train.py [--users 83,9481] [--loop-users 500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from models.config import TrainConfig
from models.critics import SingleCritic, critic_losses, critic_step, local_moments, sample_batches
from models.data import TrainData
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
            torch.sigmoid(m(feats))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", default="83,9481")
    ap.add_argument("--loop-users", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for n in [int(x) for x in args.users.split(",")]:
        run = _Run(TrainConfig(seed=0), synthetic(n))
        run.setup_start_histogram()
        secs = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            rec = run.one_round()
            secs.append(time.perf_counter() - t0)
            run.round += 1
        g = torch.Generator().manual_seed(1)
        starts = torch.multinomial(run.start_probs.float(), run.cfg.episodes_per_round,
                                   replacement=True, generator=g)
        from models.ppo import rollout
        feats = rollout(run.policy, run.value, run.env, starts, g).traj.flat("features")
        users = torch.arange(n)
        t0 = time.perf_counter()
        for _ in range(run.cfg.critic_steps):
            critic_step(run.critics, run.critic_opt, run.real, run.counts, feats, users,
                        run.cfg.critic_batch, run.cfg.critic_kind, run.cfg.lambda_gp, g)
        local_moments(run.critics, feats, users, run.cfg.score_chunk_elems)
        batched = time.perf_counter() - t0
        m = min(n, args.loop_users)
        loop = loop_critic_phase(run, feats, list(range(m))) * n / m
        note = "" if m == n else f" (timed on {m} users, scaled x{n / m:.1f})"
        print(f"users={n}: round {np.median(secs):.2f}s (phases of last: "
              + ", ".join(f"{k} {v:.2f}s" for k, v in rec["seconds"].items())
              + f"); critic phase batched {batched:.2f}s vs per-user loop {loop:.2f}s{note}: "
              f"{loop / batched:.1f}x; B={feats.shape[0]} generated pairs", flush=True)


if __name__ == "__main__":
    main()

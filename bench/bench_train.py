"""Seconds per training round: batched critics vs a per-user Python loop over the same critics.

Synthetic users on the public Shanghai-like map (random coordinates; no real data needed).
For U in (83, 9481) and each thread count: one full round of fit's loop (rollout, critic steps,
scoring, release, PPO) is timed, and the critic phase (critic_steps training steps + scoring the
generated batch into per-sample moments) is timed both batched (`CriticStep.own_draws` +
`local_moments`) and as a Python loop over per-user `SingleCritic` modules, each with its own
torch.optim.Adam, autograd for the gradient penalty and float64 moment sums (the same maths,
written per user the natural way). The loop at 9,481 users is timed over `--loop-users` users
and scaled linearly (stated in the output). Batched and loop runs alternate in one process
(`--repeat` times each) and every figure is the best of its runs, as wall time and as CPU time
of this process: the machine is shared, and under load the CPU time (1 thread: the compute
itself, without the time other jobs held the core) is the steadier measure. The 1-minute load
average is printed with each figure. With one thread it also prints the floor that the matrix
products alone set: the critic phase's multiply-adds (`critic_macs`) at this core's best
measured rate on the workload's best shape (`gemm_rate`). What the batched phase spends above
that floor is elementwise passes (LeakyReLU and its backward, bias sums, Adam, gathers), one
kernel each in eager PyTorch, and products on small shapes below the best rate.
Usage: .venv/bin/python bench/bench_train.py [--users 83,9481] [--threads 1,2] [--loop-users 500]
       [--loop-fused-adam]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402
from models.config import TrainConfig  # noqa: E402
from models.critics import (  # noqa: E402
    SingleCritic,
    critic_losses,
    local_moments,
    sample_batches,
)
from models.data import SHANGHAI_BOX, home_work_population  # noqa: E402
from models.ppo import rollout  # noqa: E402
from models.train import _Run  # noqa: E402


class Clock:
    """Wall and process CPU seconds of a block (`with Clock() as c: ...`, then c.wall, c.cpu)."""

    def __enter__(self) -> Clock:
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0


def loop_critic_phase(run: _Run, feats: torch.Tensor, users: list[int], fused: bool = False
                      ) -> Clock:
    cfg = run.cfg
    mods = [SingleCritic(run.critics, u) for u in users]
    opts = [torch.optim.Adam(m.parameters(), lr=cfg.critic_lr, betas=(0.5, 0.9),
                             fused=fused or None) for m in mods]
    g = torch.Generator().manual_seed(0)
    s = torch.zeros(feats.shape[0], dtype=torch.float64)
    q = torch.zeros_like(s)
    with Clock() as clock:
        for u, m, o in zip(users, mods, opts, strict=True):
            for _ in range(cfg.critic_steps):
                rb, gb, al = sample_batches(run.real, run.counts, feats, torch.tensor([u]),
                                            cfg.critic_batch, g)
                loss = critic_losses(lambda x, m=m: m(x), rb, gb, al, cfg.critic_kind,
                                     cfg.lambda_gp)
                o.zero_grad()
                loss.sum().backward()
                o.step()
            with torch.no_grad():
                r = torch.sigmoid(m(feats)).double()
                s += r
                q += r * r
    return clock


def batched_critic_phase(run: _Run, feats: torch.Tensor, g: torch.Generator
                         ) -> tuple[Clock, Clock]:
    """Clocks of the critic_steps training steps and of scoring, for all users."""
    cfg = run.cfg
    users = torch.arange(run.critics.n_users)
    with Clock() as steps:
        for _ in range(cfg.critic_steps):
            run.critic_step().own_draws(feats, users, g)
    with Clock() as scoring:
        local_moments(run.critics, feats, users, cfg.score_chunk_elems)
    return steps, scoring


def critic_macs(cfg: TrainConfig, n_users: int, n_scored: int, in_dim: int) -> float:
    """Multiply-adds of the batched critic phase ("wgan"): the matrix products no
    implementation of the same maths can skip (per user and step: the forward of 3b rows, the
    backward to dD/dx, the gradient penalty's double backward and the weight gradients;
    scoring: three layers on each scored pair, biases folded in as critics.Layout does)."""
    b, f, h = cfg.critic_batch, in_dim, cfg.critic_hidden
    step = (3 * b * (f + 1) * (h + 1) + 3 * b * (h + 1) * h  # forward (d: 2bh)
            + 2 * b * h + 3 * b * h * h  # backward of D: v1 = s1 * (v2 W2^T)
            + b * f * h + b * f * h + b * h * h  # penalty: dD/dx, then back through W1, W2
            + 2 * b * h + 3 * b * f * h + 3 * b * h * h)  # gradients of w3, W1, W2
    score = (f + 1) * (h + 1) + (h + 1) * h + h
    return n_users * (cfg.critic_steps * step + n_scored * score)


def gemm_rate(h: int, in_dim: int, repeat: int = 200) -> float:
    """Multiply-adds per second of this process on the scoring's layer-2 tile (the workload's
    most efficient product shape): an upper bound on what the critic phase can sustain."""
    a, n = 15, 256
    w, z, out = torch.randn(a, h, h + 1), torch.randn(a, h + 1, n), torch.empty(a, h, n)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(repeat):
            torch.bmm(w, z, out=out)
        best = min(best, time.process_time() - t0)
    return repeat * a * h * (h + 1) * n / best


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", default="83,9481")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--loop-users", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--loop-fused-adam", action="store_true",
                    help="the loop's Adam as torch's fused kernel (default: torch.optim.Adam's "
                         "default, what a per-user loop naturally uses)")
    args = ap.parse_args()
    table = []
    for n in [int(x) for x in args.users.split(",")]:
        torch.set_num_threads(1)
        run = _Run(TrainConfig(seed=0), home_work_population(n, 3000, 3, box=SHANGHAI_BOX))
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
            m = min(n, args.loop_users)
            scale = n / m
            batched, loop, loads = [], [], []
            for _ in range(args.repeat):  # alternate, so that both see the same load
                loads.append(os.getloadavg()[0])
                batched.append(batched_critic_phase(run, feats, g))
                loop.append(loop_critic_phase(run, feats, list(range(m)), args.loop_fused_adam))
            loads.append(os.getloadavg()[0])
            b_wall = min(s.wall + c.wall for s, c in batched)
            b_cpu = min(s.cpu + c.cpu for s, c in batched)
            steps = min((s for s, _ in batched), key=lambda c: c.wall)
            scoring = min((c for _, c in batched), key=lambda c: c.wall)
            l_wall = min(c.wall for c in loop) * scale
            l_cpu = min(c.cpu for c in loop) * scale
            note = "" if m == n else f", timed on {m} users and scaled x{scale:.1f}"
            cpu_note = (f", CPU {b_cpu:.2f}s" if threads == 1 else "")
            floor = ""
            if threads == 1 and run.cfg.critic_kind == "wgan":
                n_scored = int(torch.unique(feats, dim=0).shape[0])
                macs = critic_macs(run.cfg, n, n_scored, feats.shape[1])
                rate = gemm_rate(run.cfg.critic_hidden, feats.shape[1])
                floor = (f"\n  products alone: {macs / 1e9:.1f} G multiply-adds, "
                         f"{macs / rate:.2f}s at this core's best rate on these shapes "
                         f"({rate / 1e9:.0f} G/s): loop / that floor = "
                         f"{l_cpu / (macs / rate):.1f}x")
            print(f"users={n} threads={threads} B={feats.shape[0]} generated pairs\n"
                  f"  round {min(secs):.2f}s best of {args.rounds} ({ld_round}; phases of the "
                  "last: " + ", ".join(f"{k} {v:.2f}s" for k, v in rec["seconds"].items())
                  + ")\n"
                  f"  critic phase batched {b_wall:.2f}s = {run.cfg.critic_steps} steps "
                  f"{steps.wall:.2f}s + scoring {scoring.wall:.2f}s{cpu_note}\n"
                  f"  critic phase per-user loop {l_wall:.2f}s"
                  + (f", CPU {l_cpu:.2f}s" if threads == 1 else "") + f"{note}\n"
                  f"  (best of {args.repeat} alternating runs each; load "
                  f"{min(loads):.1f}-{max(loads):.1f})\n"
                  f"  speedup {l_wall / b_wall:.1f}x wall"
                  + (f", {l_cpu / b_cpu:.1f}x CPU time" if threads == 1 else "") + floor,
                  flush=True)
            table.append([n, threads, f"{min(secs):.2f}", f"{b_wall:.2f}",
                          f"{b_cpu:.2f}" if threads == 1 else "", f"{l_wall:.2f}",
                          f"{l_cpu:.2f}" if threads == 1 else "", f"{l_wall / b_wall:.1f}x",
                          "" if m == n else f"{m} users x{scale:.1f}"])
    write_result("train_round", "Training: seconds per round, batched critics against a "
                 "per-user loop", ["users", "threads", "round s (best)", "critic phase batched "
                 "wall s", "batched CPU s", "per-user loop wall s", "loop CPU s", "speed-up "
                 "(wall)", "loop timed on"], table,
                 notes=f"Best of {args.rounds} rounds and of {args.repeat} alternating critic "
                       "phases each; synthetic Shanghai-like users (models.data."
                       "home_work_population). The loop is timed on the users shown and scaled "
                       "linearly.")


if __name__ == "__main__":
    main()

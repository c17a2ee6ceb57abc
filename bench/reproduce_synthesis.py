"""Private synthesis at epsilon 1 / 4 / 10 (Geolife; Telecom scale with --root) (issue 16).

Every private row spends at most the stated epsilon at delta 1e-5 (RDP accountant, the
training default) on the shared Geolife split (real.data per user; paper-mode JSD of
udfs.mobility against test.data, as bench/reproduce_pategail.py, whose helpers this imports):
- DP Markov: models.markov.fit_markov (Gaussian noise), the simple baseline;
- DP Markov (adaptive 2nd order): models.markov2.fit_markov2 (Gaussian noise), the first-order
  releases plus a second-order move table with `--markov2-share` of the budget, a move using its
  (cell before, current cell) row where that row's noisy total clears `--markov2-threshold`
  noise sds (the `rows` column of the runs: how many did);
- PateGAIL Laplace / PateGAIL Gaussian: the uniform scheme with `mechanism` laplace / gaussian,
  its noise found by bisection so that the plan (start distribution + `--rounds` rounds) reaches
  the epsilon (models.budget.noise_for_epsilon), target_epsilon set to it; the DP start
  distribution takes `--start-share` of the epsilon in pure epsilon (start_hist_epsilon);
- uniform random (every slot an independent uniform location) and real.data (the reference).
Besides the six JSDs, every row has the long-range statistics of udfs.longrange (daily motifs,
home return, train on the row's days / test on the held-out days), in a second table; the
reference row's train-on-synthetic accuracy is the real-trained one.
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

Telecom-Shanghai scale (`--root ROOT`): a data root on which `trajpriv datagen`, `ingest` and one
`trajpriv train` ran with conf/telecom_shanghai.yaml (the train stage writes the keyed
train/held-out split, `trajpriv_raw.slot_days_split`, which this reads from the root's Parquet
files with pandas: a trusted-zone bench, like the stage). The same rows on the training users'
days, geo-mode JSD (udfs.mobility, the evaluate stage's metrics) of `--days` synthetic days
against the held-out days, a real-vs-real floor (`--days` training days against the held-out
days), and the non-private "environment + real action frequencies" reference. `--schemes`
picks the learned methods (default pategail; `pategail,pategail++` adds the sensitivity-aware
scheme with the same mechanism and noise search) and `--pretrain` the critics' pretraining
steps (free: models/PROOF.md section 1). Models train in this process (models.train.fit, the
code each TorchDistributor rank runs) so a seed costs minutes, not a JVM and a rank launch.

Private pre-training (`--pretrain-markov SHARES`, models/pretrain.py): for each markov_share in
the comma list, each learned row is run again with `pretrain: markov`: the DP Markov release
takes that share of the epsilon (its start distribution replaces the start histogram and its
destination tables tilt the explore draws), the policy is behaviour-cloned on `--bc-days` days
sampled from it for `--bc-epochs` passes (`--markov-dest-weight`: how far its destination tables
tilt the explore draws), and the rounds' noise is found by the same plan with
the Markov release in it; the row is labelled "+ Markov pre-training (share s)".

Residual PateGAIL (`--residual SHARES`, models/residual.py, issue 51): for each share, each
learned row again with `destination: residual`: the policy is the DP Markov release (given that
share of the privacy loss in rho, `markov_share_unit: rho`) plus a zero-initialised residual,
its PPO updates penalised by `--kl-coef` times KL(pi || P_release); no cloning.
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
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.reproduce_pategail import (  # noqa: E402
    env_freq_days,
    geolife_setup,
    run_one,
    scores,
    summarise,
)
from bench.results import write_result  # noqa: E402
from jobs.spark.tables import LOCATIONS, SLOT_DAYS_SPLIT, Table  # noqa: E402
from models.budget import noise_for_epsilon  # noqa: E402
from models.config import TrainConfig  # noqa: E402
from models.data import TrainData  # noqa: E402
from models.env import SLOTS, MobilityEnv  # noqa: E402
from models.markov import fit_markov  # noqa: E402
from models.markov2 import Markov2Settings, fit_markov2  # noqa: E402
from models.starts import start_mass  # noqa: E402
from udfs.longrange import LONGRANGE_METRICS  # noqa: E402

METRICS = ("dailyloc", "grank", "irank", "distance", "radius", "duration")
COLUMNS = (*METRICS, *LONGRANGE_METRICS)  # the six JSDs, then the long-range statistics
DELTA = 1e-5


def _table_dir(root: Path, table: Table, dataset: str) -> Path:
    """A catalogue table's Parquet folder of one dataset under the root's warehouse."""
    return root / "warehouse" / f"{table.db}.db" / table.short / f"dataset={dataset}"


def _split_days(root: Path, dataset: str, split: str) -> pd.DataFrame:
    part = _table_dir(root, SLOT_DAYS_SPLIT, dataset) / f"split={split}"
    if not part.is_dir():
        raise SystemExit(f"{part} is missing: run `trajpriv train` on this root first (it writes "
                         "the train/held-out split)")
    return pd.read_parquet(part, columns=["user_id", "date", "slots"])


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def telecom_setup(root: Path, dataset: str, n_days: int, seeds: list[int]):
    """What the Geolife path's `geolife_setup` gives, from a prepared Telecom root: (training
    data, the floor's real days, held-out days, env, true start distribution, real-vs-real
    JSDs, uniform random's JSDs per seed). Location ids become rows of the sorted location
    table, as the train stage's shards do."""
    loc = pd.read_parquet(_table_dir(root, LOCATIONS, dataset)).sort_values("loc_id")
    loc_ids = loc.loc_id.to_numpy(np.int64)
    coords = loc[["lat", "lon"]].to_numpy(np.float64)

    def rows_of(df: pd.DataFrame) -> np.ndarray:
        return np.searchsorted(loc_ids, np.stack(df.slots.to_numpy()).astype(np.int64))

    train = _split_days(root, dataset, "train").sort_values(["user_id", "date"], kind="stable")
    test = rows_of(_split_days(root, dataset, "holdout"))
    days = rows_of(train)
    uid = train.user_id.to_numpy()
    cuts = np.flatnonzero(uid[1:] != uid[:-1]) + 1
    data = TrainData(np.split(days, cuts), coords, list(uid[np.r_[0, cuts]]))
    env = MobilityEnv(coords)
    mass = start_mass(data.days_per_user, env.n_locations).numpy()
    rng = np.random.default_rng(0)
    floor_days = days[rng.choice(len(days), min(n_days, len(days)), replace=False)]
    reference = scores(test, floor_days, coords, "geo")
    uniform = [scores(test, np.random.default_rng(s).integers(env.n_locations,
                                                              size=(n_days, SLOTS)),
                      coords, "geo") for s in seeds]
    return data, floor_days, test, env, mass / mass.sum(), reference, uniform


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
    ap.add_argument("--schemes", default="pategail")
    ap.add_argument("--pretrain", type=int, default=0, help="critic_pretrain_steps")
    ap.add_argument("--root", default=None, help="a prepared Telecom root (see the doc)")
    ap.add_argument("--dataset", default="telecom_shanghai")
    ap.add_argument("--days", type=int, default=20000, help="synthetic days per run (--root)")
    ap.add_argument("--pretrain-markov", default="", help="markov_share list (see the doc)")
    ap.add_argument("--no-plain", action="store_true",
                    help="with --pretrain-markov: skip the rows without pre-training")
    ap.add_argument("--bc-epochs", type=int, default=1)
    ap.add_argument("--bc-days", type=int, default=2000)
    ap.add_argument("--markov-dest-weight", type=float, default=0.5)
    ap.add_argument("--residual", default="",
                    help="markov_share list (rho) of residual rows (see the doc)")
    ap.add_argument("--kl-coef", type=float, default=TrainConfig.kl_coef)
    ap.add_argument("--residual-actions", default="on",
                    help="on, off or on,off: residual rows that train the action residual, "
                         "that keep the release's actions (train.residual_actions), or both")
    ap.add_argument("--markov2-share", type=float, default=Markov2Settings.second_share)
    ap.add_argument("--markov2-threshold", type=float, default=Markov2Settings.threshold)
    args = ap.parse_args()
    if set(args.residual_actions.split(",")) - {"on", "off"}:
        ap.error(f"--residual-actions takes on, off or on,off; got {args.residual_actions!r}")
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("absl").setLevel(logging.ERROR)
    t_all = time.perf_counter()
    seeds = [int(x) for x in args.seeds.split(",")]
    if args.root:
        mode, n = "geo", args.days
        data, real, test, env, true_starts, reference, uni = telecom_setup(
            Path(args.root), args.dataset, n, seeds)
        floor = f"real (train) vs held-out, {len(real):,} days"
    else:
        mode = "paper"
        data, real, test, env, true_starts, reference, uni = geolife_setup(seeds)
        n, floor = len(test), "real.data (reference)"
    print(f"{data.n_users:,} training users, {sum(len(d) for d in data.days_per_user):,} "
          f"training days, {len(test):,} held-out days, {env.n_locations:,} locations; "
          f"{mode}-mode JSD, {n:,} generated days a run", flush=True)
    rows: list[dict] = [{"method": floor, "epsilon": "",
                         **{c: (v, 0.0) for c, v in reference.items()}}]
    rows.append({"method": "uniform random", "epsilon": "", **summarise(uni, COLUMNS)})

    def save() -> None:
        """Write the rows so far: a run stopped midway keeps the rows it finished."""
        if args.out:
            Path(args.out).write_text(json.dumps(rows, indent=2))
    freq = [scores(test, env_freq_days(env, real, n, s), data.coords, mode) for s in seeds]
    rows.append({"method": "env + real action freq (not private)", "epsilon": "",
                 **summarise(freq, COLUMNS)})
    for e in [float(x) for x in args.epsilons.split(",") if x]:
        runs = []
        for seed in seeds:
            m = fit_markov(data.days_per_user, data.coords, e, DELTA, seed)
            days = m.sample(n, np.random.default_rng(seed + 1))
            runs.append({"spent": m.epsilon, **scores(test, days, data.coords, mode)})
        rows.append({"method": "DP Markov (Gaussian)", "epsilon": e, "setting": "",
                     **summarise(runs, (*COLUMNS, "spent")), "runs": runs})
        print(f"markov eps {e:g}: spent {runs[-1]['spent']:.4g}", flush=True)
        rows.append(markov2_row(args, data, test, n, mode, e, seeds))
        save()
        shares = ([] if args.no_plain else [None]) + [
            float(x) for x in args.pretrain_markov.split(",") if x]
        residual = [float(x) for x in args.residual.split(",") if x]
        variants = [(c, m, d, s) for c in args.schemes.split(",") if c
                    for m in args.mechanisms.split(",") if m
                    for d in args.destinations.split(",") if d for s in shares]
        variants = [(*v, True) for v in variants]
        variants += [(c, m, "residual", s, acts == "on") for c in args.schemes.split(",") if c
                     for m in args.mechanisms.split(",") if m for s in residual
                     for acts in args.residual_actions.split(",") if acts]
        for scheme, mech, dest, share, train_actions in variants:
            pre = ({} if share is None else
                   {"pretrain": "markov", "markov_share": share, "target_epsilon": e,
                    "bc_epochs": args.bc_epochs, "bc_days": args.bc_days,
                    "markov_dest_weight": args.markov_dest_weight})
            if dest == "residual":  # the release is the parametrisation: no cloning
                pre.update(markov_share_unit="rho", bc_epochs=0, kl_coef=args.kl_coef,
                           residual_actions=train_actions)
            base = TrainConfig(rounds=args.rounds, episodes_per_round=args.episodes,
                               scheme=scheme, critic_kind=None, mechanism=mech, beta=0.0,
                               start_hist_epsilon=args.start_share * e, delta=DELTA,
                               destination=dest, critic_pretrain_steps=args.pretrain, **pre)
            lam = noise_for_epsilon(base, data.n_users, data.coords, args.rounds, e)
            sd = lam * (np.sqrt(2) if mech == "laplace" else 1.0)
            runs = []
            for seed in seeds:
                cfg = dataclasses.replace(base, seed=seed, noise=lam,
                                          target_epsilon=e * (1 + 1e-9))
                r = run_one(cfg, data, env, test, true_starts, seed, mode=mode, n_days=n)
                runs.append({**r, "spent": r["epsilon"]})
                print(f"{scheme} {mech} {dest} share {share} eps {e:g} seed {seed}: "
                      f"{r['seconds']:.0f}s "
                      f"{r['rounds']} rounds spent {r['epsilon']:.4g} (noise sd {sd:.4g}) "
                      f"gap {_fmt(r['critic_gap'][0])} -> {_fmt(r['critic_gap'][-1])}",
                      flush=True)
            label = (("PateGAIL++" if scheme == "pategail++" else "PateGAIL")
                     + f" {mech.capitalize()}" + (" learned dest" if dest == "learned" else "")
                     + ("" if share is None or dest == "residual"
                        else f" + Markov pre-training ({share:g})")
                     + (f" residual on Markov (rho share {share:g}, KL {args.kl_coef:g}"
                        + ("" if train_actions else ", destinations only") + ")"
                        if dest == "residual" else ""))
            rows.append({"method": label, "epsilon": e,
                         "setting": f"sd {sd:.3g}", **summarise(runs, (*COLUMNS, "spent",
                                                                     "rounds")), "runs": runs})
            save()

    def cell(v, fmt=".4f"):
        return "-" if v is None else f"{v[0]:{fmt}}+-{v[1]:{fmt}}"

    print(f"\n{'method':58s} {'eps':>4s} {'noise':>9s} " + " ".join(f"{c:>15s}" for c in METRICS)
          + f" {'spent':>13s}")
    for r in rows:
        print(f"{r['method']:58s} {r['epsilon']!s:>4s} {r.get('setting', ''):>9s} "
              + " ".join(f"{cell(r[c]):>15s}" for c in METRICS)
              + f" {cell(r.get('spent'), '.3f'):>13s}")
    print("\nlong-range statistics (udfs.longrange; JSDs and gap: lower is better, top-motif "
          "share and train-on-synthetic accuracy: higher; the first row's accuracy is the "
          "real-trained reference)")
    print(f"{'method':58s} {'eps':>4s} " + " ".join(f"{c:>15s}" for c in LONGRANGE_METRICS))
    for r in rows:
        print(f"{r['method']:58s} {r['epsilon']!s:>4s} "
              + " ".join(f"{cell(r[c]):>15s}" for c in LONGRANGE_METRICS))
    print(f"\n{args.rounds} rounds, seeds {seeds}, delta {DELTA:g}; "
          f"total {time.perf_counter() - t_all:.0f} s")
    save()
    publish(args, seeds, rows)


def markov2_row(args: argparse.Namespace, data: TrainData, test: np.ndarray, n: int, mode: str,
                e: float, seeds: list[int]) -> dict:
    """The adaptive second-order DP Markov row at epsilon e (Gaussian, as the DP Markov row)."""
    settings = Markov2Settings(second_share=args.markov2_share, threshold=args.markov2_threshold)
    runs = []
    for seed in seeds:
        m = fit_markov2(data.days_per_user, data.coords, e, DELTA, seed, settings)
        days = m.sample(n, np.random.default_rng(seed + 1))
        runs.append({"spent": m.epsilon, "rows": m.accountant["second_rows_used"],
                     **scores(test, days, data.coords, mode)})
    print(f"markov2 eps {e:g}: spent {runs[-1]['spent']:.4g}, second-order rows used "
          f"{[r['rows'] for r in runs]}", flush=True)
    return {"method": "DP Markov adaptive 2nd order (Gaussian)", "epsilon": e,
            "setting": f"w2={settings.second_share:g} k={settings.threshold:g}",
            **summarise(runs, (*COLUMNS, "spent", "rows")), "runs": runs}


def publish(args: argparse.Namespace, seeds: list[int], rows: list[dict]) -> None:
    """One table for the benchmarks page (bench/results/synthesis_<dataset>.json)."""
    dataset = args.dataset if args.root else "geolife"

    def cell(v, fmt=".4f"):
        return "-" if v is None else f"{v[0]:{fmt}} ± {v[1]:{fmt}}"

    write_result(
        f"synthesis_{dataset}",
        f"Private synthesis on {dataset}: {args.rounds} rounds, seeds "
        f"{','.join(map(str, seeds))}, epsilons {args.epsilons}",
        ["method", "epsilon", "noise", *METRICS, *LONGRANGE_METRICS, "spent"],
        [[r["method"], r["epsilon"], r.get("setting", ""),
          *(cell(r.get(c)) for c in (*METRICS, *LONGRANGE_METRICS)),
          cell(r.get("spent"), ".3f")] for r in rows],
        notes=f"Cells are mean ± sd over the seeds; delta {DELTA:g}.")


if __name__ == "__main__":
    main()

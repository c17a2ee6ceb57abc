"""Reproduce the TP/ATP utility experiment on CHI and CPS (NE and PRQ vs epsilon).

Usage: .venv/bin/python bench/reproduce_ldp.py [--reps 5]
Writes bench/out/ldp_{chi,cps}.csv, ldp_tables.md (mean ± sd over reps) and ldp_ne.png. The
datasets are built the paper's way by the ingest rules (`conf/chi_paper.yaml`,
`conf/cps_paper.yaml`: trajectories of 2-8 points; `jobs.ingest.local.paper_dataset`).
Data: ../shared/data (Gowalla CHI, Cho et al. 2011; CPS campus generator, Cunningham et al.
PVLDB 2021).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results import write_result  # noqa: E402
from jobs.ingest.local import paper_dataset  # noqa: E402
from udfs import metrics  # noqa: E402
from udfs.collect import as_generator, make_mechanism, perturb  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
OUT = Path(__file__).resolve().parent / "out"
EPS = (1, 2, 4, 6, 8, 10)
DELTAS = {"chi": (1.0, 2.0, 4.0), "cps": (0.25, 0.5, 1.0)}
# Defaults first (TP/ATP join their copies with the "medoid" combiner); then the paper's Eq. 7
# as written ("-paper") and the other combiners the default was chosen against.
METHODS = {"ATP": ("atp", {}), "TP": ("tp", {}), "EXP": ("exp", {}), "UNIFORM": ("uniform", {}),
           "ATP-paper": ("atp", {"combiner": "paper"}), "TP-paper": ("tp", {"combiner": "paper"}),
           "ATP-copy_medoid": ("atp", {"combiner": "copy_medoid"}),
           "TP-copy_medoid": ("tp", {"combiner": "copy_medoid"}),
           "ATP-midpoint": ("atp", {"combiner": "midpoint"}),
           "TP-midpoint": ("tp", {"combiner": "midpoint"}),
           # peers (udfs/mechanisms): NGram with collect's reach (diameter / 4), TraCS snapped
           # to P; "raw" = TraCS's continuous output before snapping (error to the true point)
           "NGRAM": ("ngram", {}), "TRACS-D": ("tracs_d", {}), "TRACS-C": ("tracs_c", {}),
           "TRACS-D raw": ("tracs_d", {"raw": True}), "TRACS-C raw": ("tracs_c", {"raw": True})}


# The paper's own NE of each (dataset, mechanism, epsilon), for the column beside ours. Its
# figures are plots only, and the copy of the paper in ../shared/papers ends before the
# experiments section, so no figure can be read from it: the column says so instead of
# guessing. Fill in {("chi", "ATP", 4): 0.123, ...} from the published figures when a copy with
# them is at hand, and say in PAPER_SOURCE which figure each number was read from.
PAPER_NE: dict[tuple[str, str, int], float] = {}
PAPER_SOURCE = ("not available: the shared copy of Zhang et al. (PVLDB 2023) stops before its "
                "experiments section, whose NE figures are plots")


def raw_point_errors(trajs, space, eps, mech, seed) -> tuple[float, np.ndarray]:
    """(NE, per-point km errors) of TraCS's unsnapped outputs (haversine to the true point)."""
    from haversine import Unit, haversine_vector

    m, rng = make_mechanism(space, float(eps), mech), as_generator(seed)
    lens = np.array([len(t) for t in trajs])
    per_traj, errs = np.zeros(lens.size), []
    for length in np.unique(lens).tolist():
        rows = np.flatnonzero(lens == length)
        t = np.stack([trajs[i] for i in rows])
        lat, lon = m.raw_latlon(t, rng=rng)
        e = haversine_vector(space.coords[t].reshape(-1, 2), np.stack([lat, lon], -1)
                             .reshape(-1, 2), Unit.KILOMETERS).reshape(t.shape)
        per_traj[rows] = e.mean(1)
        errs.append(e.ravel())
    return float(per_traj.mean() / space.diameter), np.concatenate(errs)


def run(name, reps, methods=None):
    space, trajs, _ = paper_dataset(name, DATA)
    rows = []
    for eps in EPS:
        for label, (mech, opts) in METHODS.items():
            if methods and label not in methods:
                continue
            for rep in range(reps):
                seed = np.random.SeedSequence([eps, rep])
                if opts.get("raw"):
                    ne, err = raw_point_errors(trajs, space, eps, mech, seed)
                    row = {"dataset": name, "eps": eps, "method": label, "rep": rep, "NE": ne}
                    for d in DELTAS[name]:
                        row[f"PRQ@{d}km"] = float((err <= d).mean())
                    rows.append(row)
                    continue
                out = perturb(trajs, space, float(eps), mech, seed, **opts)
                row = {"dataset": name, "eps": eps, "method": label, "rep": rep,
                       "NE": metrics.ne(trajs, out, space)}
                for d in DELTAS[name]:
                    row[f"PRQ@{d}km"] = metrics.prq(trajs, out, space, d)
                rows.append(row)
        print(name, eps, "done", flush=True)
    return pd.DataFrame(rows), space, trajs


def _markdown(mean: pd.DataFrame, sd: pd.DataFrame) -> str:
    head = "| method | " + " | ".join(f"eps={c}" for c in mean.columns) + " |"
    sep = "|---" * (len(mean.columns) + 1) + "|"
    body = ["| " + str(i) + " | " + " | ".join(f"{m:.4f} ± {d:.4f}" for m, d in zip(rm, rd,
                                                                                   strict=True))
            + " |" for i, rm, rd in zip(mean.index, mean.to_numpy(), sd.to_numpy(), strict=True)]
    return "\n".join([head, sep, *body])


def publish(name: str, space, trajs, mean: pd.DataFrame, sd: pd.DataFrame, args,
            methods) -> None:
    """One table per dataset for the benchmarks page: every (method, epsilon) row with NE and
    PRQ as mean ± sd over the reps, the paper's NE beside ours."""
    order = [m for m in METHODS if not methods or m in methods]
    metrics_ = list(mean.columns)
    rows = []
    for method in order:
        for eps in EPS:
            if (method, eps) not in mean.index:
                continue
            m, d = mean.loc[(method, eps)], sd.loc[(method, eps)].fillna(0.0)
            paper = PAPER_NE.get((name, method, eps))
            rows.append([method, eps, f"{m['NE']:.4f} ± {d['NE']:.4f}",
                         "-" if paper is None else f"{paper:.4f}",
                         *(f"{m[c]:.4f} ± {d[c]:.4f}" for c in metrics_ if c != "NE")])
    write_result(f"ldp_{name}", f"LDP utility on {name.upper()}: |P| = {space.n}, "
                 f"{len(trajs):,} trajectories, mean ± sd of {args.reps} reps",
                 ["method", "epsilon", "NE", "paper NE", *(c for c in metrics_ if c != "NE")],
                 rows, notes=f"Paper NE: {PAPER_SOURCE}. NE = mean point error / diameter of "
                             f"P ({space.diameter:.2f} km); PRQ@d = share of points within d "
                             "km of the truth. ATP and TP join their copies with the default "
                             "`medoid` combiner; `-paper` rows use the paper's Eq. 7.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--methods", default="", help="comma-separated labels of METHODS (all)")
    args = ap.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    OUT.mkdir(exist_ok=True)
    md = []
    frames = {}
    for name in ("chi", "cps"):
        df, space, trajs = run(name, args.reps, methods)
        df.to_csv(OUT / f"ldp_{name}.csv", index=False)
        frames[name] = df
        grouped = df.drop(columns="rep").groupby(["method", "eps"])
        mean, sd = grouped.mean(numeric_only=True), grouped.std(numeric_only=True, ddof=1)
        lens = np.bincount([len(t) for t in trajs])
        md.append(f"## {name.upper()}: |P| = {space.n}, diameter {space.diameter:.2f} km, "
                  f"{len(trajs)} trajectories, lengths 1..8 = {lens[1:].tolist()}\n")
        for metric in mean.columns:
            order = [m for m in METHODS if not methods or m in methods]
            tab = mean[metric].unstack("eps").reindex(order)
            spread = sd[metric].unstack("eps").reindex(order).fillna(0.0)
            md.append(f"### {metric} (mean ± sd of {args.reps} reps)\n")
            md.append(_markdown(tab, spread) + "\n")
        publish(name, space, trajs, mean, sd, args, methods)
    (OUT / "ldp_tables.md").write_text("\n".join(md))
    print("\n".join(md))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (name, df) in zip(axes, frames.items(), strict=True):
        m = df.groupby(["method", "eps"])["NE"].mean().unstack("eps")
        for label in ("ATP", "TP", "EXP", "UNIFORM", "ATP-paper", "TP-paper", "NGRAM",
                      "TRACS-C"):
            if label not in m.index:
                continue
            ax.plot(m.columns, m.loc[label], marker="o", label=label)
        ax.set(title=name.upper(), xlabel="epsilon", ylabel="NE")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ldp_ne.png", dpi=120)


if __name__ == "__main__":
    main()

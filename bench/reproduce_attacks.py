"""Attack our own output (issue 8; realdata: needs ../shared/data).

Geolife (the shared PateGail split, per user 70 % training days / 30 % held out), for PateGAIL
(BCE critics) and PateGAIL++ (WGAN-GP critics) at noise 0.01 and 0.10, short training runs:
- white-box MIA on the per-user critics (random forest on reward features);
- LiRA with K shadow models of the same recipe, score = mean log-likelihood of the day's actions
  under the policy (the generator), online and offline; and, on the same shadows, LiRA with the
  claimed user's critic reward as score.
Both through `models.attacks.membership_attacks`, the sequence `trajpriv evaluate --attacks` runs.
CHI (Gowalla check-ins, TP/ATP ingestion: 3 h gap, at most 8 points per trajectory): home
re-identification within 1 km for raw points, ATP at epsilon 1, 4, 10 and UNIFORM. True home =
density mode of the user's raw night check-ins (20:00-07:00 Chicago time; timestamps read as UTC),
all check-ins when there is none; the attacker's rule on every published variant = density mode
of all the pseudonym's points (published data has no time of day). Also reported against the
truth "density mode of all raw points" (the raw end is then 1.0 by construction).
Prints a table and writes JSON. Run:
  .venv/bin/python bench/reproduce_attacks.py [--rounds 25] [--shadows 4] [--out results.json]
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

from bench.results import write_result  # noqa: E402
from jobs.ingest.local import paper_dataset  # noqa: E402
from models.attacks import (  # noqa: E402
    AttackPlan,
    AttackSettings,
    fit_trainer,
    home_reidentification,
    membership_attacks,
    split_member_days,
)
from models.budget import noise_for_epsilon  # noqa: E402
from models.config import TrainConfig  # noqa: E402
from models.data import load_geolife  # noqa: E402
from models.train import fit  # noqa: E402
from udfs.collect import perturb  # noqa: E402

# The PateGAIL++ paper's white-box MIA on Geolife, (scheme, noise) -> (accuracy, AUC), as its
# copy in ../shared/papers states them (None: not stated there; nor are its LiRA figures).
PAPER_WHITEBOX = {("pategail", 0.01): (0.6645, 0.7208), ("pategail++", 0.01): (0.5115, 0.4962),
                  ("pategail", 0.1): (None, 0.7273), ("pategail++", 0.1): (None, 0.4846)}
START_SHARE = 0.25  # of an equal-epsilon row's budget, spent on the DP start distribution
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
log = logging.getLogger("reproduce_attacks")


def geolife_plans(args, train) -> list[tuple[str, float, TrainConfig]]:
    """(scheme, noise, config) of every Geolife row: `--noises` (the papers' axis) and, for
    `--train-epsilons`, each scheme's noise found by bisection on the accountant's plan so the
    run spends at most that epsilon (delta 1e-5, RDP; target_epsilon set to it), of which the
    DP start distribution takes START_SHARE (as bench/reproduce_synthesis.py)."""
    plans = []
    for scheme in ("pategail", "pategail++"):
        base = TrainConfig(seed=args.seed, rounds=args.rounds, scheme=scheme,
                           episodes_per_round=args.episodes,
                           critic_kind="bce" if scheme == "pategail" else "wgan")
        for noise in [float(x) for x in args.noises.split(",") if x]:
            plans.append((scheme, noise, dataclasses.replace(base, noise=noise)))
        for e in [float(x) for x in args.train_epsilons.split(",") if x]:
            at_e = dataclasses.replace(base, start_hist_epsilon=START_SHARE * e)
            lam = noise_for_epsilon(at_e, train.n_users, train.coords, args.rounds, e)
            plans.append((scheme, lam, dataclasses.replace(at_e, noise=lam,
                                                           target_epsilon=e * (1 + 1e-9))))
    return plans


def geolife(args) -> list[dict]:
    data, _, _ = load_geolife(SHARED / "geolife_pategail")
    train, cands = split_member_days(data, args.member_fraction, args.seed)
    rows = []
    for scheme, noise, cfg in geolife_plans(args, train):
        t0 = time.perf_counter()
        target = fit(cfg, train)  # FitResult: policy and critics
        t1 = time.perf_counter()
        reports, seconds = membership_attacks(
            target, data.coords, cands, data, fit_trainer(cfg),
            plan=AttackPlan(n_shadows=args.shadows),
            settings=AttackSettings(seed=args.seed, n_boot=args.boot))
        row = {"scheme": scheme, "noise": noise, "rounds": target.rounds_done,
               "epsilon": target.accountant["epsilon"],
               "seconds": {"target_fit": t1 - t0, **seconds}}
        for rep in reports:
            row[rep.attack] = rep.to_dict()
        rows.append(row)
        wb, lp, lc = row["whitebox_mia"], row["lira_policy"], row["lira_critic"]
        print(f"{scheme} noise={noise:.4g}: whitebox AUC {wb['auc']:.3f} "
              f"[{wb['auc_ci'][0]:.3f}, {wb['auc_ci'][1]:.3f}], LiRA(policy) {lp['auc']:.3f}, "
              f"LiRA(policy, offline) {row['lira_policy_offline']['auc']:.3f}, "
              f"LiRA(critic) {lc['auc']:.3f} ({time.perf_counter() - t0:.0f}s)", flush=True)
    return rows


def chi(args) -> list[dict]:
    df = pd.read_csv(SHARED / "ldp_checkins" / "chi_checkins.csv")
    # CHI through the ingest rules (conf/chi_paper.yaml), one-point pieces kept: every
    # check-in is in some trajectory, as the home attack sees all of a user's points.
    space, pieces, rows = paper_dataset("chi", SHARED, ["ingest.min_len=1"])
    ids = np.sort(df["Location ID"].unique())
    df["loc"] = np.searchsorted(ids, df["Location ID"].to_numpy())
    ts_utc = pd.to_datetime(df["Timestamp"]).dt.tz_localize("UTC")
    df["ts"] = ts_utc.dt.tz_convert("America/Chicago").dt.tz_localize(None)
    raw = pd.DataFrame({"who": df["User ID"], "lat": space.coords[df["loc"], 0],
                        "lon": space.coords[df["loc"], 1], "ts": df["ts"]})
    users = rows["user_id"].astype(np.int64).to_numpy()
    trajs = {int(u): [pieces[i] for i in np.flatnonzero(users == u)] for u in np.unique(users)}

    def points(per_user: dict) -> pd.DataFrame:
        who = np.concatenate([np.full(sum(map(len, t)), u) for u, t in per_user.items()])
        loc = np.concatenate([np.concatenate(t) for t in per_user.values()])
        return pd.DataFrame({"who": who, "lat": space.coords[loc, 0],
                             "lon": space.coords[loc, 1]})

    def published(mech: str, eps: float) -> pd.DataFrame:
        return points({u: perturb(t, space, eps, mech, np.random.SeedSequence([args.seed, u]))
                       for u, t in trajs.items()})

    variants = [("raw", None, points(trajs))]
    for eps in [float(x) for x in args.epsilons.split(",")]:
        t0 = time.perf_counter()
        variants.append(("atp", eps, published("atp", eps)))
        log.info("ATP epsilon %g perturbed in %.0fs", eps, time.perf_counter() - t0)
    variants.append(("uniform", None, published("uniform", 1.0)))
    n_pts = raw.groupby("who").size()
    heavy = set(n_pts[n_pts >= args.min_points].index)
    truth_all = raw.assign(night=True)  # truth = density mode of all raw points
    rows = []
    for name, eps, pub in variants:
        row = {"method": name, "epsilon": eps}
        for tag, truth in (("night", raw), ("allraw", truth_all)):
            row[tag] = home_reidentification(truth, pub, seed=args.seed)
            row[f"{tag}_min{args.min_points}"] = home_reidentification(
                truth[truth["who"].isin(heavy)], pub[pub["who"].isin(heavy)], seed=args.seed)
        rows.append(row)
        r = row["night"]
        print(f"CHI {name} eps={eps}: home within 1 km {r['share_within_km']:.3f} "
              f"[{r['share_lo']:.3f}, {r['share_hi']:.3f}] (n={r['n_users']})", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--shadows", type=int, default=4)
    ap.add_argument("--noises", default="0.01,0.1")
    ap.add_argument("--epsilons", default="1,4,10")
    ap.add_argument("--train-epsilons", default="",
                    help="Geolife rows at equal epsilon (noise by bisection), e.g. 1,4,10")
    ap.add_argument("--member-fraction", type=float, default=0.7)
    ap.add_argument("--min-points", type=int, default=10)
    ap.add_argument("--boot", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip", choices=["geolife", "chi"], default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("models.train").setLevel(logging.WARNING)
    out = {"args": vars(args)}
    if args.skip != "chi":
        out["chi"] = chi(args)
    if args.skip != "geolife":
        out["geolife"] = geolife(args)
    print_tables(out)
    publish(args, out)
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2, default=str))


def _paper(scheme: str, noise: float, which: int) -> str:
    got = PAPER_WHITEBOX.get((scheme, round(noise, 6)))
    return "-" if got is None or got[which] is None else f"{got[which]:.4f}"


def publish(args, out: dict) -> None:
    """The two attack tables for the benchmarks page, the paper's figures beside ours."""
    def ci(r: dict) -> str:
        return f"{r['auc']:.3f} [{r['auc_ci'][0]:.3f}, {r['auc_ci'][1]:.3f}]"

    if "geolife" in out:
        rows = [[r["scheme"], r["noise"], f"{r['epsilon']:.4g}", ci(r["whitebox_mia"]),
                 _paper(r["scheme"], r["noise"], 1),
                 f"{r['whitebox_mia']['balanced_accuracy']:.3f}",
                 _paper(r["scheme"], r["noise"], 0),
                 f"{r['whitebox_mia']['tpr_at_fpr']:.3f}", ci(r["lira_policy"]),
                 f"{r['lira_policy_offline']['auc']:.3f}", ci(r["lira_critic"])]
                for r in out["geolife"]]
        write_result("attacks_geolife", f"Membership inference on Geolife: {args.rounds} "
                     f"rounds, {args.shadows} shadow models, seed {args.seed}",
                     ["scheme", "noise", "epsilon", "white-box AUC [95% CI]",
                      "paper white-box AUC", "white-box balanced accuracy",
                      "paper white-box accuracy", "white-box TPR@1% FPR", "LiRA policy AUC",
                      "LiRA policy offline AUC", "LiRA critic AUC"], rows,
                     notes="Evaluation half of the member / non-member days; AUC with a "
                           f"{args.boot}-sample bootstrap CI. `paper`: the PateGAIL++ paper's "
                           "white-box MIA (accuracy and AUC) as its copy in ../shared/papers "
                           "states them; it gives no accuracy at noise 0.10 and no LiRA "
                           "figures. The paper's accuracy is on balanced member / non-member "
                           "sets, ours is balanced accuracy.")
    if "chi" in out:
        def f(x: dict) -> str:
            return f"{x['share_within_km']:.3f} [{x['share_lo']:.3f}, {x['share_hi']:.3f}]"

        rows = [[r["method"], "-" if r["epsilon"] is None else f"{r['epsilon']:g}",
                 f(r["night"]), f(r[f"night_min{args.min_points}"]),
                 f"{r['allraw']['share_within_km']:.3f}", r["night"]["n_users"]]
                for r in out["chi"]]
        write_result("attacks_chi_home", "Home re-identification on CHI: share of users whose "
                     "inferred home is within 1 km of the true one",
                     ["method", "epsilon", "truth = night mode [95% CI]",
                      f"users with >= {args.min_points} points", "truth = all raw points",
                      "users"], rows,
                     notes="True home: density mode of the user's raw night check-ins (20:00-"
                           "07:00 Chicago time); inferred: the same rule on the published "
                           "points. Neither paper reports this attack; UNIFORM is the floor.")


def print_tables(out: dict) -> None:
    def ci(r: dict) -> str:
        return f"{r['auc']:.3f} [{r['auc_ci'][0]:.3f}, {r['auc_ci'][1]:.3f}]"

    if "geolife" in out:
        print("\nGeolife membership inference (evaluation half; AUC [95% bootstrap CI])")
        print(f"{'scheme':11s} {'noise':>6s} {'eps':>9s} {'whitebox AUC':>22s} {'bal.acc':>7s} "
              f"{'TPR@1%':>6s} {'@0.1%':>6s} {'LiRA policy':>22s} {'TPR@1%':>6s} {'@0.1%':>6s} "
              f"{'offline':>7s} {'LiRA critic':>22s}")
        for r in out["geolife"]:
            wb, lp = r["whitebox_mia"], r["lira_policy"]
            print(f"{r['scheme']:11s} {r['noise']:6.3g} {r['epsilon']:9.4g} {ci(wb):>22s} "
                  f"{wb['balanced_accuracy']:7.3f} {wb['tpr_at_fpr']:6.3f} "
                  f"{wb['extra']['tpr_at_0.1pct_fpr']:6.3f} {ci(lp):>22s} "
                  f"{lp['tpr_at_fpr']:6.3f} {lp['extra']['tpr_at_0.1pct_fpr']:6.3f} "
                  f"{r['lira_policy_offline']['auc']:7.3f} {ci(r['lira_critic']):>22s}")
    if "chi" in out:
        print("\nCHI home re-identification: share of users with inferred home within 1 km")
        print(f"{'method':8s} {'eps':>5s} {'truth=night':>24s} {'truth=night, >=k pts':>24s} "
              f"{'truth=all raw':>14s}")
        for r in out["chi"]:
            k = [key for key in r if key.startswith("night_min")][0]

            def f(x: dict) -> str:
                return f"{x['share_within_km']:.3f} [{x['share_lo']:.3f},{x['share_hi']:.3f}]"

            eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
            print(f"{r['method']:8s} {eps:>5s} {f(r['night']):>24s} {f(r[k]):>24s} "
                  f"{r['allraw']['share_within_km']:14.3f}")


if __name__ == "__main__":
    main()

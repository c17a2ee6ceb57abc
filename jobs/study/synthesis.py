"""The synthesis study of `trajpriv study`: which synthesis method to publish, measured.

At the configured target epsilon (`train.target_epsilon`) every method of
`study.synthesis_methods` is trained on the training split (`trajpriv_raw.slot_days_split`,
the split `trajpriv train` uses) and `synthesize.n_days` days of each are scored against the
held-out days, next to uniform random days (the trivial generator) and the training days
themselves (the real-vs-real floor). Learned methods take the `train` section's settings
with their noise calibrated so that `train.rounds` rounds spend exactly the target for the
users trained (`models.budget.noise_for_epsilon`); the Markov model spends it in one release.
So every method is compared at equal epsilon.

Why in the trusted zone and charged nothing: the study's models are never released (only the
configured `train.method` is, by `trajpriv train`) and its scores are computed from raw
held-out days, so they go to `trajpriv_trusted.evaluation` (method `synthesis-study:<name>`,
setting = epsilon) like the collection study's. Choosing the published method from these
scores is a decision made on private data by the operator, as with the collection study's
settings.

The models train in this process (the code each TorchDistributor rank runs, on one rank):
the study is a sample (`study.synthesis_max_users` users by a keyed hash), not the release.
Row shapes: split rows (split, user_id, date, slots) -> TrainData (one (n_u, 48) array per
user) and held-out (n, 48) -> per method and seed (n_days, 48) -> metric rows.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import pandas as pd

from jobs.config import Config
from jobs.spark.tables import SYNTHESIS_STUDY_PREFIX
from udfs.errors import InputDataError

log = logging.getLogger("trajpriv.study")

PREFIX = SYNTHESIS_STUDY_PREFIX  # evaluation method names of the study's rows
REFERENCES = ("uniform_random", "real_train")


def study_days(spark, cfg: Config) -> tuple[Any, np.ndarray, np.ndarray]:
    """(TrainData of the sampled training users, their held-out days, coordinates), location
    ids as rows of the sorted public location table."""
    from pyspark.sql import functions as F

    from jobs.spark.split import holdout_salt, load_locations, write_split
    from jobs.spark.tables import SLOT_DAYS_SPLIT
    from models.data import TrainData

    write_split(spark, cfg)
    loc_ids, coords = load_locations(spark, cfg.dataset)
    split = spark.table(SLOT_DAYS_SPLIT).where(F.col("dataset") == cfg.dataset)
    cap = cfg.study.synthesis_max_users
    if cap is not None:  # the same users on every run of a data root, not guessable outside it
        users = (split.select("user_id").distinct()
                 .orderBy(F.xxhash64(F.lit(holdout_salt(cfg)), "user_id"), "user_id").limit(cap))
        split = split.join(users, "user_id")
    pdf = split.select("split", "user_id", "date", "slots").toPandas()
    pdf = pdf.sort_values(["user_id", "date"], kind="stable")
    rows = np.searchsorted(loc_ids, np.stack(pdf["slots"].to_numpy()).astype(np.int64))
    train = (pdf["split"] == "train").to_numpy()
    if not train.any() or train.all():
        raise InputDataError(f"the synthesis study needs training and held-out days of "
                             f"{cfg.dataset!r}; set study.synthesis_methods=[] to skip it")
    uid = pdf["user_id"].to_numpy()[train]
    cuts = np.flatnonzero(uid[1:] != uid[:-1]) + 1
    data = TrainData(np.split(rows[train], cuts), coords, list(uid[np.r_[0, cuts]]))
    return data, rows[~train], coords


def train_and_sample(method: str, cfg: Config, data, n_days: int, seed: int
                     ) -> tuple[np.ndarray, float]:
    """(n_days synthetic days, epsilon spent) of `method` (jobs.methods' registry) trained on
    `data` at the target."""
    from jobs.methods import get

    model = get(method).fit(cfg, data, cfg.train.target_epsilon, seed)
    return model.sample(n_days, seed), float(model.epsilon)


def score(test: np.ndarray, days: np.ndarray, coords: np.ndarray, mode: str) -> dict[str, float]:
    """Every statistic the evaluate stage reports, of `days` against the held-out `test`: the
    six mobility divergences and the long-range statistics (motifs, home return,
    train-on-synthetic accuracy; udfs/longrange.py)."""
    from udfs.longrange import longrange_metrics
    from udfs.mobility import jsd_metrics

    return {**jsd_metrics(test, days, coords, mode), **longrange_metrics(test, days, coords)}


def metric_rows(method: str, epsilon: float | None, values: dict[str, float]) -> list[dict]:
    return [{"method": PREFIX + method, "setting": epsilon, "metric": k, "value": float(v)}
            for k, v in values.items()]


def run_study(spark, cfg: Config, seed: int) -> tuple[list[dict], dict[str, Any]]:
    """Evaluation rows (mean over seeds per method; `<metric>_sd` beside each when there are
    several seeds) and the study's public figures (which methods, how many seeds, seconds)."""
    s = cfg.study
    data, test, coords = study_days(spark, cfg)
    n, mode, eps = cfg.synthesize.n_days, cfg.evaluate.mode, cfg.train.target_epsilon
    seeds = [seed + k for k in range(s.synthesis_seeds)]
    rng = np.random.default_rng(seed)
    train_days = np.concatenate(data.days_per_user)
    floor = train_days[rng.choice(len(train_days), min(n, len(train_days)), replace=False)]
    rows = metric_rows("real_train", None, score(test, floor, coords, mode))
    uniform = [score(test, np.random.default_rng([k, 2]).integers(len(coords), size=(n, 48)),
                     coords, mode) for k in seeds]
    rows += metric_rows("uniform_random", None, _mean_sd(uniform))
    seconds: dict[str, float] = {}
    for method in s.synthesis_methods:
        t0 = time.perf_counter()
        runs = []
        for k in seeds:
            days, spent = train_and_sample(method, cfg, data, n, k)
            runs.append({**score(test, days, coords, mode), "epsilon_spent": spent})
        seconds[method] = round(time.perf_counter() - t0, 2)
        log.info("synthesis study: %s at epsilon %g, %d seed(s), %.1f s", method, eps,
                 len(seeds), seconds[method])
        rows += metric_rows(method, eps, _mean_sd(runs))
    return rows, {"synthesis_methods": list(s.synthesis_methods), "synthesis_epsilon": eps,
                  "synthesis_seeds": len(seeds), "synthesis_s": seconds}


def _mean_sd(runs: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each figure over the runs, and its sample sd as `<name>_sd` when runs > 1."""
    frame = pd.DataFrame(runs)
    out = frame.mean().to_dict()
    if len(runs) > 1:
        out.update({f"{k}_sd": v for k, v in frame.std(ddof=1).to_dict().items()})
    return out

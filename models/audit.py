"""Empirical privacy audit: lower confidence bounds on the privacy loss of every mechanism.

What it holds: the whole auditor (the bound machinery, the worst-case inputs and samplers of
every mechanism, the table of rows, its run and its markdown). `bench/audit_privacy.py` is its
command line (arguments, output file, exit status) and tests/test_audit_privacy.py checks it on
mechanisms whose loss is known; both import this module, so there is one auditor. It lives in
`models` (not `udfs`) because its training rows exercise `models.aggregation` and
`models.accounting`; no pyspark.

For each mechanism and claimed epsilon we draw `samples` outputs for each of two (or more)
neighbouring inputs chosen to be worst cases, and bound from below, with 95% confidence,

    max over events E of ln(P1(E) / P2(E))   (and the same with 1 and 2 swapped)

Method (a held-out selection split, so choosing the best event costs no Bonferroni factor):
  1. outputs are mapped to integer codes (a trajectory = its location ids in base |P|; a real
     output = a bin of a fixed grid, or of the log-likelihood-ratio statistic for Laplace);
  2. the first half of each sample SELECTS one event per direction: among the prefixes of the
     codes sorted by empirical ratio (Neyman-Pearson: the optimal events are such unions, e.g.
     "output <= t" or "first point = a") and, for trajectories, every "point i = a" event, and
     over the candidate input pairs, the one whose Clopper-Pearson ratio bound is largest;
  3. the second half BOUNDS it: one-sided Clopper-Pearson lower bound on P1(E) and upper bound on
     P2(E), each at alpha/4 (2 directions x 2 probabilities: Bonferroni), so with probability
     >= 95% both reported directions are below the true loss. A row FAILS if the bound exceeds
     the claimed epsilon; for a correct mechanism that happens with probability <= 5% per row
     (the seed is fixed, so the table is reproducible). The rows' alpha is split evenly
     over the correct rows, so the whole table holds at once with 95% (family-wise). k-RR, SW and
     the Laplace rows are exactly tight (true loss = eps), so each can fail by chance with
     probability <= alpha_row; seed 0 did so for k-RR at eps 4 (bound 4.001: its held-out count
     was 3.6 sigma low; the sampler is unbiased over 3e7 draws); the default is the project seed.
Approximate DP (the Gaussian reward releases, claimed (eps, delta) with delta = 1e-5): every
event E of an (eps, delta)-DP mechanism has P1(E) <= e^eps P2(E) + delta, so the bound is
ln((lower(P1) - delta) / upper(P2)), the same test with delta subtracted; the claimed epsilon is
the accountant's (PLD) for the event the release spends, and the code is a fine bin of the
standardised log-likelihood-ratio statistic Z (a Gaussian's LLR is linear in the output).
Rows marked "broken" are deliberately over-spending variants that MUST fail (they show the audit
has power).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

ALPHA = 0.05
EPSILONS = (0.5, 1.0, 2.0, 4.0)


# ------------------------------------------------------------------ the bound machinery
def cp_lower(k, n, a):
    """One-sided Clopper-Pearson lower bound on p at level 1 - a (vectorised)."""
    k = np.asarray(k, float)
    return np.where(k > 0, stats.beta.ppf(a, np.maximum(k, 1e-300), n - k + 1), 0.0)


def cp_upper(k, n, a):
    """One-sided Clopper-Pearson upper bound on p at level 1 - a (vectorised)."""
    k = np.asarray(k, float)
    return np.where(k < n, stats.beta.ppf(1 - a, k + 1, np.maximum(n - k, 1e-300)), 1.0)


def log_ratio_bound(k1, k2, n1, n2, a, delta=0.0):
    """ln((lower(P1) - delta) / upper(P2)) with each CP bound at level 1 - a (-inf where the
    numerator is <= 0); delta = 0 for pure DP."""
    lo, hi = cp_lower(k1, n1, a), cp_upper(k2, n2, a)
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(lo - delta, 0.0)) - np.log(hi)


@dataclass
class Bound:
    value: float  # the 95% lower bound on the privacy loss (max of the two directions)
    event: str
    pair: int  # index of the neighbouring pair the event was selected on
    direction: str  # "P1/P2" or "P2/P1"
    n: int  # samples per input drawn (selection + bound halves)


def _candidates(c1: np.ndarray, c2: np.ndarray, extra: Sequence[np.ndarray],
                prefixes: bool = True) -> list[np.ndarray]:
    """Candidate events (boolean masks over codes): LR-sorted prefixes plus ``extra`` masks."""
    if not prefixes:
        return [np.asarray(e, bool) for e in extra]
    order = np.argsort(-(c1 + 0.5) / (c2 + 0.5), kind="stable")
    order = order[(c1 + c2)[order] > 0]
    masks = []
    for j in range(1, order.size + 1):
        m = np.zeros(c1.size, bool)
        m[order[:j]] = True
        masks.append(m)
    return masks + [np.asarray(e, bool) for e in extra]


def audit_codes(pairs: Sequence[tuple[np.ndarray, np.ndarray]], n_codes: int, *,
                alpha: float = ALPHA, extra: Sequence[np.ndarray] = (),
                describe: Callable[[np.ndarray], str] | None = None,
                delta: float = 0.0, prefixes: bool = True) -> Bound:
    """Lower-bound max_E ln(P1(E)/P2(E)) and its reverse from sampled output codes.

    ``pairs``: for each candidate neighbouring pair, the codes drawn under input 1 and input 2
    (equal sizes). The first half of each array selects (pair, event) per direction; the second
    half bounds it (see the module docstring). Returns the larger of the two direction bounds.
    ``delta`` > 0 bounds the epsilon of an (eps, delta) claim instead of a pure one;
    ``prefixes=False`` selects among ``extra`` only (when the optimal events are known, e.g. the
    tails of a Gaussian's LLR statistic, fewer candidates overfit the selection half less).
    """
    best = Bound(-math.inf, "none", 0, "P1/P2", 0)
    for direction in ("P1/P2", "P2/P1"):
        chosen, score = None, -math.inf
        for i, (x1, x2) in enumerate(pairs):
            a1, a2 = (x1, x2) if direction == "P1/P2" else (x2, x1)
            h = min(a1.size, a2.size) // 2
            s1 = np.bincount(a1[:h], minlength=n_codes)
            s2 = np.bincount(a2[:h], minlength=n_codes)
            masks = _candidates(s1, s2, extra, prefixes)
            if not masks:
                continue
            m = np.stack(masks)
            sc = log_ratio_bound(m @ s1, m @ s2, h, h, alpha / 4, delta)
            j = int(np.argmax(sc))
            if sc[j] > score:
                score, chosen = float(sc[j]), (i, masks[j])
        if chosen is None:
            continue
        i, mask = chosen
        a1, a2 = pairs[i] if direction == "P1/P2" else pairs[i][::-1]
        h = min(a1.size, a2.size) // 2
        e1, e2 = a1[h:], a2[h:]
        k1, k2 = int(mask[e1].sum()), int(mask[e2].sum())
        val = float(log_ratio_bound(k1, k2, e1.size, e2.size, alpha / 4, delta))
        if val > best.value:
            desc = describe(mask) if describe else f"{int(mask.sum())} codes"
            best = Bound(val, desc, i, direction, a1.size)
    return best


# ------------------------------------------------------------------ inputs and samplers
def lopsided_space():
    """8 points: one far west (id 0), seven clustered about 111 km east: EM nearly tight."""
    from udfs.space import LocationSpace

    lat = np.array([0.0, 0.0, 0.01, -0.01, 0.005, -0.005, 0.0, 0.01])
    lon = np.array([0.0, 1.0, 1.0, 1.0, 1.01, 1.01, 1.02, 1.02])
    return LocationSpace.from_latlon(lat, lon)


def _traj_describe(n_loc: int, length: int, pairs_txt: Sequence[str]):
    marg = _marginals(n_loc, length)

    def describe(mask: np.ndarray) -> str:
        for (i, a), m in marg.items():
            if np.array_equal(m, mask):
                return f"point {i} = {a}"
        ids = np.flatnonzero(mask)
        outs = [tuple(int(c // n_loc ** (length - 1 - p)) % n_loc for p in range(length))
                for c in ids[:2]]
        txt = ", ".join("(" + ",".join(map(str, o)) + ")" for o in outs)
        return f"{{{txt}}}" if ids.size <= 2 else f"{ids.size} outputs, LR-top: {txt}, ..."

    return describe


def _marginals(n_loc: int, length: int) -> dict[tuple[int, int], np.ndarray]:
    codes = np.arange(n_loc ** length)
    return {(i, a): (codes // n_loc ** (length - 1 - i)) % n_loc == a
            for i in range(length) for a in range(n_loc)}


def _bin_describe(edges: np.ndarray, var: str = "y"):
    """Codes 0..len(edges): code c = values in [edges[c-1], edges[c]) (open ends at 0 / last)."""

    def describe(mask: np.ndarray) -> str:
        ids = np.flatnonzero(mask)
        lo = "-inf" if ids.min() == 0 else f"{edges[ids.min() - 1]:.3f}"
        hi = "inf" if ids.max() == len(edges) else f"{edges[ids.max()]:.3f}"
        span = ids.max() - ids.min() + 1
        what = f"{var} in" if span == ids.size else f"{ids.size} of the {span} bins in"
        return f"{what} [{lo}, {hi})"

    return describe


@dataclass
class Row:
    family: str
    mechanism: str
    eps: float
    broken: bool
    run: Callable[[int, np.random.Generator, float], Bound]
    inputs: str
    delta: float = 0.0  # > 0: an (eps, delta) claim (Gaussian rows)
    bound: Bound | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.bound is not None and self.bound.value > self.eps


def krr_row(eps: float, broken: bool = False) -> Row:
    from udfs.mechanisms import KRR

    k = 4
    mech = KRR(k, 2 * eps if broken else eps)

    def run(n, rng, alpha):
        x1 = mech.perturb(np.zeros(n, np.int64), rng=rng)
        x2 = mech.perturb(np.ones(n, np.int64), rng=rng)
        return audit_codes([(x1, x2)], k, alpha=alpha,
                           describe=lambda m: f"y in {np.flatnonzero(m).tolist()}")

    name = "k-RR (k=4), BROKEN: built with 2 eps" if broken else "k-RR (k=4)"
    return Row("k-RR", name, eps, broken, run, "x = 0 vs 1")


def em_row(eps: float, broken: bool = False) -> Row:
    from udfs.mechanisms import ExponentialMechanism

    sp = lopsided_space()
    mech = ExponentialMechanism(sp, 2 * eps if broken else eps)
    p1, p2 = np.unravel_index(int(np.argmax(sp.dist)), sp.dist.shape)

    def run(n, rng, alpha):
        x1 = mech.perturb(np.full(n, p1), rng=rng)
        x2 = mech.perturb(np.full(n, p2), rng=rng)
        return audit_codes([(x1, x2)], sp.n, alpha=alpha,
                           describe=lambda m: f"y in {np.flatnonzero(m).tolist()}")

    name = "EM over P, BROKEN: built with 2 eps" if broken else "EM over P"
    return Row("EM", name, eps, broken, run,
               f"p = {p1} vs {p2} (the diameter of an 8-point lopsided P)")


def sw_row(eps: float, broken: bool = False) -> Row:
    from udfs.mechanisms import SquareWave

    mech = SquareWave(2 * eps if broken else eps)
    b = mech.b
    edges = np.linspace(-b, 1 + b, 201)

    def run(n, rng, alpha):
        y1 = np.searchsorted(edges, mech.perturb(np.zeros(n), rng=rng), "right")
        y2 = np.searchsorted(edges, mech.perturb(np.ones(n), rng=rng), "right")
        return audit_codes([(y1, y2)], edges.size + 1, alpha=alpha, describe=_bin_describe(edges))

    name = "SW, BROKEN: built with 2 eps" if broken else "SW"
    return Row("SW", name, eps, broken, run, "x = 0 vs 1; y in 200 bins")


TRAJ_PAIRS = {  # lopsided space: 0 is ~111 km west of the cluster 1..7
    "one point differs": (np.array([2, 3, 0]), np.array([2, 3, 1])),  # the far point 0 vs 1
    "all points differ": (np.array([0, 0, 0]), np.array([1, 1, 1])),
    "pivots differ": (np.array([0, 4, 0]), np.array([1, 4, 1])),
}


def traj_row(family: str, eps: float, broken: bool = False) -> Row:
    """EXP, TP, ATP, NGram, TraCS-D or TraCS-C on length-3 trajectories of the lopsided space
    (512 joint outputs)."""
    from udfs.atp import ATP
    from udfs.baselines import EXP
    from udfs.collect import make_mechanism
    from udfs.tp import TP

    sp = lopsided = lopsided_space()
    if family == "EXP":
        # broken: eps per point instead of eps/n (forgetting the split)
        mech = EXP(sp, 3 * eps if broken else eps)
        bug = "eps per point, not eps/n"
    elif family == "TP":
        mech = BrokenTP(sp, eps) if broken else TP(sp, eps)
        bug = "2 eps per step, no split"
    elif family in PEERS:  # the collect defaults; broken: the whole eps on every gram / point
        if family != "NGram":
            sp = square_space()  # TraCS: a P that fills its rectangle (see square_space)
        if broken and family == "TraCS-D":
            mech = BrokenTraCSD(sp, eps)
        else:
            mech = make_mechanism(sp, PEERS[family][1] * eps if broken else eps,
                                  PEERS[family][0])
        bug = PEERS[family][2]
    else:
        mech = BrokenATP(sp, eps) if broken else ATP(sp, eps)
        bug = "2 eps per step, no split"
    length = 3
    traj_pairs = SQUARE_PAIRS if sp is not lopsided else TRAJ_PAIRS
    names = list(traj_pairs)

    def run(n, rng, alpha):
        pairs = []
        for t1, t2 in traj_pairs.values():
            o1 = mech.perturb_group(np.tile(t1, (n, 1)), rng=rng)
            o2 = mech.perturb_group(np.tile(t2, (n, 1)), rng=rng)
            w = sp.n ** np.arange(length - 1, -1, -1)
            pairs.append(((o1 * w).sum(1), (o2 * w).sum(1)))
        bd = audit_codes(pairs, sp.n ** length, alpha=alpha,
                         extra=list(_marginals(sp.n, length).values()),
                         describe=_traj_describe(sp.n, length, names))
        t1, t2 = traj_pairs[names[bd.pair]]
        bd.event = f"{bd.event} [{t1.tolist()} vs {t2.tolist()}]"
        return bd

    name = f"{family}, BROKEN: {bug}" if broken else family
    where = "8-point lopsided P" if sp is lopsided else "8-point square P (3 x 3 grid, no centre)"
    return Row(family, name, eps, broken, run,
               f"length 3 on the {where}; pair selected on the first half")


def square_space():
    """8 points on the border of a 3 x 3 grid of 0.1 degrees (id 0 = south-west corner, 7 =
    north-east corner). TraCS perturbs in P's bounding rectangle, so its audit needs a P that
    fills the rectangle (on the lopsided P nearly all outputs snap to the cluster)."""
    from udfs.space import LocationSpace

    lat = np.array([0.0, 0.0, 0.0, 0.1, 0.1, 0.2, 0.2, 0.2])
    lon = np.array([0.0, 0.1, 0.2, 0.0, 0.2, 0.0, 0.1, 0.2])
    return LocationSpace.from_latlon(lat, lon)


SQUARE_PAIRS = {  # square space: 0 = SW corner, 7 = NE corner
    "one point differs": (np.array([3, 4, 0]), np.array([3, 4, 7])),
    "all points differ": (np.array([0, 0, 0]), np.array([7, 7, 7])),
    "pivots differ": (np.array([0, 4, 0]), np.array([7, 4, 7])),
}

PEERS = {  # family: (collect name, over-spend factor of the broken row on length 3, the bug)
    "NGram": ("ngram", 4, "eps per bigram, sensitivity Delta_u not 2 Delta_u"),
    "TraCS-D": ("tracs_d", 0, "eps per step (direction and distance), no split"),  # BrokenTraCSD
    "TraCS-C": ("tracs_c", 3, "eps per point, not eps/n"),
}


def _broken_classes():
    from udfs.atp import ATP
    from udfs.tp import TP

    @dataclass(frozen=True, eq=False)
    class _BrokenTP(TP):
        def copy_budget(self, n):
            return 2 * self.epsilon_total, 2 * self.epsilon_total

    @dataclass(frozen=True, eq=False)
    class _BrokenATP(ATP):
        def copy_budget(self, n):
            e = 2 * self.epsilon_total
            return {"anchor": e, "radius": e, "direction": e if n > 1 else 0.0, "point": e}

    return _BrokenTP, _BrokenATP


BrokenTP, BrokenATP = _broken_classes()


def _broken_tracs_d():
    from udfs.mechanisms.tracs import TraCSD

    @dataclass(frozen=True, eq=False)
    class _BrokenTraCSD(TraCSD):
        def split(self, length):
            return self.epsilon_total, self.epsilon_total

    return _BrokenTraCSD


BrokenTraCSD = _broken_tracs_d()


# ------------------------------------------------------------------ Laplace releases of training
N_USERS = 10
OTHERS = 0.5  # the other N-1 users' reward for every sample


def _moments(target: float, b: int):
    import torch

    from models.critics import Moments

    r = torch.full((N_USERS, b), OTHERS, dtype=torch.float64)
    r[0] = target
    return Moments(r.sum(0), (r * r).sum(0), N_USERS)


def _llr_codes(stat: np.ndarray, total: float, bins: int = 100) -> np.ndarray:
    """Code of the LLR statistic T in [0, total]: 0 = T <= 0, bins+1 = T >= total."""
    t = np.clip(stat / total, 0.0, 1.0)
    return np.where(t <= 1e-12, 0, np.where(t >= 1 - 1e-12, bins + 1,
                                            1 + np.minimum((t * bins).astype(np.int64),
                                                           bins - 1)))


def _clip_unit(y, m0: float, df: float):
    return np.clip((y - m0) / df, 0.0, 1.0)


def uniform_laplace_row(eps: float, broken: bool = False) -> Row:
    """PateGAIL's uniform Laplace mean; each coordinate of one big batch is one release."""
    import torch

    from models.aggregation.base import delta_f
    from models.aggregation.uniform import UniformLaplace

    df = delta_f(N_USERS)
    lam = df / eps  # per-sample epsilon = Delta_f / lambda = eps
    agg = UniformLaplace(lam / 2 if broken else lam)
    claimed = UniformLaplace(lam).epsilon_per_sample(N_USERS)
    m0 = OTHERS * (N_USERS - 1) / N_USERS

    def run(n, rng, alpha):
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        outs = []
        for target in (0.0, 1.0):
            rel = agg.release(_moments(target, n), gen=gen, spend=lambda e: None)
            outs.append(_llr_codes(_clip_unit(rel.mean.numpy(), m0, df), 1.0))
        bd = audit_codes([tuple(outs)], 102, alpha=alpha, describe=_llr_event)
        return bd

    assert abs(claimed - eps) < 1e-9
    name = ("PateGAIL uniform Laplace, BROKEN: lambda/2" if broken
            else "PateGAIL uniform Laplace")
    return Row("Laplace (training)", name, eps, broken, run,
               f"N = {N_USERS}, one user's rewards 0 vs 1; lambda = Delta_f/eps; B = 1 per draw")


PGPP_B = 2


def pgpp_sample(agg, target: float, m: int, gen):
    """m independent PateGAIL++ releases of a B-sample batch, vectorised over the leading axis.

    Mirrors SensitivityAware.release step by step with the module's own pieces (delta_f,
    laplace, per_sample_budgets under vmap); :func:`check_pgpp_equivalence` asserts that m = 1
    reproduces ``release`` bit for bit with the same generator state.
    """
    import torch

    from models.aggregation.base import delta_f, laplace
    from models.aggregation.sensitivity import per_sample_budgets

    mom = _moments(target, PGPP_B)
    n, b = mom.count, PGPP_B
    df, eps_batch = delta_f(n), agg.eps_batch(n, b)
    mean = mom.sum / n
    eps_p = agg.pilot_fraction * eps_batch / b
    pilot = (mean + (df / eps_p) * laplace((m, b), gen)).clamp(0, 1)
    eps = torch.func.vmap(per_sample_budgets, in_dims=(0, None, None))(
        pilot, eps_batch, agg.delta_prime)
    noisy = mean + (df / eps) * laplace((m, b), gen)
    return pilot, eps, noisy, eps_p


def check_pgpp_equivalence() -> None:
    import torch

    from models.aggregation.sensitivity import SensitivityAware

    agg = SensitivityAware(0.05, pilot="laplace")
    for seed in range(3):
        rel = agg.release(_moments(1.0, PGPP_B), gen=torch.Generator().manual_seed(seed),
                          spend=lambda e: None)
        pilot, eps, noisy, _ = pgpp_sample(agg, 1.0, 1, torch.Generator().manual_seed(seed))
        assert torch.equal(rel.pilot, pilot[0]) and torch.equal(rel.mean, noisy[0]), \
            "vectorised PateGAIL++ sampler drifted from SensitivityAware.release"
        assert torch.allclose(rel.eps_per_sample, eps[0])


def pgpp_row(eps: float, broken: bool = False) -> Row:
    """PateGAIL++ (pilot + sensitivity-aware per-sample budgets), one B = 2 batch per draw."""
    import torch

    from models.aggregation.base import delta_f
    from models.aggregation.sensitivity import SensitivityAware

    df = delta_f(N_USERS)
    pf = 0.1
    lam = (1 + pf) * PGPP_B * df / eps  # batch total (pilot + means) = eps
    # the paper's paid pilot: the audited release is pilot + sensitivity-aware means
    agg = SensitivityAware(lam / 2 if broken else lam, pilot_fraction=pf, pilot="laplace")
    claimed_agg = SensitivityAware(lam, pilot_fraction=pf, pilot="laplace")
    claimed = (1 + pf) * claimed_agg.eps_batch(N_USERS, PGPP_B)
    m0 = OTHERS * (N_USERS - 1) / N_USERS

    def run(n, rng, alpha):
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        outs = []
        for target in (0.0, 1.0):
            pilot, e, noisy, _ = pgpp_sample(agg, target, n, gen)
            # the exact joint log-likelihood ratio of the CLAIMED mechanism is 2 T - eps with
            # T = sum over released values of (their claimed epsilon) x clip((y - m0)/Delta_f,
            # 0, 1); the claimed per-sample budgets are a function of the released pilot only
            scale = claimed_agg.eps_batch(N_USERS, PGPP_B) / agg.eps_batch(N_USERS, PGPP_B)
            eps_p = pf * claimed_agg.eps_batch(N_USERS, PGPP_B) / PGPP_B
            stat = (eps_p * _clip_unit(pilot.numpy(), m0, df).sum(1)
                    + (e.numpy() * scale * _clip_unit(noisy.numpy(), m0, df)).sum(1))
            outs.append(_llr_codes(stat, claimed))
        return audit_codes([tuple(outs)], 102, alpha=alpha, describe=_llr_event)

    assert abs(claimed - eps) < 1e-9
    name = ("PateGAIL++ sensitivity-aware, BROKEN: lambda/2" if broken
            else "PateGAIL++ sensitivity-aware")
    return Row("Laplace (training)", name, eps, broken, run,
               f"N = {N_USERS}, one user's rewards 0 vs 1 on B = {PGPP_B} samples; pilot 0.1")


def _llr_event(mask):
    ids = np.flatnonzero(mask)
    lo, hi = max(ids.min() - 1, 0) / 100, min(ids.max(), 100) / 100
    span = ids.max() - ids.min() + 1
    what = "T/eps in" if span == ids.size else f"{ids.size} of the {span} bins of T/eps in"
    return f"{what} [{lo:.2f}, {hi:.2f}] (T = LLR statistic)"


# ------------------------------------------------------------------ Gaussian releases
GAUSS_B = 16
GAUSS_DELTA = 1e-5
GAUSS_CHUNK = 50_000  # draws per release call (memory)


def _pld_epsilon(event) -> float:
    from models.accounting import PrivacyAccountant

    acc = PrivacyAccountant(GAUSS_DELTA, method="pld")
    acc.spend(event)
    return acc.epsilon()


def gaussian_multiplier_for(eps: float) -> float:
    """The Gaussian noise multiplier whose accounted (PLD) epsilon at GAUSS_DELTA is eps."""
    import dp_accounting

    lo, hi = 0.05, 100.0
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = ((mid, hi) if _pld_epsilon(dp_accounting.GaussianDpEvent(mid)) > eps
                  else (lo, mid))
    return hi


def _z_codes(z: np.ndarray, top: float, step: float = 0.05) -> np.ndarray:
    edges = np.arange(-6.0, top + 6.0, step)
    return np.searchsorted(edges, z, "right"), edges


def gaussian_row(eps: float, scheme: str = "pategail", broken: bool = False) -> Row:
    """A Gaussian reward release over B = 16 samples per draw (N = 10, one user's rewards 0 vs
    1 on every sample). `scheme` pategail: UniformGaussian; pategail++: SensitivityAwareGaussian
    with a fixed public pilot (linspace 0..1: sds spread about 3.4x). Broken: the sd computed as
    if the L2 sensitivity were Delta_f (forgetting sqrt(B)), i.e. noise 4x too small, while the
    claim stays the correct mechanism's."""
    import torch

    from models.aggregation import SensitivityAwareGaussian, UniformGaussian
    from models.aggregation.base import delta_f
    from models.aggregation.sensitivity import gaussian_scales

    df, b = delta_f(N_USERS), GAUSS_B
    m = gaussian_multiplier_for(eps)
    sigma = m * math.sqrt(b) * df  # correct: L2 sensitivity sqrt(B) Delta_f
    prior = torch.linspace(0, 1, b, dtype=torch.float64)
    make = ((lambda s: UniformGaussian(s)) if scheme == "pategail"
            else (lambda s: SensitivityAwareGaussian(s, delta_prime=0.1)))
    kw = {} if scheme == "pategail" else {"prior": prior}
    spent = []
    make(sigma).release(_moments(0.0, b), gen=torch.Generator(), spend=spent.append, **kw)
    claimed = _pld_epsilon(spent[0])
    agg = make(sigma / math.sqrt(b) if broken else sigma)
    sd_claimed = gaussian_scales(None if scheme == "pategail" else prior, sigma, b, 0.1).numpy()
    mu = math.sqrt(float(np.sum((df / sd_claimed) ** 2)))  # = 1 / multiplier of the claim
    m0 = OTHERS * (N_USERS - 1) / N_USERS

    def run(n, rng, alpha):
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        outs = []
        for target in (0.0, 1.0):
            zs = []
            for start in range(0, n, GAUSS_CHUNK):
                k = min(GAUSS_CHUNK, n - start)
                kwk = {} if scheme == "pategail" else {"prior": prior.repeat(k)}
                rel = agg.release(_moments(target, k * b), gen=gen, spend=lambda e: None, **kwk)
                y = rel.mean.numpy().reshape(k, b)
                # standardised LLR statistic of the CLAIMED mechanism: N(0,1) vs N(mu,1)
                zs.append(((y - m0) * (df / sd_claimed ** 2)).sum(1) / mu)
            codes, edges = _z_codes(np.concatenate(zs), mu)
            outs.append(codes)
        c = np.arange(edges.size + 1)  # Neyman-Pearson: the optimal events are Z-tails
        tails = [c >= t for t in c[1:]] + [c < t for t in c[1:]]
        return audit_codes([tuple(outs)], edges.size + 1, alpha=alpha, extra=tails,
                           describe=_bin_describe(edges, "Z"), delta=GAUSS_DELTA,
                           prefixes=False)

    assert abs(claimed - eps) < 0.03 * eps, (claimed, eps)  # the grid: steps < 1.1% in m
    label = "PateGAIL uniform Gaussian" if scheme == "pategail" else (
        "PateGAIL++ Gaussian (history pilot)")
    name = f"{label}, BROKEN: sd from Delta_f, not sqrt(B) Delta_f" if broken else label
    return Row("Gaussian (training)", name, claimed, broken, run,
               f"N = {N_USERS}, one user's rewards 0 vs 1 on B = {b} samples; "
               f"delta = {GAUSS_DELTA:g}; Z = LLR statistic in 0.05 bins", GAUSS_DELTA)


# ------------------------------------------------------------------ driver
def rows() -> list[Row]:
    out: list[Row] = []
    for make in (krr_row, em_row, sw_row):
        out += [make(e) for e in EPSILONS] + [make(1.0, broken=True)]
    for fam in ("EXP", "TP", "ATP", *PEERS):
        out += [traj_row(fam, e) for e in EPSILONS] + [traj_row(fam, 1.0, broken=True)]
    for make in (uniform_laplace_row, pgpp_row):
        out += [make(e) for e in EPSILONS] + [make(1.0, broken=True)]
    for scheme in ("pategail", "pategail++"):
        out += [gaussian_row(e, scheme) for e in EPSILONS]
    out.append(gaussian_row(1.0, "pategail", broken=True))
    return out


def run_table(table: list[Row], samples: int, seed: int, alpha: float = ALPHA,
              progress: Callable[[str], None] | None = None) -> None:
    """Run every row of `table` in place (`row.bound`, `row.seconds`) with `samples` draws per
    input, rows seeded by SeedSequence(seed).spawn and `alpha` (family-wise) split evenly over
    the correct rows; `progress`, when given, gets one line per row."""
    ss = np.random.SeedSequence(seed)
    alpha_row = alpha / max(1, sum(not r.broken for r in table))  # family-wise
    for r, child in zip(table, ss.spawn(len(table)), strict=True):
        t = time.time()
        r.bound = r.run(samples, np.random.default_rng(child), alpha_row)
        r.seconds = time.time() - t
        flag = "FAIL" if r.failed else "pass"
        if progress is not None:
            progress(f"{r.mechanism:50s} eps={r.eps:<4g} bound={r.bound.value:7.3f} {flag:4s} "
                     f"{r.seconds:5.1f}s  {r.bound.event}")


def failures(table: list[Row]) -> tuple[list[Row], list[Row]]:
    """(correct rows whose bound exceeds the claim, broken rows that passed: no power)."""
    bad = [r for r in table if r.failed and not r.broken]
    weak = [r for r in table if r.broken and not r.failed]
    return bad, weak

"""The DP Markov baseline (models/markov.py): its budget, its sensitivities, its noise and that
it recovers a known chain at a large epsilon."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from models.accounting import PrivacyAccountant
from models.config import MarkovSettings
from models.env import SLOTS
from models.markov import (
    HOME,
    MOVE,
    N_ACT,
    RETURN,
    SENSITIVITY,
    STAY,
    Plan,
    calibrate,
    fit_markov,
    label_actions,
    perturb,
    user_stats,
)
from models.starts import kd_levels
from tests.models._toy import toy_data
from udfs.errors import InvalidParameterError

ALPHA = 1e-3  # false-failure rate of each statistical assertion


def _rdp(event) -> float:
    acc = RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(1e-5))


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_spent_epsilon_is_the_target_up_to_the_grid(mechanism, epsilon):
    data = toy_data(n_users=12)
    model = fit_markov(data.days_per_user, data.coords, epsilon, 1e-5, 0,
                       settings=MarkovSettings(mechanism=mechanism))
    spent = model.accountant["epsilon"]
    assert epsilon * (1 - 0.011) <= spent <= epsilon  # the grid: multipliers < 1.1% low
    # oracle: dp_accounting on the plan's exact (unrounded) multipliers is <= the recorded cost
    plan = Plan(mechanism, model.accountant["scale"], len(kd_levels(data.coords)))
    assert _rdp(plan.events()) <= spent * (1 + 1e-9)
    if mechanism == "gaussian":  # the releases compose to exactly one Gaussian of multiplier s
        s = model.accountant["scale"]
        assert _rdp(dpa.GaussianDpEvent(s)) == pytest.approx(_rdp(plan.events()), rel=1e-9)
        assert spent <= _rdp(dpa.GaussianDpEvent(s * 2 ** (-1 / 64))) * (1 + 1e-9)
    else:  # pure epsilon 1/s in basic composition
        assert sum(1 / m for m in plan.multipliers().values()) == pytest.approx(
            1 / model.accountant["scale"])


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_calibration_is_the_smallest_noise_within_the_target(mechanism):
    """Bisection to rel_tol 1e-4: the scale meets the target, 1e-4 less noise would not."""
    def accounted(scale):
        acc = PrivacyAccountant(1e-5, None, "rdp")
        acc.spend(Plan(mechanism, scale, 3).events())
        return acc.epsilon()

    plan = calibrate(mechanism, 3, 2.0, 1e-5, "rdp")
    assert accounted(plan.scale) <= 2.0 < accounted(plan.scale / (1 + 1.0001e-4))


def test_one_user_moves_each_release_by_at_most_its_sensitivity():
    """Brute force over random replacements: the per-release change of the summed statistics
    stays within the L1 / L2 sensitivities the noise is calibrated to."""
    data = toy_data(n_users=6, days=5)
    cell_of = kd_levels(data.coords, (3,))[0]
    n_loc = len(data.coords)
    base = user_stats(data.days_per_user, cell_of, n_loc)
    rng = np.random.default_rng(0)
    for trial in range(50):
        other = [d.copy() for d in data.days_per_user]
        k = int(rng.integers(1, 8))
        if trial % 2:  # an arbitrary user: random locations
            other[0] = rng.integers(0, n_loc, size=(k, SLOTS))
        else:  # a still user (all STAY) at one location
            other[0] = np.full((k, SLOTS), int(rng.integers(n_loc)))
        new = user_stats(other, cell_of, n_loc)
        for name, (d1, d2) in SENSITIVITY.items():
            diff = (getattr(new, name) - getattr(base, name)).ravel()
            assert np.abs(diff).sum() <= d1 + 1e-9, name
            assert np.sqrt((diff ** 2).sum()) <= d2 + 1e-9, name


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_released_noise_has_the_planned_sd(mechanism):
    """Zero statistics, so each release is pure noise: per release the standardised values pass
    a two-sided chi-square test of sum z^2 (Bonferroni over the releases)."""
    data = toy_data(n_users=4)
    levels = kd_levels(data.coords)
    cell_of = kd_levels(data.coords, (3,))[0]
    zero = user_stats([], cell_of, len(data.coords))
    plan = Plan(mechanism, 0.7, len(levels))
    mult = plan.multipliers()
    rng = np.random.default_rng(1)
    z = {k: [] for k in mult}
    for _ in range(200):
        for key, (y, sd) in perturb(zero, plan, levels, rng).items():
            d1, d2 = SENSITIVITY[key.rstrip("0123456789")]
            want = mult[key] * (d2 if mechanism == "gaussian" else math.sqrt(2) * d1)
            assert sd == pytest.approx(want)
            z[key].append(y.ravel() / sd)
    for key, zs in z.items():
        v = np.concatenate(zs)
        chi = float(np.sum(v * v))
        if mechanism == "gaussian":
            lo = stats.chi2.cdf(chi, v.size)
            p = 2 * min(lo, 1 - lo)
        else:  # Laplace: mean of z^2 is 1 with sd sqrt((24 - 4) / 4) / sqrt(n) = sqrt(5 / n)
            p = 2 * stats.norm.sf(abs(chi / v.size - 1) / math.sqrt(5 / v.size))
        assert p * len(z) > ALPHA, (key, chi / v.size)


# ------------------------------------------------------------------ recovery of a known chain
def _true_chain(rng):
    """64 locations on an 8 x 8 grid (4 k-d cells of 16), a random chain of the model's form;
    the within-cell distribution is near uniform so that 'a new place' is always available."""
    xs, ys = np.meshgrid(np.arange(8.0), np.arange(8.0))
    coords = np.column_stack([39.9 + 0.01 * ys.ravel(), 116.3 + 0.01 * xs.ravel()])
    cell_of = kd_levels(coords, (2,))[0]
    start = rng.dirichlet(np.ones(64) * 2)
    act = rng.dirichlet(np.ones(N_ACT) * 3, size=(SLOTS - 1, 2))
    act[:, 1, HOME] = 0
    act /= act.sum(2, keepdims=True)
    trans = rng.dirichlet(np.ones(4) * 2, size=4)
    within = np.zeros(64)
    for c in range(4):
        idx = np.flatnonzero(cell_of == c)
        within[idx] = rng.dirichlet(np.ones(len(idx)) * 20)
    return coords, cell_of, start, act, trans, within


def _simulate(n_days, chain, rng):
    """Independent oracle: the chain stepped one day at a time in plain Python. MOVE draws the
    cell from `trans`, then a place of that cell not yet visited today (`within` renormalised),
    so every generated MOVE is labelled MOVE and the cell table is recovered exactly."""
    _, cell_of, start, act, trans, within = chain
    days = np.empty((n_days, SLOTS), dtype=np.int64)
    for i in range(n_days):
        loc = home = int(rng.choice(64, p=start))
        day = [loc]
        for t in range(SLOTS - 1):
            back = [x for x in day if x != home and x != loc]
            p = act[t, int(loc == home)].copy()
            if not back:
                p[RETURN] = 0
            a = int(rng.choice(N_ACT, p=p / p.sum()))
            if a == HOME:
                loc = home
            elif a == RETURN:
                loc = back[int(rng.integers(len(back)))]
            elif a == MOVE:
                c = int(rng.choice(4, p=trans[cell_of[loc]]))
                w = np.where(cell_of == c, within, 0.0)
                w[day] = 0.0
                loc = int(rng.choice(64, p=w / w.sum()))
            day.append(loc)
        days[i] = day
    return days


def test_recovers_a_known_chain_at_large_epsilon():
    """10,000 days (1,000 users x 10) of a known chain, fit at epsilon 1e4: the estimated tables
    match the truth within sampling error (each tolerance is >= 5 sds of its estimate; `within`
    also carries the small bias of drawing only unvisited places), and days sampled from the fit
    have the data's action frequencies and start distribution."""
    rng = np.random.default_rng(7)
    chain = _true_chain(rng)
    coords, cell_of, start, act, trans, within = chain
    days = _simulate(10_000, chain, rng)
    users = [days[i:i + 10] for i in range(0, len(days), 10)]
    model = fit_markov(users, coords, 1e4, 1e-5, 0,
                       settings=MarkovSettings(cell_depth=2, tau=0.0, smooth=0))
    assert np.array_equal(model.cell_of, cell_of)
    assert np.abs(model.start_probs - start).max() < 0.02  # sd <= 0.0025 per location
    # P(action | slot, at home, RETURN possible) wherever the data had >= 400 such cases:
    # the true row (RETURN struck out and renormalised where it is impossible), within 5
    # binomial sds
    lab, home, can = label_actions(days)
    checked = 0
    for t in range(SLOTS - 1):
        for h in (0, 1):
            for c in (0, 1):
                n = int(((home[:, t] == h) & (can[:, t] == c)).sum())
                if n < 400:
                    continue
                want = act[t, h].copy()
                want[RETURN] *= c
                want /= want.sum()
                assert np.abs(model.action_probs[t, h, c] - want).max() < 5 * 0.5 / math.sqrt(n)
                checked += 1
    assert checked > 100
    assert np.abs(model.cell_trans - trans).max() < 0.02  # ~30,000 moves a row: sd < 0.003
    assert np.abs(model.within - within).max() < 0.02
    fake = model.sample(10_000, np.random.default_rng(1))
    fl = label_actions(fake)[0]
    assert np.abs(np.bincount(fl.ravel(), minlength=N_ACT) / fl.size
                  - np.bincount(lab.ravel(), minlength=N_ACT) / lab.size).max() < 0.02
    assert fake.shape == (10_000, SLOTS) and fake.dtype == np.int64
    assert np.abs(np.bincount(fake[:, 0], minlength=64) / 10_000 - start).max() < 0.02


def test_action_labels():
    d = np.array([[5, 5, 6, 7, 6, 5, 8] + [8] * (SLOTS - 7)])
    act, home, can = label_actions(d)
    assert act[0, :6].tolist() == [STAY, MOVE, MOVE, RETURN, HOME, MOVE]
    assert home[0, :6].tolist() == [True, True, False, False, False, True]
    assert can[0, :6].tolist() == [False, False, False, True, True, True]


def test_bad_arguments():
    data = toy_data()
    with pytest.raises(InvalidParameterError, match="mechanism"):
        fit_markov(data.days_per_user, data.coords, 1.0, 1e-5, 0,
                   settings=MarkovSettings(mechanism="exponential"))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        fit_markov(data.days_per_user, data.coords, 0.0, 1e-5, 0)

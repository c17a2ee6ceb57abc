"""The adaptive second-order DP Markov model (models/markov2.py): its budget against
dp_accounting, the sensitivity and the noise of its second-order release (each check with a
broken variant that fails it), and that its moves follow the place before where the released
counts support it and fall back to first order where they do not."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from scipy import stats

from models import markov2
from models.config import MarkovSettings
from models.env import SLOTS
from models.markov import SHARES, Plan, move_cells
from models.markov2 import (
    SECOND,
    Markov2Settings,
    fit_markov2,
    perturb2,
    place_before,
    release_markov2,
    second_moves,
    shares_of,
    user_stats2,
)
from models.starts import kd_levels
from tests.models._toy import toy_data
from udfs.errors import InvalidParameterError

ALPHA = 1e-3  # false-failure rate of each statistical assertion


def _rdp(event) -> float:
    acc = RdpAccountant()
    acc.compose(event)
    return float(acc.get_epsilon(1e-5))


def _formula_multipliers(mechanism: str, scale: float, n_levels: int, w2: float) -> list[float]:
    """The plan written out from the docstring: markov.SHARES scaled by 1 - w2, a levelled
    component's share split over its levels, and the second-order release's w2."""
    out = []
    for name, w in [*((k, (1 - w2) * v) for k, v in SHARES.items()), (SECOND, w2)]:
        per = n_levels if name in ("starts", "destinations") else 1
        share = w / per
        out += [scale / (math.sqrt(share) if mechanism == "gaussian" else share)] * per
    return out


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
@pytest.mark.parametrize("w2", [0.2, 0.5])
def test_the_plan_composes_to_the_target_under_dp_accounting(mechanism, w2):
    data = toy_data(n_users=12)
    eps = 4.0
    model = fit_markov2(data.days_per_user, data.coords, eps, 1e-5, 0,
                        Markov2Settings(MarkovSettings(mechanism=mechanism), second_share=w2))
    spent, s = model.accountant["epsilon"], model.accountant["scale"]
    assert eps * (1 - 0.011) <= spent <= eps  # the grid: multipliers < 1.1% low
    n_levels = len(kd_levels(data.coords))
    mults = _formula_multipliers(mechanism, s, n_levels, w2)
    plan = Plan(mechanism, s, n_levels, shares_of(w2))
    assert sorted(plan.multipliers().values()) == pytest.approx(sorted(mults), rel=1e-12)
    ev = dpa.GaussianDpEvent if mechanism == "gaussian" else dpa.LaplaceDpEvent
    direct = _rdp(dpa.ComposedDpEvent([ev(m) for m in mults]))  # oracle: no rounding
    assert direct <= spent * (1 + 1e-9)
    if mechanism == "gaussian":  # shares sum to 1: exactly one Gaussian of multiplier s
        assert direct == pytest.approx(_rdp(dpa.GaussianDpEvent(s)), rel=1e-9)
        assert spent <= _rdp(dpa.GaussianDpEvent(s * 2 ** (-1 / 64))) * (1 + 1e-9)
    else:
        assert sum(1 / m for m in mults) == pytest.approx(1 / s)
    assert model.accountant["second_share"] == w2


def _unnormalised(days_per_user, cell_of, n_loc):
    """A broken variant: the raw second-order counts, not divided by each user's moves."""
    g = int(cell_of.max()) + 1
    out = np.zeros((g, g, g))
    for days in days_per_user:
        moves = second_moves(days, cell_of)
        np.add.at(out, tuple(moves.T), 1.0)
    return out


def _worst_change(second_of, seed=0):
    """Largest (L1, L2) change of the second-order table over random replacements of a user."""
    data = toy_data(n_users=6, days=5)
    cell_of = kd_levels(data.coords, (3,))[0]
    n_loc = len(data.coords)
    base = second_of(data.days_per_user, cell_of, n_loc)
    rng = np.random.default_rng(seed)
    worst = [0.0, 0.0]
    for _ in range(50):
        other = [d.copy() for d in data.days_per_user]
        other[0] = rng.integers(0, n_loc, size=(int(rng.integers(1, 8)), SLOTS))
        diff = (second_of(other, cell_of, n_loc) - base).ravel()
        worst = [max(worst[0], np.abs(diff).sum()), max(worst[1], math.sqrt((diff ** 2).sum()))]
    return worst


def test_one_user_moves_the_second_order_table_by_at_most_its_sensitivity():
    l1, l2 = _worst_change(lambda d, c, n: user_stats2(d, c, n).second)
    assert l1 <= markov2.SENSITIVITY2[0] + 1e-9 and l2 <= markov2.SENSITIVITY2[1] + 1e-9
    assert l1 > 1.0  # the replacements do reach near the bound
    # the same check fails on unnormalised counts (a user's weight grows with its days)
    bad1, bad2 = _worst_change(_unnormalised)
    assert bad1 > markov2.SENSITIVITY2[0] and bad2 > markov2.SENSITIVITY2[1]


def _second_order_noise_p(mechanism: str) -> float:
    """p-value of the released second-order table against its exact formula: the residuals
    (noisy - exact) / (m Delta) with m = s / sqrt(w2) (Gaussian, Delta2 = sqrt(2)) or
    s / w2 (Laplace, scale m Delta1 with Delta1 = 2), over 40 releases, KS-tested against
    N(0, 1) or Laplace(0, 1)."""
    data = toy_data(n_users=8)
    levels = kd_levels(data.coords)
    cell_of = kd_levels(data.coords, (3,))[0]
    exact = user_stats2(data.days_per_user, cell_of, len(data.coords))
    w2, s = 0.2, 0.7
    plan = Plan(mechanism, s, len(levels), shares_of(w2))
    scale = (s / math.sqrt(w2) * math.sqrt(2) if mechanism == "gaussian" else s / w2 * 2.0)
    rng = np.random.default_rng(3)
    z = np.concatenate([((perturb2(exact, plan, levels, rng)[SECOND][0] - exact.second)
                         / scale).ravel() for _ in range(40)])
    return float(stats.kstest(z, "norm" if mechanism == "gaussian" else "laplace").pvalue)


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_released_second_order_noise_follows_its_formula(mechanism):
    assert _second_order_noise_p(mechanism) > ALPHA


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_the_noise_check_fails_on_half_the_noise(mechanism, monkeypatch):
    monkeypatch.setattr(markov2, "SENSITIVITY2", (1.0, math.sqrt(2.0) / 2))
    assert _second_order_noise_p(mechanism) < ALPHA


def test_the_first_order_releases_keep_their_noise():
    """perturb2's first-order releases are `markov.perturb`'s at the scaled shares (sd m Delta2
    with m = s / sqrt((1 - w2) w_k / levels))."""
    data = toy_data(n_users=4)
    levels = kd_levels(data.coords)
    cell_of = kd_levels(data.coords, (3,))[0]
    plan = Plan("gaussian", 0.5, len(levels), shares_of(0.25))
    noisy = perturb2(user_stats2(data.days_per_user, cell_of, len(data.coords)), plan, levels,
                     np.random.default_rng(0))
    assert noisy["actions"][1] == pytest.approx(0.5 / math.sqrt(0.75 * 0.35) * math.sqrt(94))
    assert noisy["starts0"][1] == pytest.approx(
        0.5 / math.sqrt(0.75 * 0.15 / len(levels)) * math.sqrt(2))


def test_place_before():
    d = np.array([[5, 5, 6, 6, 7, 5, 5] + [5] * (SLOTS - 7)])
    assert place_before(d)[0, :7].tolist() == [-1, -1, 5, 5, 6, 7, 7]


# ----------------------------------------------------------- second-order structure, sampled
def _two_routes(n_users=200, days=5):
    """16 locations on a 4 x 4 grid, 8 move cells of 2; half the users go A -> B -> C, the
    other half D -> B -> E (five places in five cells), every day the same."""
    xs, ys = np.meshgrid(np.arange(4.0), np.arange(4.0))
    coords = np.column_stack([39.9 + 0.01 * ys.ravel(), 116.3 + 0.01 * xs.ravel()])
    cell_of = move_cells(coords, 3)
    a, b, c, d, e = (int(np.flatnonzero(cell_of == k)[0]) for k in range(5))

    def day(x, y, z):
        return [x] * 10 + [y] * 10 + [z] * (SLOTS - 20)

    users = [np.array([day(a, b, c) if u % 2 else day(d, b, e)] * days)
             for u in range(n_users)]
    return users, coords, cell_of, (a, b, c, d, e)


def _share_of_c_after_a(days, places):
    """Of the sampled days from A, the share whose move out of B (slot 19 -> 20) goes to C."""
    a, b, c, _, _ = places
    via_b = (days[:, 0] == a) & (days[:, 19] == b)
    return float((days[via_b, 20] == c).mean()), int(via_b.sum())


def test_second_order_structure_is_reproduced_at_a_large_epsilon():
    users, coords, cell_of, places = _two_routes()
    settings = Markov2Settings(MarkovSettings(cell_depth=3, smooth=0))
    model = fit_markov2(users, coords, 1e4, 1e-5, 0, settings)
    a, b, _, d, _ = places
    assert model.second_used[cell_of[a], cell_of[b]] and model.second_used[cell_of[d], cell_of[b]]
    share2, n2 = _share_of_c_after_a(model.sample(4000, np.random.default_rng(1)), places)
    share1, n1 = _share_of_c_after_a(model.first_order().sample(4000, np.random.default_rng(1)),
                                     places)
    assert n2 > 1500 and n1 > 1500
    assert share2 > 0.99  # the real days: every A -> B day goes on to C
    assert abs(share1 - 0.5) < 5 * 0.5 / math.sqrt(n1)  # first order: C or E from B, 50/50


def test_tiny_epsilon_falls_back_to_first_order():
    """At epsilon 0.05 the route rows' 100 users of mass are far below the threshold (3 sds of
    a row's noisy total): no release uses them, a row of pure noise clears it at the normal tail
    rate (P(Z > 3) = 0.00135 a row), and a release that uses no row samples exactly the days of
    its first-order chain."""
    users, coords, cell_of, (a, b, _, d, _) = _two_routes()
    exact = user_stats2(users, cell_of, len(coords))
    used, identical = [], 0
    for seed in range(10):
        model = release_markov2(exact, coords, cell_of, 0.05, 1e-5, seed,
                                Markov2Settings(MarkovSettings(cell_depth=3, smooth=0)))
        assert not model.second_used[cell_of[[a, d]], cell_of[b]].any()
        used.append(int(model.second_used.sum()))
        if not used[-1]:
            assert np.array_equal(model.sample(500, np.random.default_rng(2)),
                                  model.first_order().sample(500, np.random.default_rng(2)))
            identical += 1
    g = int(cell_of.max()) + 1
    assert sum(used) <= stats.binom.ppf(1 - ALPHA, 10 * g * g, stats.norm.sf(3))
    assert identical >= 5


def test_bad_settings():
    with pytest.raises(InvalidParameterError, match="mechanism"):
        Markov2Settings(MarkovSettings(mechanism="exponential"))
    with pytest.raises(InvalidParameterError, match="second_share"):
        Markov2Settings(second_share=1.0)
    data = toy_data()
    with pytest.raises(InvalidParameterError, match="epsilon"):
        fit_markov2(data.days_per_user, data.coords, 0.0, 1e-5, 0)
    with pytest.raises(InvalidParameterError, match="no users"):
        fit_markov2([], data.coords, 1.0, 1e-5, 0)

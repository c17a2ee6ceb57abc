from __future__ import annotations

import json
import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from scipy.optimize import brentq
from scipy.stats import norm

from models.accounting import PrivacyAccountant
from udfs.errors import BudgetExceededError, InvalidParameterError

SEQ = [dpa.LaplaceDpEvent(2.0), dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(0.5), 3),
       dpa.ComposedDpEvent([dpa.LaplaceDpEvent(4.0), dpa.LaplaceDpEvent(1.0)])]
HAND = 1 / 2 + 3 * 2 + 1 / 4 + 1  # basic composition: sum of 1 / noise multiplier


@pytest.mark.parametrize("method", ["rdp", "pld"])
def test_known_sequence(method):
    acc = PrivacyAccountant(method=method)
    for e in SEQ:
        acc.spend(e)
    assert acc.basic_epsilon() == pytest.approx(HAND, rel=1e-12)
    assert acc.basic_epsilon() >= HAND
    assert acc.epsilon() <= acc.basic_epsilon()
    assert acc.releases == 6


def test_pld_tighter_than_basic_for_many_small_releases():
    acc = PrivacyAccountant(method="pld")
    acc.spend(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(16.0), 1600))
    assert acc.basic_epsilon() == pytest.approx(100.0)
    assert acc.epsilon() < 0.5 * acc.basic_epsilon()


def test_off_grid_multipliers_round_toward_larger_epsilon():
    acc = PrivacyAccountant()
    acc.spend(dpa.LaplaceDpEvent(3.0))
    assert 1 / 3 <= acc.basic_epsilon() <= (1 / 3) * 2 ** (1 / 64)


def test_stops_before_the_target_is_exceeded():
    acc = PrivacyAccountant(target_epsilon=1.0, method="pld")
    acc.spend(dpa.LaplaceDpEvent(2.0))  # 0.5
    before = acc.state_dict()
    with pytest.raises(BudgetExceededError, match=r"above the target 1 .*remaining 0\.5"):
        acc.spend(dpa.LaplaceDpEvent(1.0))  # would reach 1.5
    assert acc.state_dict() == before  # nothing recorded
    acc.spend(dpa.LaplaceDpEvent(2.0))  # exactly reaching 1.0 is allowed
    assert acc.epsilon() <= 1.0


def test_state_dict_round_trip():
    acc = PrivacyAccountant(method="rdp", target_epsilon=50)
    for e in SEQ:
        acc.spend(e)
    back = PrivacyAccountant.from_state_dict(acc.state_dict())
    assert back.epsilon() == acc.epsilon() and back.summary() == acc.summary()


def test_rejects_unsupported_events_and_bad_params():
    with pytest.raises(InvalidParameterError, match="only Laplace, Gaussian"):
        PrivacyAccountant().spend(dpa.RandomizedResponseDpEvent(0.5, 4))
    with pytest.raises(InvalidParameterError, match="delta"):
        PrivacyAccountant(delta=0)


# ------------------------------------------------------------------ Gaussian events
def exact_gaussian_epsilon(m: float, delta: float) -> float:
    """Hand oracle: the exact epsilon of one Gaussian mechanism with noise multiplier m
    (Balle & Wang 2018, Thm 8: delta(eps) = Phi(1/(2m) - eps m) - e^eps Phi(-1/(2m) - eps m))."""
    def gap(e):
        return (norm.cdf(1 / (2 * m) - e * m) - math.exp(e) * norm.cdf(-1 / (2 * m) - e * m)
                - delta)
    return brentq(gap, 0.0, 200.0)


def direct(event, method="rdp", delta=1e-5) -> float:
    acc = RdpAccountant() if method == "rdp" else PLDAccountant(
        value_discretization_interval=1e-2)
    acc.compose(event)
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize("m", [0.8, 2.0, 4.0])
def test_one_gaussian_against_the_exact_curve(m):
    """PLD is within its discretisation (1e-2 on the loss) above the exact epsilon; RDP is a
    looser upper bound. m on the grid (2^(k/64)) or not: the recorded multiplier is <= m."""
    exact = exact_gaussian_epsilon(m, 1e-5)
    pld, rdp = (PrivacyAccountant(method=k) for k in ("pld", "rdp"))
    for acc in (pld, rdp):
        acc.spend(dpa.GaussianDpEvent(m))
    assert exact <= pld.epsilon() <= exact_gaussian_epsilon(m * 2 ** (-1 / 64), 1e-5) + 0.02
    assert pld.epsilon() <= rdp.epsilon()
    assert math.isinf(pld.basic_epsilon()) and pld.summary()["basic_epsilon"] is None


@pytest.mark.parametrize("method", ["rdp", "pld"])
def test_gaussian_ledger_equals_dp_accounting_with_the_grid_rounding(method):
    seq = [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0), 50),
           dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(40.0), 200)]
    acc = PrivacyAccountant(method=method)
    for e in seq:
        acc.spend(e)
    lo = direct(dpa.ComposedDpEvent(seq), method)
    down = 2 ** (-1 / 64)  # the most the grid can round a multiplier down
    hi = direct(dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(3.0 * down), 50),
                                     dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(40.0 * down),
                                                             200)]), method)
    assert lo <= acc.epsilon() * (1 + 1e-9) and acc.epsilon() <= hi * (1 + 1e-9)
    # on-grid multipliers (2^(k/64)) are recorded exactly
    exact = PrivacyAccountant(method=method)
    exact.spend(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 50))
    assert exact.epsilon() == pytest.approx(
        direct(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 50), method), rel=1e-9)


def test_poisson_sampled_gaussian_tree_is_merged_exactly():
    """A round's two Gaussian releases under one Poisson sample = one Gaussian of multiplier
    m / sqrt(2) sampled once (not two independently sampled events)."""
    m, q = 2.0 * math.sqrt(2), 0.05
    acc = PrivacyAccountant(method="rdp")
    acc.spend(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
        q, dpa.ComposedDpEvent([dpa.GaussianDpEvent(m), dpa.GaussianDpEvent(m)])), 300))
    want = direct(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
        q, dpa.GaussianDpEvent(2.0)), 300))
    assert acc.epsilon() == pytest.approx(want, rel=1e-9)
    assert acc.epsilon() < direct(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(2.0), 300)) / 5
    for method in ("pld",):
        p = PrivacyAccountant(method=method)
        p.spend(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(2.0)),
                                        300))
        assert p.epsilon() == pytest.approx(direct(dpa.SelfComposedDpEvent(
            dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(2.0)), 300), "pld"), rel=1e-9)


def test_poisson_sampled_laplace_needs_pld_and_composed_laplace_is_refused():
    q, m = 0.1, 1.0
    pld = PrivacyAccountant(method="pld")
    pld.spend(dpa.PoissonSampledDpEvent(q, dpa.LaplaceDpEvent(m)))
    hand = math.log1p(q * math.expm1(1 / m))  # amplified pure epsilon, add/remove
    assert hand <= pld.basic_epsilon() <= hand * (1 + 1e-12)
    assert pld.epsilon() <= pld.basic_epsilon()
    with pytest.raises(InvalidParameterError, match="need accountant 'pld'"):
        PrivacyAccountant(method="rdp").spend(dpa.PoissonSampledDpEvent(q, dpa.LaplaceDpEvent(m)))
    with pytest.raises(InvalidParameterError, match="composed Laplace releases cannot"):
        pld.spend(dpa.PoissonSampledDpEvent(q, dpa.SelfComposedDpEvent(
            dpa.LaplaceDpEvent(m), 2)))


def test_state_dict_round_trip_with_gaussian_and_sampled_events():
    acc = PrivacyAccountant(method="rdp")
    acc.spend(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(2.0), 3))
    acc.spend(dpa.GaussianDpEvent(1.5))
    acc.spend(dpa.PoissonSampledDpEvent(0.2, dpa.GaussianDpEvent(1.5)))
    sd = acc.state_dict()
    json.dumps(sd)  # what a run folder writes
    back = PrivacyAccountant.from_state_dict(json.loads(json.dumps(sd)))
    assert back.entries == acc.entries and back.epsilon() == acc.epsilon()


def test_pre_gaussian_state_dict_still_loads():
    """A checkpoint written before Gaussian events existed: no `events` key."""
    old = {"delta": 1e-5, "target": 50.0, "method": "rdp", "grid": 64, "pld_interval": 0.01,
           "counts": {64: 3, -64: 1}, "releases": 4}
    acc = PrivacyAccountant.from_state_dict(old)
    assert acc.basic_epsilon() == pytest.approx(3 / 2 + 2)
    assert acc.state_dict() == {**old, "events": []}

from __future__ import annotations

import dp_accounting as dpa
import pytest

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


def test_rejects_non_laplace_events_and_bad_params():
    with pytest.raises(InvalidParameterError, match="only Laplace"):
        PrivacyAccountant().spend(dpa.GaussianDpEvent(1.0))
    with pytest.raises(InvalidParameterError, match="delta"):
        PrivacyAccountant(delta=0)

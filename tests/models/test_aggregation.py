from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from models.accounting import PrivacyAccountant
from models.aggregation import LdpReward, LocalRewards, SensitivityAware, UniformLaplace
from models.aggregation.base import delta_f, delta_v
from models.aggregation.ldp import ldp_noise, perturbed_moments
from models.aggregation.sensitivity import per_sample_budgets
from models.critics import Moments
from udfs.errors import InvalidParameterError


def _moments(n=10, b=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.rand((n, b), generator=g, dtype=torch.float64)
    return r, Moments(r.sum(0), (r * r).sum(0), n)


def test_variance_sensitivity_against_brute_force():
    """Oracle: exhaustive search over a grid of [0,1] values for small N."""
    grid = np.linspace(0, 1, 6)
    for n in (2, 3, 4):
        worst = 0.0
        for rest in itertools.product(grid, repeat=n - 1):
            vs = [np.var(np.array((x, *rest))) for x in grid]
            worst = max(worst, max(vs) - min(vs))
        assert worst <= delta_v(n) + 1e-12
        assert worst == pytest.approx(delta_v(n))  # attained at x in {0, 1}, others all 0
    assert delta_v(83) < delta_f(83)


def test_per_sample_budgets_sum_to_the_matched_total():
    r, mom = _moments()
    s = SensitivityAware(noise=0.1, pilot_fraction=0.2, pilot="laplace")
    spent = []
    rel = s.release(mom, gen=torch.Generator().manual_seed(0), spend=spent.append)
    eps_batch = 400 * (1 / 10) / 0.1
    assert rel.eps_per_sample.sum().item() == pytest.approx(eps_batch, rel=1e-12)
    assert rel.eps_per_sample.sum().item() == pytest.approx(
        UniformLaplace(0.1).epsilon_per_sample(10) * 400, rel=1e-12)
    # riskier samples (pilot near 1) get smaller budgets
    order = torch.argsort(rel.pilot)
    assert rel.eps_per_sample[order[0]] >= rel.eps_per_sample[order[-1]]
    # the ledger, in basic composition, equals pilot + batch (rounded up by < 1.1%)
    acc = PrivacyAccountant()
    for e in spent:
        acc.spend(e)
    exact = (0.2 + 1.0) * eps_batch
    assert exact <= acc.basic_epsilon() <= exact * 2 ** (1 / 64)
    assert rel.epsilon_spent == pytest.approx(exact)


def test_per_sample_budget_formula():
    pilot = torch.tensor([0.0, 0.5, 1.0, 1.7, -0.3], dtype=torch.float64)
    eps = per_sample_budgets(pilot, 10.0, 0.1)
    w = torch.tensor([1.1, 0.6, 0.1, 0.1, 1.1], dtype=torch.float64)
    assert torch.allclose(eps, 10 * w / w.sum())


def test_uniform_noise_scale_and_accounting():
    """Noise = released mean - true mean ~ Laplace(lambda): sd sqrt(2)*lambda.
    False-failure rate: the sample sd of 20,000 Laplace draws is within 5% of its mean with
    probability > 1 - 1e-6 (CLT, sd of the estimate ~ 1.1% relative)."""
    r, mom = _moments(n=10, b=20000)
    spent = []
    rel = UniformLaplace(noise=0.3, beta=0.0).release(mom, gen=torch.Generator().manual_seed(1),
                                                      spend=spent.append)
    noise = rel.mean - r.mean(0)
    assert float(noise.std()) == pytest.approx(np.sqrt(2) * 0.3, rel=0.05)
    acc = PrivacyAccountant()
    for e in spent:
        acc.spend(e)
    assert acc.basic_epsilon() == pytest.approx(20000 / (10 * 0.3), rel=0.011)


def test_compensation_spends_the_variance_release():
    r, mom = _moments(n=10, b=100)
    spent = []
    rel = UniformLaplace(noise=1e-4, beta=1.0).release(mom, gen=torch.Generator().manual_seed(1),
                                                       spend=spent.append)
    assert len(spent) == 2 and rel.epsilon_spent == pytest.approx(2 * 100 / (10 * 1e-4))
    # tiny noise: xi ~ population sd of the users' rewards
    assert torch.allclose(rel.xi, r.std(0, correction=0), atol=1e-2)
    assert torch.allclose(rel.rewards, rel.mean - rel.xi)


def test_ldp_is_shard_invariant_and_unbiased():
    r, _ = _moments(n=6, b=50)
    scale = torch.full((50,), 0.5, dtype=torch.float64)
    noise = ldp_noise(6, 50, torch.Generator().manual_seed(2))
    whole = perturbed_moments(r, scale, noise)
    parts = perturbed_moments(r[:2], scale, noise[:2]).merge(
        perturbed_moments(r[2:], scale, noise[2:]))
    assert torch.allclose(whole.sum, parts.sum) and whole.count == parts.count
    spent = []
    rel = LdpReward(noise=0.5, sensitivity_aware=True, pilot="laplace").release(
        LocalRewards(r.float(), torch.arange(6), 6), gen=torch.Generator().manual_seed(0),
        spend=spent.append)
    assert rel.eps_per_sample.sum().item() == pytest.approx(50 / 0.5)
    assert rel.pilot is not None and len(spent) == 2


def test_bad_parameters():
    with pytest.raises(InvalidParameterError, match="noise"):
        UniformLaplace(noise=0)
    with pytest.raises(InvalidParameterError, match="delta_prime"):
        SensitivityAware(noise=0.1, delta_prime=0)

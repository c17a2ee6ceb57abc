"""Gaussian reward releases (mechanism="gaussian"): the noise has the stated per-sample sd, and
each batch is charged as ONE Gaussian mechanism with the multiplier its L2 sensitivity gives."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from scipy import stats

from models.accounting import PrivacyAccountant
from models.aggregation import SensitivityAwareGaussian, UniformGaussian
from models.aggregation.base import delta_f, delta_v, gaussian
from models.aggregation.sensitivity import gaussian_multiplier_of, gaussian_scales
from models.config import TrainConfig
from models.critics import Moments
from udfs.errors import ConfigError, InvalidParameterError

ALPHA = 1e-3  # false-failure rate of each statistical assertion on a correct mechanism


def _moments(n=10, b=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = torch.rand((n, b), generator=g, dtype=torch.float64)
    return r, Moments(r.sum(0), (r * r).sum(0), n)


def _noise(scheme, mom, draws, seed=0, **kw):
    """(draws, B) released mean - true mean, and the stated (B,) sd."""
    gen = torch.Generator().manual_seed(seed)
    rels = [scheme.release(mom, gen=gen, spend=lambda e: None, **kw) for _ in range(draws)]
    truth = mom.sum / mom.count
    return (torch.stack([r.mean for r in rels]) - truth).numpy(), rels[0].noise_sd.numpy()


def sd_check(noise: np.ndarray, sd: np.ndarray, groups: int = 8) -> float:
    """Bonferroni p-value that every coordinate's noise is N(0, sd_i^2): coordinates are grouped
    by stated sd (deciles); per group, the standardised values z get a two-sided chi-square test
    of sum z^2 (variance) and a KS test against N(0, 1) (shape)."""
    z = noise / sd[None, :]
    order = np.argsort(sd, kind="stable")
    ps = []
    for idx in np.array_split(order, groups):
        zz = z[:, idx].ravel()
        chi = float(np.sum(zz * zz))
        lo = stats.chi2.cdf(chi, zz.size)
        ps += [2 * min(lo, 1 - lo), stats.kstest(zz, "norm").pvalue]
    return min(1.0, min(ps) * len(ps))


@dataclasses.dataclass(frozen=True)
class _TooLittleNoise(UniformGaussian):
    """Broken: draws 0.95 sigma but states sigma (e.g. an L2 sensitivity rounded down)."""

    def release(self, mom, *, gen, spend, normaliser=None):
        rel = UniformGaussian(0.95 * self.noise).release(mom, gen=gen, spend=spend)
        return dataclasses.replace(rel, noise_sd=torch.full_like(rel.noise_sd, self.noise))


@dataclasses.dataclass(frozen=True)
class _UniformNoiseStatedSkewed(SensitivityAwareGaussian):
    """Broken: states the pilot's sigma_i but draws the uniform sigma for every sample."""

    def release(self, mom, *, gen, spend, prior=None, normaliser=None):
        rel = UniformGaussian(self.noise).release(mom, gen=gen, spend=spend)
        b = mom.sum.shape[0]
        return dataclasses.replace(rel, noise_sd=gaussian_scales(prior, self.noise, b,
                                                                 self.delta_prime))


def _prior(b=400, seed=3):
    return torch.rand(b, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_uniform_gaussian_noise_has_the_stated_sd():
    """250 draws x 400 samples = 100,000 values per test; p > ALPHA for the correct release."""
    _, mom = _moments()
    noise, sd = _noise(UniformGaussian(0.3), mom, 250)
    assert np.allclose(sd, 0.3)
    assert sd_check(noise, sd) > ALPHA


def test_too_little_noise_fails_the_sd_check():
    """sd 0.95 sigma over 100,000 values: sum z^2 is about 22 standard deviations low."""
    _, mom = _moments()
    noise, sd = _noise(_TooLittleNoise(0.3), mom, 250)
    assert sd_check(noise, sd) < 1e-6


def test_sensitivity_aware_gaussian_noise_has_the_stated_per_sample_sd():
    _, mom = _moments()
    prior = _prior()
    scheme = SensitivityAwareGaussian(0.3, delta_prime=0.1)
    noise, sd = _noise(scheme, mom, 250, prior=prior)
    assert sd.max() / sd.min() > 2  # heterogeneous sds: the check sees each group
    assert sd_check(noise, sd) > ALPHA
    # more noise where the pilot's reward is high (w = 1 - R_p + delta' small): monotone
    assert stats.spearmanr(prior.numpy(), sd).statistic == pytest.approx(1.0)


def test_uniform_noise_stated_as_per_sample_sds_fails_the_check():
    """The pooled sum of z^2 matches (mean of sigma^2/sigma_i^2 is 1 by construction); the
    grouped check sees that the small-sd group is too noisy and the large-sd group too quiet."""
    _, mom = _moments()
    noise, sd = _noise(_UniformNoiseStatedSkewed(0.3), mom, 250, prior=_prior())
    assert sd_check(noise, sd) < 1e-6


def test_per_sample_sds_match_the_uniform_multiplier_for_any_pilot():
    """sum_i (Delta_f / sigma_i)^2 = B Delta_f^2 / sigma^2 (the matched budget), and the release
    records exactly one GaussianDpEvent with that multiplier."""
    _, mom = _moments(n=7, b=300)
    uniform = UniformGaussian(0.4).multiplier(7, 300)
    assert uniform == pytest.approx(0.4 * 7 / math.sqrt(300), rel=1e-15)
    for prior in (None, _prior(300, 1), torch.zeros(300, dtype=torch.float64),
                  torch.tensor([1.0] * 299 + [0.0], dtype=torch.float64)):
        sd = gaussian_scales(prior, 0.4, 300, 0.1)
        assert gaussian_multiplier_of(sd, delta_f(7)) == pytest.approx(uniform, rel=1e-12)
        spent = []
        SensitivityAwareGaussian(0.4).release(mom, gen=torch.Generator().manual_seed(0),
                                              spend=spent.append, prior=prior)
        assert len(spent) == 1 and isinstance(spent[0], dpa.GaussianDpEvent)
        assert spent[0].noise_multiplier == pytest.approx(uniform, rel=1e-12)


@pytest.mark.parametrize("method", ["rdp", "pld"])
def test_a_gaussian_batch_costs_one_gaussian_of_the_l2_multiplier(method):
    """Against dp_accounting directly: ONE Gaussian with multiplier sigma N / sqrt(B) (L2
    sensitivity sqrt(B)/N; the same as B composed per-sample Gaussians of multiplier sigma N,
    since Gaussians compose in L2). sigma N = 4 and sigma N / sqrt(256) = 0.25 lie on the
    accountant's grid 2^(k/64), so both are recorded exactly."""
    _, mom = _moments(n=10, b=256)
    spent = []
    rel = UniformGaussian(0.4).release(mom, gen=torch.Generator().manual_seed(0),
                                       spend=spent.append)
    acc = PrivacyAccountant(method=method)
    for e in spent:
        acc.spend(e)
    m = 0.4 * 10 / math.sqrt(256)
    want = dpa.rdp.RdpAccountant() if method == "rdp" else dpa.pld.PLDAccountant(
        value_discretization_interval=1e-2)
    want.compose(dpa.GaussianDpEvent(m))
    assert acc.epsilon() == pytest.approx(want.get_epsilon(1e-5), rel=1e-9)
    per_sample = PrivacyAccountant(method=method)
    per_sample.spend(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(0.4 * 10), 256))
    assert per_sample.epsilon() == pytest.approx(acc.epsilon(), rel=1e-6)
    assert rel.epsilon_spent == pytest.approx(
        PrivacyAccountant(method="rdp").spend(dpa.GaussianDpEvent(m)), rel=1e-9)
    assert torch.allclose(rel.eps_per_sample, torch.full((256,), 0.1 / 0.4, dtype=torch.float64))


def test_variance_release_has_the_same_multiplier_and_its_sd():
    r, mom = _moments(n=10, b=20000)
    spent = []
    rel = UniformGaussian(0.2, beta=1.0).release(mom, gen=torch.Generator().manual_seed(1),
                                                 spend=spent.append)
    assert [e.noise_multiplier for e in spent] == [UniformGaussian(0.2).multiplier(10, 20000)] * 2
    # the variance gets sd sigma * Delta_v / Delta_f = 0.2 * 0.9 from the same stream (its draw
    # follows the mean's); xi = sqrt(max(0, var + noise))
    var = r.var(0, correction=0)
    noisy_var = (rel.mean - rel.rewards) ** 2  # xi^2 = max(0, var~)
    pos = noisy_var > 0
    assert pos.float().mean() > 0.2
    gen = torch.Generator().manual_seed(1)
    gaussian((20000,), gen)  # the mean's draw
    expect = var + 0.2 * (delta_v(10) / delta_f(10)) * gaussian((20000,), gen)
    assert torch.allclose(rel.xi, expect.clamp_min(0).sqrt())


def test_poisson_normaliser_is_the_public_divisor_and_sets_the_sensitivity():
    _, mom = _moments(n=6, b=100)
    spent = []
    rel = UniformGaussian(0.3).release(mom, gen=torch.Generator().manual_seed(0),
                                       spend=spent.append, normaliser=4.0)
    gen = torch.Generator().manual_seed(0)
    assert torch.allclose(rel.mean, mom.sum / 4.0 + 0.3 * gaussian((100,), gen))
    assert spent[0].noise_multiplier == pytest.approx(0.3 * 4.0 / 10.0)
    empty = Moments(torch.zeros(100, dtype=torch.float64), torch.zeros(100, dtype=torch.float64),
                    0)
    rel0 = SensitivityAwareGaussian(0.3).release(empty, gen=torch.Generator().manual_seed(0),
                                                 spend=spent.append, normaliser=4.0)
    assert torch.isfinite(rel0.mean).all()  # an empty Poisson round still releases noise
    with pytest.raises(InvalidParameterError, match="fixed-size rounds"):
        UniformGaussian(0.3, beta=1.0).release(mom, gen=torch.Generator(), spend=spent.append,
                                               normaliser=4.0)


@pytest.mark.parametrize("fields,match", [
    ({"scheme": "ldp", "mechanism": "gaussian"}, "'mechanism'.*Laplace noise only"),
    ({"scheme": "pategail++", "mechanism": "gaussian", "pilot": "laplace"}, "'pilot'"),
    ({"mechanism": "gaussian", "sampling": "poisson", "beta": 0.5}, "no bounded sensitivity"),
    ({"mechanism": "laplace", "sampling": "poisson"}, "neither dp_accounting accountant"),
    ({"scheme": "ldp", "sampling": "poisson"}, "central schemes only"),
    ({"mechanism": "exponential"}, "'mechanism'"),
    ({"sampling": "bernoulli"}, "'sampling'"),
])
def test_config_refuses_unsupported_lever_combinations(fields, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**fields)

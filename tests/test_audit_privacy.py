"""The auditor (`models.audit`, run by bench/audit_privacy.py) checked on k-RR, whose exact
privacy loss is known.

A correct k-RR at eps has max_E ln(P1(E)/P2(E)) = eps exactly, so the audit must not reject it
(false-failure rate <= ALPHA per assertion, by the Clopper-Pearson guarantee), and a k-RR built
with 2 eps but claiming eps has loss 2 eps, which N = 40,000 draws per input must detect
(its bound is about 2 eps - 0.1; failure to reject would need a > 10-sigma deviation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from models import audit
from udfs.mechanisms import KRR

ALPHA = 1e-3
N = 40_000


def _krr_bound(eps_built: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    mech = KRR(4, eps_built)
    x1 = mech.perturb(np.zeros(N, np.int64), rng=rng)
    x2 = mech.perturb(np.ones(N, np.int64), rng=rng)
    return audit.audit_codes([(x1, x2)], 4, alpha=ALPHA).value


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_correct_krr_passes_the_audit(eps):
    bound = _krr_bound(eps, seed=1)
    assert bound <= eps, f"false rejection (rate <= {ALPHA}): bound {bound:.3f} > eps {eps}"
    assert bound > eps - 0.3, f"audit too weak on a tight mechanism: {bound:.3f}"


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_broken_krr_fails_the_audit(eps):
    bound = _krr_bound(2 * eps, seed=2)
    assert bound > eps, f"broken k-RR (2 eps) not detected: bound {bound:.3f} <= eps {eps}"


def test_cp_bounds_bracket_the_estimate():
    k, n = np.array([0, 5, 50, 100]), 100
    lo, hi = audit.cp_lower(k, n, 0.025), audit.cp_upper(k, n, 0.025)
    assert lo[0] == 0 and hi[-1] == 1
    assert np.all(lo <= k / n) and np.all(k / n <= hi)
    # one-sided 97.5% CP lower bound for 50/100 (reference value from the beta quantile)
    assert math.isclose(float(lo[2]), 0.3983, abs_tol=1e-3)


def test_selection_split_holds_out_the_bounding_half():
    """Events selected on pure noise (identical inputs) give a bound <= 0: the held-out half
    sees no real difference, so the maximum over many candidate events does not inflate it."""
    rng = np.random.default_rng(3)
    x1, x2 = rng.integers(0, 64, N), rng.integers(0, 64, N)
    assert audit.audit_codes([(x1, x2)], 64, alpha=0.05).value <= 0.0


def test_vectorised_pategail_pp_sampler_matches_release():
    audit.check_pgpp_equivalence()


@pytest.mark.parametrize("scheme", ["pategail", "pategail++"])
def test_correct_gaussian_release_passes_the_audit(scheme):
    """(eps, delta) claim of the Gaussian reward release: bound <= eps with probability
    >= 1 - ALPHA (Clopper-Pearson with delta subtracted)."""
    row = audit.gaussian_row(1.0, scheme)
    bound = row.run(N, np.random.default_rng(4), ALPHA).value
    assert bound <= row.eps, f"false rejection (rate <= {ALPHA}): {bound:.3f} > {row.eps:.3f}"
    assert bound > 0.2, f"audit too weak on the Gaussian release: {bound:.3f}"


def test_gaussian_release_with_sd_from_the_wrong_sensitivity_fails_the_audit():
    """Noise 4x too small (sd from Delta_f instead of sqrt(B) Delta_f, B = 16): the true
    multiplier is a quarter of the claimed one, epsilon about 5 instead of 1; at 20,000
    bounding draws the tail event's bound is about 2 (a pass would need a > 8-sigma miss)."""
    row = audit.gaussian_row(1.0, "pategail", broken=True)
    bound = row.run(N, np.random.default_rng(5), ALPHA).value
    assert bound > row.eps, f"broken Gaussian not detected: {bound:.3f} <= {row.eps:.3f}"


@pytest.mark.parametrize("family", ["NGram", "TraCS-D", "TraCS-C"])
def test_peer_rows_pass_and_their_broken_variants_fail(family):
    """The auditor's rows of the peers (udfs/mechanisms): the correct mechanism's bound stays
    below its claim (false-failure rate <= ALPHA), the deliberately over-spending variant's
    exceeds it at N = 100,000 draws per input (its true loss is 2-6x the claim)."""
    for broken in (False, True):
        row = audit.traj_row(family, 1.0, broken=broken)
        bound = row.run(100_000, np.random.default_rng(4), ALPHA).value
        if broken:
            assert bound > 1.0, f"broken {family} not detected: bound {bound:.3f}"
        else:
            assert bound <= 1.0, f"false rejection of {family}: bound {bound:.3f}"

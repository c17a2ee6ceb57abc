"""Exponential mechanism (EM) over a subset of the location set, utility -haversine distance."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from udfs.budget import check_epsilon
from udfs.errors import InvalidParameterError, InvalidTrajectoryError
from udfs.sampling import em_sample
from udfs.space import LocationSpace


@dataclass(frozen=True, eq=False)
class ExponentialMechanism:
    """EM: Pr[r | p] ∝ exp(eps * (-D[p, r]) / (2 Delta_u)) for r in `domain` (default: all of P).

    Guarantee: eps-LDP for any two true points p, p' in P: the utility -D[., r] changes by at most
        Delta_u = diameter of P (a valid bound on any sub-domain too), so each output's
        probability changes by at most e^(eps/2) through the weight and e^(eps/2) through the
        normaliser.
    Budget: the whole `epsilon` on one point.
    Citations: McSherry and Talwar 2007; used per point by Yu et al. 2017 and the TP/ATP paper.
    Runtime: O(1) expected per draw when the EM mass is spread out (uniform proposal +
        acceptance), O(|domain|) in the worst case (explicit inverse CDF); vectorised.
    Utility: output within distance O(Delta_u * ln|domain| / eps) of p with high probability.
    """

    space: LocationSpace
    eps: float
    domain: np.ndarray | None = None

    def __post_init__(self):
        object.__setattr__(self, "eps", check_epsilon(self.eps, "EM epsilon"))
        if self.domain is not None:
            dom = np.unique(np.asarray(self.domain, dtype=np.int64))
            if dom.size == 0:
                raise InvalidParameterError("EM domain is empty; pass at least one location id")
            if dom.min() < 0 or dom.max() >= self.space.n:
                raise InvalidTrajectoryError(
                    f"EM domain has ids outside [0, {self.space.n}); use ids of the space")
            object.__setattr__(self, "domain", dom)

    @property
    def scale(self) -> float:
        """Log-weight coefficient c = eps / (2 Delta_u) actually used by the sampler."""
        delta = self.space.diameter
        return self.eps / (2.0 * delta) if delta > 0 else 0.0

    @property
    def epsilon(self) -> float:
        """2 * c * Delta_u: the standard EM bound for the coefficient actually used."""
        return 2.0 * self.scale * self.space.diameter if self.space.diameter > 0 else 0.0

    def _dom(self) -> np.ndarray:
        return np.arange(self.space.n) if self.domain is None else self.domain

    def log_probabilities(self, p: int) -> np.ndarray:
        """Exact log Pr[r | p] for r in the domain (order of ``domain`` / all ids)."""
        logw = -self.scale * self.space.dist[int(p), self._dom()].astype(np.float64)
        m = logw.max()
        return logw - (m + np.log(np.exp(logw - m).sum()))

    def probabilities(self, p: int) -> np.ndarray:
        return np.exp(self.log_probabilities(p))

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        """Vectorised: one draw per element of x (location ids); returns location ids."""
        x = np.asarray(x, dtype=np.int64)
        if self.domain is None:
            return em_sample(self.space, x.ravel(), self.scale, rng).reshape(x.shape)
        # arbitrary domain: Gumbel-max over the (shared) domain list, exact and vectorised
        dom = self.domain
        logw = -self.scale * self.space.dist[x.ravel()[:, None], dom[None, :]].astype(np.float64)
        g = rng.gumbel(size=logw.shape)
        return dom[np.argmax(logw + g, axis=1)].reshape(x.shape)

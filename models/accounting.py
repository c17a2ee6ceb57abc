"""A small stateful privacy accountant over dp_accounting events (the ledger).

Every Laplace release is handed to `spend` as a dp_accounting event (LaplaceDpEvent,
SelfComposedDpEvent, ComposedDpEvent). Before committing, `spend` computes the epsilon the
ledger would reach and raises BudgetExceededError (requested vs remaining) if that passes the
target: budget is checked before it is spent, and a refused release draws no noise.

Ledger representation: a multiset of Laplace noise multipliers (noise scale / L1 sensitivity =
1/epsilon of that release). Multipliers are rounded DOWN to the grid 2^(k/grid) before they are
recorded, so every recorded epsilon is >= the true one (privacy arithmetic rounds toward the
larger epsilon; at grid = 64 the overstatement is < 1.1%). The grid keeps the number of distinct
events bounded, which keeps PLD / RDP composition cheap across rounds.

Reported epsilon at `delta` = min(basic composition, RDP or PLD), each a valid upper bound.
Basic composition is sum(1/m) over events (pure epsilon, rounded up by one ulp).
"""

from __future__ import annotations

import math
from collections import Counter

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from udfs.errors import BudgetExceededError, InvalidParameterError


def flatten(event: dp_accounting.DpEvent) -> list[tuple[float, int]]:
    """(noise multiplier, count) pairs of a Laplace event tree."""
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return [(float(event.noise_multiplier), 1)]
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return [(m, c * event.count) for m, c in flatten(event.event)]
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [x for e in event.events for x in flatten(e)]
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return []
    raise InvalidParameterError(f"only Laplace events are supported; got {type(event).__name__}")


class PrivacyAccountant:
    def __init__(self, delta: float = 1e-5, target_epsilon: float | None = None,
                 method: str = "rdp", grid: int = 64, pld_interval: float = 1e-2):
        if not 0 < delta < 1:
            raise InvalidParameterError(f"delta must lie in (0, 1); got {delta}")
        if method not in ("rdp", "pld"):
            raise InvalidParameterError(f"accountant method must be 'rdp' or 'pld'; got {method!r}")
        if target_epsilon is not None and target_epsilon <= 0:
            raise InvalidParameterError(f"target_epsilon must be > 0; got {target_epsilon}")
        self.delta, self.target, self.method = delta, target_epsilon, method
        self.grid, self.pld_interval = grid, pld_interval
        self.counts: Counter[int] = Counter()  # grid exponent k -> number of releases
        self.releases = 0

    # ---------------------------------------------------------------------------------------
    def _key(self, m: float) -> int:
        if not m > 0 or math.isinf(m):
            raise InvalidParameterError(f"noise multiplier must be finite and > 0; got {m}")
        k = math.floor(math.log2(m) * self.grid)
        while 2.0 ** (k / self.grid) > m:  # guard against log2 rounding up
            k -= 1
        return k

    def multiplier(self, k: int) -> float:
        return 2.0 ** (k / self.grid)

    def ledger(self, counts: Counter[int] | None = None) -> dp_accounting.DpEvent:
        counts = self.counts if counts is None else counts
        return dp_accounting.ComposedDpEvent([
            dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(self.multiplier(k)), c)
            for k, c in sorted(counts.items())])

    def basic_epsilon(self, counts: Counter[int] | None = None) -> float:
        counts = self.counts if counts is None else counts
        total = math.fsum(c / self.multiplier(k) for k, c in counts.items())
        return math.nextafter(total, math.inf) if total else 0.0

    def epsilon(self, counts: Counter[int] | None = None) -> float:
        """(epsilon, self.delta)-DP bound of the ledger (or of `counts`)."""
        counts = self.counts if counts is None else counts
        if not counts:
            return 0.0
        basic = self.basic_epsilon(counts)
        acc = (RdpAccountant() if self.method == "rdp"
               else PLDAccountant(value_discretization_interval=self.pld_interval))
        acc.compose(self.ledger(counts))
        return min(basic, float(acc.get_epsilon(self.delta)))

    def spend(self, event: dp_accounting.DpEvent) -> float:
        """Record `event` unless the target would be exceeded; returns the new epsilon."""
        new = self.counts.copy()
        n = 0
        for m, c in flatten(event):
            new[self._key(m)] += c
            n += c
        eps = self.epsilon(new)
        if self.target is not None and eps > self.target:
            raise BudgetExceededError(
                f"release of {n} Laplace event(s) would raise epsilon to {eps:.6g} at delta="
                f"{self.delta:g}, above the target {self.target:g} (spent {self.epsilon():.6g}, "
                f"remaining {self.target - self.epsilon():.6g}); raise target_epsilon or the noise")
        self.counts, self.releases = new, self.releases + n
        return eps

    def summary(self) -> dict:
        return {"epsilon": self.epsilon(), "delta": self.delta,
                "basic_epsilon": self.basic_epsilon(), "method": self.method,
                "releases": self.releases, "target_epsilon": self.target}

    def state_dict(self) -> dict:
        return {"delta": self.delta, "target": self.target, "method": self.method,
                "grid": self.grid, "pld_interval": self.pld_interval,
                "counts": dict(self.counts), "releases": self.releases}

    @classmethod
    def from_state_dict(cls, sd: dict) -> PrivacyAccountant:
        acc = cls(sd["delta"], sd["target"], sd["method"], sd["grid"], sd["pld_interval"])
        acc.counts = Counter({int(k): int(v) for k, v in sd["counts"].items()})
        acc.releases = int(sd["releases"])
        return acc

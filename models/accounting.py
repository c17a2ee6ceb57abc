"""A small stateful privacy accountant over dp_accounting events (the ledger).

Every release is handed to `spend` as a dp_accounting event: LaplaceDpEvent, GaussianDpEvent,
PoissonSampledDpEvent (Poisson user sampling, see below) and their SelfComposedDpEvent /
ComposedDpEvent trees. Before committing, `spend` computes the epsilon the ledger would reach
and raises BudgetExceededError (requested vs remaining) if that passes the target: budget is
checked before it is spent, and a refused release draws no noise.

Ledger representation: a multiset of entries (kind, q, k): a Laplace or Gaussian noise
multiplier (noise scale / sensitivity: L1 for Laplace, where it is 1/epsilon of that release;
L2 for Gaussian, the standard deviation over the L2 sensitivity), rounded DOWN to the grid
2^(k/grid), and the Poisson sampling rate q of the round it was released in (1.0: not sampled).
Epsilon grows as a multiplier shrinks, for both kinds, so every recorded release is at least as
costly as the true one (privacy arithmetic rounds toward the larger epsilon; at grid = 64 the
multiplier is understated by < 1.1%). q is kept exact. The grid keeps the number of distinct
events bounded, which keeps PLD / RDP composition cheap across rounds.

Poisson-sampled rounds (`PoissonSampledDpEvent(q, inner)`): the inner event must be one Gaussian
mechanism (a tree of Gaussian events is merged first into the one Gaussian with multiplier
(sum m_i^-2)^-1/2: the composition of Gaussian mechanisms with multipliers m_i is exactly that
Gaussian, which is what dp_accounting's RDP accountant does too) or one Laplace event (PLD only:
dp_accounting's RDP accountant amplifies Gaussians only). Anything else, for example a batch of
composed Laplace releases, has no amplification bound here and is refused
(InvalidParameterError): amplifying each Laplace of a jointly sampled batch separately would
understate the cost. The amplification theorems, and dp_accounting, use add/remove-one
neighbouring (models/PROOF.md section 8).

Reported epsilon at `delta` = min(basic composition, RDP or PLD), each a valid upper bound.
Basic composition is pure epsilon: sum(1/m) over unsampled Laplace events, plus
ln(1 + q (e^(1/m) - 1)) per Poisson-sampled one (amplification of pure DP by Poisson sampling,
add/remove), rounded up; it is infinite (undefined) once the ledger holds a Gaussian event, so
then the RDP (or PLD) epsilon is the one reported.
"""

from __future__ import annotations

import math
from collections import Counter

import dp_accounting
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant

from udfs.errors import BudgetExceededError, InvalidParameterError

LAPLACE, GAUSSIAN = "laplace", "gaussian"
Entry = tuple[str, float, int]  # (kind, Poisson rate q (1.0 = not sampled), grid exponent k)


def gaussian_multiplier(event: dp_accounting.DpEvent) -> float | None:
    """The one Gaussian multiplier a tree of Gaussian events composes to, None if the tree holds
    anything else (NoOp events cost nothing and are skipped)."""
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return float(event.noise_multiplier)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        m = gaussian_multiplier(event.event)
        return None if m is None else m / math.sqrt(event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        inv = 0.0
        for e in event.events:
            if isinstance(e, dp_accounting.NoOpDpEvent):
                continue
            m = gaussian_multiplier(e)
            if m is None:
                return None
            inv += m ** -2
        return inv ** -0.5 if inv > 0 else None
    return None


def flatten(event: dp_accounting.DpEvent, q: float = 1.0) -> list[tuple[str, float, float, int]]:
    """(kind, q, noise multiplier, count) of an event tree (see the module docstring)."""
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return [(LAPLACE, q, float(event.noise_multiplier), 1)]
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return [(GAUSSIAN, q, float(event.noise_multiplier), 1)]
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return [(k, s, m, c * event.count) for k, s, m, c in flatten(event.event, q)]
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [x for e in event.events for x in flatten(e, q)]
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return []
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        p = float(event.sampling_probability)
        if q != 1.0:
            raise InvalidParameterError("nested Poisson sampling is not supported")
        if not 0 <= p <= 1:
            raise InvalidParameterError(f"Poisson sampling rate must lie in [0, 1]; got {p}")
        if p == 0:
            return []
        inner = event.event
        if isinstance(inner, dp_accounting.LaplaceDpEvent):
            return [(LAPLACE, p, float(inner.noise_multiplier), 1)]
        m = gaussian_multiplier(inner)
        if m is None:
            raise InvalidParameterError(
                f"PoissonSampledDpEvent of {type(inner).__name__}: only one Gaussian mechanism "
                "(or a tree of Gaussian events, merged exactly) or one Laplace event can be "
                "amplified; a batch of composed Laplace releases cannot (use Gaussian releases)")
        return [(GAUSSIAN, p, m, 1)]
    raise InvalidParameterError(
        f"only Laplace, Gaussian and Poisson-sampled events are supported; got "
        f"{type(event).__name__}")


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
        self.entries: Counter[Entry] = Counter()  # (kind, q, k) -> number of releases
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

    def ledger(self, entries: Counter[Entry] | None = None) -> dp_accounting.DpEvent:
        entries = self.entries if entries is None else entries
        events = []
        for (kind, q, k), c in sorted(entries.items()):
            m = self.multiplier(k)
            e = (dp_accounting.LaplaceDpEvent(m) if kind == LAPLACE
                 else dp_accounting.GaussianDpEvent(m))
            if q < 1:
                e = dp_accounting.PoissonSampledDpEvent(q, e)
            events.append(dp_accounting.SelfComposedDpEvent(e, c))
        return dp_accounting.ComposedDpEvent(events)

    def basic_epsilon(self, entries: Counter[Entry] | None = None) -> float:
        """Pure epsilon by basic composition; inf once a Gaussian event is recorded."""
        entries = self.entries if entries is None else entries
        if any(kind == GAUSSIAN for kind, _, _ in entries):
            return math.inf
        plain = [c / self.multiplier(k) for (_, q, k), c in entries.items() if q == 1]
        # amplified pure epsilon, each term rounded up past its few ulps of log1p/expm1 error
        sampled = [c * math.log1p(q * math.expm1(1 / self.multiplier(k))) * (1 + 1e-14)
                   for (_, q, k), c in entries.items() if q < 1]
        total = math.fsum(plain + sampled)
        return math.nextafter(total, math.inf) if total else 0.0

    def epsilon(self, entries: Counter[Entry] | None = None) -> float:
        """(epsilon, self.delta)-DP bound of the ledger (or of `entries`)."""
        entries = self.entries if entries is None else entries
        if not entries:
            return 0.0
        if self.method == "rdp" and any(k == LAPLACE and q < 1 for k, q, _ in entries):
            raise InvalidParameterError(
                "Poisson-sampled Laplace events need accountant 'pld' (dp_accounting's RDP "
                "accountant amplifies Gaussian events only)")
        basic = self.basic_epsilon(entries)
        acc = (RdpAccountant() if self.method == "rdp"
               else PLDAccountant(value_discretization_interval=self.pld_interval))
        acc.compose(self.ledger(entries))
        return min(basic, float(acc.get_epsilon(self.delta)))

    def spend(self, event: dp_accounting.DpEvent) -> float:
        """Record `event` unless the target would be exceeded; returns the new epsilon."""
        new = self.entries.copy()
        n = 0
        for kind, q, m, c in flatten(event):
            new[(kind, q, self._key(m))] += c
            n += c
        eps = self.epsilon(new)
        if self.target is not None and eps > self.target:
            raise BudgetExceededError(
                f"release of {n} event(s) would raise epsilon to {eps:.6g} at delta="
                f"{self.delta:g}, above the target {self.target:g} (spent {self.epsilon():.6g}, "
                f"remaining {self.target - self.epsilon():.6g}); raise target_epsilon or the noise")
        self.entries, self.releases = new, self.releases + n
        return eps

    def summary(self) -> dict:
        basic = self.basic_epsilon()
        return {"epsilon": self.epsilon(), "delta": self.delta,
                "basic_epsilon": None if math.isinf(basic) else basic, "method": self.method,
                "releases": self.releases, "target_epsilon": self.target}

    def state_dict(self) -> dict:
        """JSON-friendly state. `counts` holds the unsampled Laplace entries as before Gaussian
        and sampled events existed (so old checkpoints load); `events` the others as
        [kind, q, k, count] rows."""
        counts = {k: c for (kind, q, k), c in self.entries.items() if kind == LAPLACE and q == 1}
        events = [[kind, q, k, c] for (kind, q, k), c in sorted(self.entries.items())
                  if not (kind == LAPLACE and q == 1)]
        return {"delta": self.delta, "target": self.target, "method": self.method,
                "grid": self.grid, "pld_interval": self.pld_interval,
                "counts": counts, "events": events, "releases": self.releases}

    @classmethod
    def from_state_dict(cls, sd: dict) -> PrivacyAccountant:
        acc = cls(sd["delta"], sd["target"], sd["method"], sd["grid"], sd["pld_interval"])
        acc.entries = Counter({(LAPLACE, 1.0, int(k)): int(v) for k, v in sd["counts"].items()})
        for kind, q, k, c in sd.get("events", []):  # absent in pre-Gaussian checkpoints
            if kind not in (LAPLACE, GAUSSIAN):
                raise InvalidParameterError(f"accountant state: unknown event kind {kind!r}")
            acc.entries[(str(kind), float(q), int(k))] += int(c)
        acc.releases = int(sd["releases"])
        return acc

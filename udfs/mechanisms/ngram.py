"""NGram: overlapping n-grams of the trajectory, each by the exponential mechanism over plausible
n-grams, then one trajectory rebuilt from them (Cunningham et al., PVLDB 2021, on a plain P)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from udfs.budget import BudgetRecord, RecordedMechanism, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.sampling import em_sample
from udfs.space import LocationSpace

REACH_SHARE = 0.25  # default public reach bound: a quarter of P's diameter (measured, README)
_CHUNK = 1 << 22  # elements of one (rows, |P|) float64 block (32 MB)
_UNDERFLOW = -700.0  # exp() of a shifted log-weight below this could flush to 0


@dataclass(frozen=True, eq=False)
class NGram(RecordedMechanism):
    """Perturb the L - n + 1 overlapping n-grams of a length-L trajectory, rebuild L points.

    Each n-gram x = (x_1..x_m) (m = min(n, L); one gram of length L when L < n) is released by
    the exponential mechanism over the plausible m-grams of P,
        Pr[y | x] ∝ exp(-c * sum_j D[x_j, y_j]) * prod_j 1[D[y_j, y_j+1] <= reach_km],
    c = eps_gram / (2 m Delta_u). Then the output trajectory is the sequence over candidate
    points (each position's observed values and the P point nearest their spherical mean) that
    minimises sum_i sum_obs D[y_i, obs]^2 + sum_i max(0, D[y_i, y_i+1] - reach_km)^2 (Viterbi).

    Guarantee: user-level eps-LDP for one trajectory of public length L: each gram's utility
        -sum_j D[x_j, y_j] changes by at most m Delta_u between any two inputs (the plausible set
        is public and the same for every input, whether or not the true gram is plausible), so
        each release is eps_gram-LDP; the G = max(1, L - n + 1) releases compose to
        G eps_gram <= eps; the reconstruction reads only the released grams (post-processing).
        PROOF.md section 10.
    Budget: eps / G per gram (`budget.split`, exact sum <= eps).
    Citations: Cunningham, Cormode, Ferhatosmanoglu, Srivastava, "Real-World Trajectory Sharing
        with Local Differential Privacy", PVLDB 14(11) 2021 (n-grams, reachability, EM, optimal
        reconstruction; here without their POI category/time hierarchy); McSherry-Talwar 2007.
    Runtime: without `reach_km`, each gram is m independent EM draws (the weight factorises):
        O(1) expected per point. With it, exact chain sampling: m - 1 (rows x |P|) @ (|P| x |P|)
        message products and m Gumbel-max draws over P per gram, O(m |P|^2) per gram.
    Utility: each interior point is seen by n grams at budget about eps / (n L) each and sensitivity
        n Delta_u; the reconstruction's mean of the n views and a public reach bound are what can
        beat EXP (measured in bench/reproduce_ldp.py).
    """

    space: LocationSpace
    epsilon_total: float
    n: int = 2
    reach_km: float | None = None
    name = "ngram"

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))
        if isinstance(self.n, bool) or not isinstance(self.n, int | np.integer) or not (
                1 <= self.n <= 8):
            raise InvalidParameterError(f"ngram n={self.n!r} must be an int in 1..8 (2 = bigrams)")
        if self.reach_km is not None:
            r = float(self.reach_km)
            if not (math.isfinite(r) and r >= 0):
                raise InvalidParameterError(
                    f"ngram reach_km={self.reach_km!r} must be finite and >= 0 km (None: no bound)")
            object.__setattr__(self, "reach_km", r)

    # ------------------------------------------------------------------ budget
    def grams(self, length: int) -> tuple[int, int]:
        """(number of grams G, gram length m) for a trajectory of `length` points."""
        m = min(self.n, length)
        return length - m + 1, m

    def record(self, length: int) -> BudgetRecord:
        g, _ = self.grams(length)
        (e,) = split(self.epsilon_total, [(g, 1.0)])
        return BudgetRecord(self.name, length, tuple(Step("-", "ngram", k, e) for k in range(g)))

    def scale(self, length: int) -> float:
        """Log-weight coefficient c of each gram's EM for a trajectory of `length` points."""
        g, m = self.grams(length)
        (e,) = split(self.epsilon_total, [(g, 1.0)])
        delta = self.space.diameter
        return e / (2.0 * m * delta) if delta > 0 else 0.0

    def gram_epsilon(self, length: int) -> float:
        """2 c m Delta_u: the EM bound of one gram for the coefficient the sampler uses."""
        _, m = self.grams(length)
        return 2.0 * self.scale(length) * m * self.space.diameter

    # ------------------------------------------------------------------ plausible grams
    def reachable(self) -> np.ndarray | None:
        """(|P|, |P|) float64 0/1 matrix D <= reach_km (None: every pair is plausible)."""
        if self.reach_km is None or self.reach_km >= self.space.diameter:
            return None
        d, r = self.space.dist, self.reach_km  # symmetric by construction (a @ b uses a.T)
        return self.space.cached(("ngram_reach", r),
                                 lambda: ((d <= r) & (d.T <= r)).astype(np.float64))

    def gram_log_probabilities(self, x, length: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact law of one gram's release by enumeration (tiny P only): (outputs (K, m), log p)."""
        x = np.asarray(x, dtype=np.int64)
        _, m = self.grams(length)
        if x.shape != (m,):
            raise InvalidParameterError(f"a gram of a length-{length} trajectory has {m} points")
        ys = np.stack(np.unravel_index(np.arange(self.space.n ** m), (self.space.n,) * m), 1)
        d = self.space.dist.astype(np.float64)
        logw = -self.scale(length) * d[x[None, :], ys].sum(1)
        a = self.reachable()
        if a is not None:
            ok = np.all(a[ys[:, :-1], ys[:, 1:]] > 0, axis=1)
            ys, logw = ys[ok], logw[ok]
        return ys, logw - logsumexp(logw)

    def perturb_grams(self, grams: np.ndarray, c: float, rng: np.random.Generator) -> np.ndarray:
        """(B, m) true grams -> (B, m) released grams, each exactly by the gram EM at scale c."""
        grams = np.asarray(grams, dtype=np.int64)
        a = self.reachable()
        if a is None:  # the weight factorises: m independent EM draws over P
            return em_sample(self.space, grams.ravel(), c, rng).reshape(grams.shape)
        b, m = grams.shape
        out = np.empty_like(grams)
        step = max(1, _CHUNK // self.space.n)
        for s in range(0, b, step):
            out[s:s + step] = self._chain_sample(grams[s:s + step], c, a, rng)
        return out

    def _chain_sample(self, x, c, a, rng):
        d = self.space.dist
        m = x.shape[1]
        loge = [-c * d[x[:, j]].astype(np.float64) for j in range(m)]
        logb = [None] * m  # backward messages: log sum over plausible continuations
        logb[m - 1] = np.zeros_like(loge[0])
        for j in range(m - 2, -1, -1):
            w = loge[j + 1] + logb[j + 1]
            mx = w.max(axis=1, keepdims=True)
            with np.errstate(divide="ignore"):
                lb = np.log((np.exp(w - mx)) @ a) + mx  # a is symmetric
            deep = np.flatnonzero((w.min(axis=1) - mx[:, 0]) < _UNDERFLOW)
            for r in deep:  # exact log-sum where a shifted weight could underflow
                lb[r] = logsumexp(np.where(a > 0, w[r][None, :], -np.inf), axis=1)
            logb[j] = lb
        y = np.empty(x.shape, dtype=np.int64)
        y[:, 0] = np.argmax(loge[0] + logb[0] + rng.gumbel(size=loge[0].shape), axis=1)
        for j in range(1, m):
            lw = np.where(a[y[:, j - 1]] > 0, loge[j] + logb[j], -np.inf)
            y[:, j] = np.argmax(lw + rng.gumbel(size=lw.shape), axis=1)
        return y

    # ------------------------------------------------------------------ reconstruction
    def reconstruct(self, z: np.ndarray, length: int) -> np.ndarray:
        """(N, G, m) released grams of length-`length` trajectories -> (N, length) outputs.

        A deterministic function of the released grams and public P (post-processing)."""
        z = np.asarray(z, dtype=np.int64)
        big_n, g, m = z.shape
        d = self.space.dist
        k = m + 1
        obs = np.full((big_n, length, m), -1, np.int64)  # -1 = no observation in that slot
        for gi in range(g):
            for j in range(m):
                obs[:, gi + j, j] = z[:, gi, j]
        has = obs >= 0
        cand = np.where(has, obs, np.take_along_axis(obs, np.argmax(has, 2)[..., None], 2))
        cand = np.concatenate([cand, self._snapped_mean(obs, has)[..., None]], axis=2)
        safe = np.where(has, obs, 0)
        dd = d[cand[..., :, None], safe[..., None, :]].astype(np.float64) ** 2  # (N, L, K, m)
        node = np.where(has[..., None, :], dd, 0.0).sum(-1)  # (N, L, K)
        cost = node[:, 0]
        back = np.zeros((big_n, length, k), np.int64)
        for i in range(1, length):
            edge = self._edge(cand[:, i - 1], cand[:, i])  # (N, K, K)
            tot = cost[:, :, None] + edge
            back[:, i] = np.argmin(tot, axis=1)
            cost = np.take_along_axis(tot, back[:, i][:, None, :], 1)[:, 0] + node[:, i]
        pick = np.empty((big_n, length), np.int64)
        pick[:, -1] = np.argmin(cost, axis=1)
        for i in range(length - 1, 0, -1):
            pick[:, i - 1] = back[np.arange(big_n), i, pick[:, i]]
        return np.take_along_axis(cand, pick[..., None], 2)[..., 0]

    def _edge(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.reach_km is None:
            return np.zeros(a.shape + (b.shape[-1],))
        over = self.space.dist[a[:, :, None], b[:, None, :]].astype(np.float64) - self.reach_km
        return np.maximum(over, 0.0) ** 2

    def _snapped_mean(self, obs: np.ndarray, has: np.ndarray) -> np.ndarray:
        """P point nearest the spherical mean of each position's observations."""
        lat, lon = np.radians(self.space.coords[np.where(has, obs, 0)].transpose(3, 0, 1, 2))
        v = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], -1)
        v = (v * has[..., None]).sum(2)
        norm = np.linalg.norm(v, axis=-1)
        ok = norm > 1e-12  # antipodal views: keep the first observation
        la = np.degrees(np.arcsin(np.clip(v[..., 2] / np.where(ok, norm, 1), -1, 1)))
        lo = np.degrees(np.arctan2(v[..., 1], v[..., 0]))
        first = np.take_along_axis(obs, np.argmax(has, 2)[..., None], 2)[..., 0]
        near = self.space.nearest(la.ravel(), lo.ravel()).reshape(la.shape)
        return np.where(ok, near, first)

    # ------------------------------------------------------------------ perturbation
    def perturb_lengths(self, traj: np.ndarray, length: int, rng: np.random.Generator):
        """(N, length) trajectories of one length -> (released grams (N, G, m), outputs)."""
        g, m = self.grams(length)
        grams = np.stack([traj[:, i:i + m] for i in range(g)], axis=1)  # (N, G, m)
        z = self.perturb_grams(grams.reshape(-1, m), self.scale(length), rng)
        z = z.reshape(grams.shape)
        flat = z.reshape(z.shape[0], -1)
        if z.shape[0] > 4096 and flat.shape[1] * math.log2(max(self.space.n, 2)) < 62:
            # small P: rebuild each distinct set of released grams once (same function)
            code = flat @ (self.space.n ** np.arange(flat.shape[1], dtype=np.int64))
            _, first, inv = np.unique(code, return_index=True, return_inverse=True)
            if first.size * 2 < z.shape[0]:
                return z, self.reconstruct(z[first], length)[inv.ravel()]
        return z, self.reconstruct(z, length)

    def perturb_batch(self, traj: np.ndarray, lens, *, rng: np.random.Generator) -> np.ndarray:
        """(N, L) padded trajectories with lengths ``lens`` -> (N, L) outputs (padding kept)."""
        lens = np.asarray(lens, dtype=np.int64)
        out = np.array(traj, dtype=np.int64, copy=True)
        for length in np.unique(lens).tolist():
            rows = np.flatnonzero(lens == length)
            out[rows, :length] = self.perturb_lengths(out[rows, :length], length, rng)[1]
        return out

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        """One trajectory (1-D location ids) -> its perturbed trajectory."""
        x = np.asarray(x, dtype=np.int64)
        return self.perturb_lengths(x[None, :], x.size, rng)[1][0]

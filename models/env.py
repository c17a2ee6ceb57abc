"""Vectorised mobility environment: many 48-slot user-days stepped at once as tensors.

State of an episode after slot t: current location, slot t, number of distinct locations so far,
current stay length (slots at the current location, >= 1), home, plus the location history
(E, 48) from which visit counts are derived. Home is the day's slot-0 location (for real days and
for generated days alike: a generated day starts at home, drawn from the DP start histogram).

Actions (one per transition t -> t+1, 47 per day):
- STAY: remain at the current location.
- EXPLORE: move to a location never visited today. Generated: the k-th nearest of the K nearest
  locations of the current one, P(k) proportional to k^-alpha over the unvisited candidates.
- HOME: move to home (valid only when away from home).
- RETURN: move to a location visited earlier today that is neither home nor the current one,
  with probability proportional to its visit count (slots spent there so far).

Every action carries an explicit target location (`step(actions, targets)`), so replaying a real
day's labelled actions with its recorded targets reproduces it exactly, including an explore
jump to a location outside the K nearest (which the generator itself cannot produce; see
`MobilityEnv.outside_k_fraction`). The labelling rule is a function of the same state the
generator sees, so expert and generated pairs share one definition of each action.
Runtime: O(E * (K + 48)) per step.

Destination context (`destination_context`, used when the policy chooses destinations,
`train.destination: learned`): for each episode the explore candidates (the K nearest of the
current location, their public log-weights log k^-alpha, -1e9 where already visited unless all
are) and the return candidates (the 48 history slots, log-weight 0 at a valid return slot, -1e9
elsewhere), each with two public distance-band indices (equirectangular km from the current
location and from home, bucketed at BAND_EDGES_KM) and, for returns, the log visit count of the
slot's location. All of it is a function of the public map and the episode's own generated
history, so a policy reading it reads nothing private.

Device: the map tables (coords, coords_norm, nearest, rank_weights) are built on the CPU and then
moved to `device`; states live there too. Random draws (`sample_targets`) are made on the CPU
from the caller's CPU torch.Generator and moved to the device, so they do not depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from udfs.errors import InvalidParameterError, InvalidTrajectoryError
from udfs.geo import KM_PER_DEGREE

SLOTS = 48
STAY, EXPLORE, HOME, RETURN = 0, 1, 2, 3
N_ACTIONS = 4
# distance bands (km) of the destination features: public constants, log-spaced
BAND_EDGES_KM = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
N_BANDS = len(BAND_EDGES_KM) + 1
NEG_LOGIT = -1e9


@dataclass
class EnvState:
    """Batch of episode states; every field has leading dimension E (episodes)."""

    loc: torch.Tensor  # (E,) long
    home: torch.Tensor  # (E,) long
    slot: torch.Tensor  # (E,) long, current slot t
    n_distinct: torch.Tensor  # (E,) long
    stay_len: torch.Tensor  # (E,) long
    history: torch.Tensor  # (E, 48) long, -1 after slot t

    def rows(self, idx: torch.Tensor) -> EnvState:
        return EnvState(self.loc[idx], self.home[idx], self.slot[idx], self.n_distinct[idx],
                        self.stay_len[idx], self.history[idx])


@dataclass
class DestContext:
    """Candidate destinations of E states (see the module doc), all from public inputs."""

    exp_cand: torch.Tensor  # (E, K) long: the K nearest of the current location
    exp_base: torch.Tensor  # (E, K) float: public log-weight, NEG_LOGIT where excluded
    exp_band: torch.Tensor  # (E, K, 2) long: band from the current location, band from home
    ret_cand: torch.Tensor  # (E, 48) long: history slots (-1 after slot t)
    ret_base: torch.Tensor  # (E, 48) float: 0 at a valid return slot, NEG_LOGIT elsewhere
    ret_band: torch.Tensor  # (E, 48, 2) long
    ret_logcount: torch.Tensor  # (E, 48) float: log slots spent at the slot's location so far

    def rows(self, idx: torch.Tensor) -> DestContext:
        return DestContext(self.exp_cand[idx], self.exp_base[idx], self.exp_band[idx],
                           self.ret_cand[idx], self.ret_base[idx], self.ret_band[idx],
                           self.ret_logcount[idx])


@dataclass(frozen=True)
class DestPrior:
    """A released move-destination distribution (the DP Markov release's tables, private
    pre-training): P(x | move from l) = cell_trans[cell_of[l], cell_of[x]] * within[x].
    `weight` in [0, 1]: how far it tilts the public explore weights (0: not at all)."""

    cell_of: np.ndarray  # (L,) public coarse cell of each location
    cell_trans: np.ndarray  # (G, G) P(destination cell | current cell)
    within: np.ndarray  # (L,) P(location | its cell)
    weight: float

    def to_dict(self) -> dict[str, np.ndarray]:
        return {"cell_of": self.cell_of, "cell_trans": self.cell_trans, "within": self.within,
                "weight": np.float64(self.weight)}

    @classmethod
    def of(cls, d: dict | None) -> DestPrior | None:
        """From `to_dict`'s form (a checkpoint, policy.pt); None stays None."""
        return None if d is None else cls(np.asarray(d["cell_of"]), np.asarray(d["cell_trans"]),
                                          np.asarray(d["within"]), float(d["weight"]))

    def tilt(self, nearest: np.ndarray) -> np.ndarray:
        """(L, K) factor of each explore candidate: K times (weight times the candidate's share
        of the released distribution among the K candidates, plus (1 - weight) / K): mean 1
        over a row, all 1 at weight 0 or where the release put no mass on the row. A weight
        below 1 keeps every candidate reachable where the noisy release left it at zero."""
        q = self.cell_trans[self.cell_of[:, None], self.cell_of[nearest]] * self.within[nearest]
        tot = q.sum(1, keepdims=True)
        share = np.where(tot > 0, q / np.where(tot > 0, tot, 1.0), 1.0 / q.shape[1])
        return q.shape[1] * (self.weight * share + (1 - self.weight) / q.shape[1])


class MobilityEnv:
    """The public map: coordinates of every location and the K-nearest table; with a
    `dest_prior` (a DP release, private pre-training) the explore weights k^-alpha are tilted
    by it (`DestPrior.tilt`): still public to the policy, a post-processing of that release."""

    def __init__(self, coords: np.ndarray, k_nearest: int = 200, explore_exponent: float = 0.6,
                 device: torch.device | str | None = None, dest_prior: DestPrior | None = None):
        coords = np.asarray(coords, dtype=np.float64)
        if coords.ndim != 2 or coords.shape[1] != 2 or len(coords) < 2:
            raise InvalidParameterError(f"coords must be (L>=2, 2); got shape {coords.shape}")
        if not 1 <= k_nearest:
            raise InvalidParameterError(f"k_nearest must be >= 1; got {k_nearest}")
        self.n_locations = len(coords)
        self.k = min(k_nearest, self.n_locations - 1)
        self.explore_exponent = float(explore_exponent)
        c = torch.as_tensor(coords, dtype=torch.float64)
        self.coords = c.float()
        mean, std = c.mean(0), c.std(0).clamp_min(1e-9)
        self.coords_norm = ((c - mean) / std).float()  # public standardisation of the map
        # K nearest by squared degree distance, excluding the location itself; chunked.
        nn_rows = []
        for start in range(0, self.n_locations, 1024):
            d = torch.cdist(c[start:start + 1024], c) ** 2
            d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
            nn_rows.append(torch.topk(d, self.k, largest=False, sorted=True).indices)
        self.nearest = torch.cat(nn_rows)  # (L, K) long, column k-1 = k-th nearest
        ranks = torch.arange(1, self.k + 1, dtype=torch.float64)
        self.rank_weights = (ranks ** -self.explore_exponent).float()  # (K,)
        self.dest_prior = dest_prior
        # (L, K) explore weight of each location's candidates (the public prior, tilted)
        self.explore_w = self.rank_weights.expand(self.n_locations, -1)
        if dest_prior is not None:
            tilt = torch.as_tensor(dest_prior.tilt(self.nearest.numpy()), dtype=torch.float64)
            self.explore_w = (self.rank_weights.double() * tilt).float()
        # equirectangular km per degree of latitude / longitude at the map's mean latitude
        lat0 = float(c[:, 0].mean()) * 3.141592653589793 / 180
        self.km_scale = torch.tensor([KM_PER_DEGREE, KM_PER_DEGREE * float(np.cos(lat0))])
        self.band_edges = torch.tensor(BAND_EDGES_KM)
        self.nearest_band = self.distance_band(torch.arange(self.n_locations)[:, None],
                                               self.nearest)  # (L, K): band of each neighbour
        self.device = torch.device("cpu" if device is None else device)
        for name in ("coords", "coords_norm", "nearest", "rank_weights", "explore_w",
                     "km_scale", "band_edges", "nearest_band"):
            setattr(self, name, getattr(self, name).to(self.device))

    # ----------------------------------------------------------------------------------------
    def reset(self, start_locs: torch.Tensor) -> EnvState:
        dev = self.device
        start = torch.as_tensor(start_locs, dtype=torch.long).to(dev)
        e = start.shape[0]
        hist = torch.full((e, SLOTS), -1, dtype=torch.long, device=dev)
        hist[:, 0] = start
        one = torch.ones(e, dtype=torch.long, device=dev)
        return EnvState(start.clone(), start.clone(),
                        torch.zeros(e, dtype=torch.long, device=dev), one, one.clone(), hist)

    def _visited(self, state: EnvState, cand: torch.Tensor) -> torch.Tensor:
        """(E, C) bool: candidate location already in the episode's history."""
        return (cand.unsqueeze(-1) == state.history.unsqueeze(1)).any(-1)

    def _return_weights(self, state: EnvState) -> torch.Tensor:
        """(E, 48) visit-count weights: one per past slot at a non-home, non-current location."""
        h = state.history
        return ((h >= 0) & (h != state.home[:, None]) & (h != state.loc[:, None])).float()

    def action_mask(self, state: EnvState) -> torch.Tensor:
        """(E, 4) bool of valid actions (stay and explore are always valid)."""
        mask = torch.ones(state.loc.shape[0], N_ACTIONS, dtype=torch.bool,
                          device=state.loc.device)
        mask[:, HOME] = state.loc != state.home
        mask[:, RETURN] = self._return_weights(state).sum(1) > 0
        return mask

    def _explore_weights(self, state: EnvState) -> tuple[torch.Tensor, torch.Tensor]:
        """(E, K) explore candidates and their public weights k^-alpha (tilted by the
        destination prior, if any), 0 where visited (all visited: every candidate keeps its
        weight)."""
        cand = self.nearest[state.loc]
        full = self.explore_w[state.loc]
        w = full.masked_fill(self._visited(state, cand), 0)
        return cand, torch.where(w.sum(1, keepdim=True) > 0, w, full)

    def distance_band(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Band index in [0, N_BANDS) of the equirectangular km between locations a and b
        (broadcast); a negative id (an empty history slot) counts as a itself."""
        b = torch.where(b < 0, a, b)
        km = ((self.coords[a] - self.coords[b]) * self.km_scale).norm(dim=-1)
        return torch.bucketize(km, self.band_edges)

    def destination_context(self, state: EnvState) -> DestContext:
        cand, w = self._explore_weights(state)
        exp_base = torch.where(w > 0, w.clamp_min(1e-30).log(), torch.full_like(w, NEG_LOGIT))
        exp_band = torch.stack([self.nearest_band[state.loc],
                                self.distance_band(state.home[:, None], cand)], -1)
        h = state.history
        valid = self._return_weights(state) > 0
        ret_base = torch.where(valid, torch.zeros_like(valid, dtype=torch.float),
                               torch.full_like(valid, NEG_LOGIT, dtype=torch.float))
        ret_band = torch.stack([self.distance_band(state.loc[:, None], h),
                                self.distance_band(state.home[:, None], h)], -1)
        count = ((h[:, :, None] == h[:, None, :]) & (h[:, None, :] >= 0)).sum(2)
        return DestContext(cand, exp_base, exp_band, h, ret_base, ret_band,
                           count.clamp_min(1).float().log())

    def sample_targets(self, state: EnvState, actions: torch.Tensor,
                       gen: torch.Generator) -> torch.Tensor:
        """Target location of each action (current location for stay, home for home), explore
        and return destinations drawn from the public distributions."""
        targets = torch.where(actions == HOME, state.home, state.loc).clone()
        exp = (actions == EXPLORE).nonzero().squeeze(1)
        if exp.numel():
            cand, w = self._explore_weights(state.rows(exp))
            k = torch.multinomial(w.cpu(), 1, generator=gen).squeeze(1).to(w.device)  # CPU draw
            targets[exp] = cand[torch.arange(exp.numel(), device=w.device), k]
        ret = (actions == RETURN).nonzero().squeeze(1)
        if ret.numel():
            w = self._return_weights(state)[ret]
            j = torch.multinomial(w.cpu(), 1, generator=gen).squeeze(1).to(w.device)
            targets[ret] = state.history[ret, j]
        return targets

    def step(self, state: EnvState, actions: torch.Tensor, targets: torch.Tensor) -> EnvState:
        """Deterministic transition to slot t+1; does not modify `state`."""
        new = torch.where(actions == STAY, state.loc,
                          torch.where(actions == HOME, state.home, targets))
        is_new = ~self._visited(state, new[:, None]).squeeze(1)
        hist = state.history.clone()
        rows = torch.arange(new.shape[0], device=new.device)
        hist[rows, state.slot + 1] = new
        return EnvState(new, state.home, state.slot + 1, state.n_distinct + is_new.long(),
                        torch.where(new == state.loc, state.stay_len + 1,
                                    torch.ones_like(state.stay_len)), hist)

    # ----------------------------------------------------------------------------------------
    def label(self, state: EnvState, next_locs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert action and target for the transition of each episode to `next_locs`."""
        nxt = torch.as_tensor(next_locs, dtype=torch.long).to(state.loc.device)
        visited = self._visited(state, nxt[:, None]).squeeze(1)
        act = torch.full_like(nxt, EXPLORE)
        act = torch.where(visited, torch.full_like(nxt, RETURN), act)
        act = torch.where(nxt == state.home, torch.full_like(nxt, HOME), act)
        act = torch.where(nxt == state.loc, torch.full_like(nxt, STAY), act)
        return act, nxt

    def check_days(self, days: np.ndarray) -> torch.Tensor:
        d = torch.as_tensor(np.asarray(days), dtype=torch.long)
        if d.ndim != 2 or d.shape[1] != SLOTS:
            raise InvalidTrajectoryError(f"days must be (n, {SLOTS}); got {tuple(d.shape)}")
        if d.numel() and (d.min() < 0 or d.max() >= self.n_locations):
            raise InvalidTrajectoryError(
                f"location ids must lie in [0, {self.n_locations}); got [{int(d.min())}, "
                f"{int(d.max())}]")
        return d

    def outside_k_fraction(self, days: np.ndarray) -> float:
        """Share of real explore moves whose target is not among the K nearest (unreachable)."""
        d = self.check_days(days)
        state, hits, total = self.reset(d[:, 0]), 0, 0
        for t in range(SLOTS - 1):
            act, tgt = self.label(state, d[:, t + 1])
            exp = act == EXPLORE
            inside = (self.nearest[state.loc[exp]] == tgt[exp, None]).any(1)
            hits += int(inside.sum())
            total += int(exp.sum())
            state = self.step(state, act, tgt)
        return 0.0 if total == 0 else 1.0 - hits / total

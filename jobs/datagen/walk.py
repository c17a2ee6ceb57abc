"""EPR walker and itinerary of one simulated phone (used by `jobs.datagen.model`). No pyspark.

- `pick_work`: a work place 2-15 km from home, popularity times distance^-work_decay;
- `Walker`: the exploration and preferential return model (Song et al., Nature Physics 2010):
  from the current place, explore with probability rho * S^-gamma (S = distinct places so far)
  to a station at a truncated power-law distance (per-user range multiplier) in a uniform
  direction (one of the 4 stations nearest that target, by popularity), else return to a
  visited place other than here and home, in proportion to its visit count;
- `Itinerary`: where the phone is over time, as stays at a station and transits between two
  stations (a record made while travelling is served by the station nearest the straight line).

Every draw comes from the user's own generator, in a fixed order, so results are reproducible.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from itertools import accumulate

import numpy as np

from jobs.datagen.params import MobilityParams
from jobs.datagen.stations import StationIndex


def pick_work(home: int, st: StationIndex, p: MobilityParams, rng: np.random.Generator) -> int:
    dist = np.hypot(*(st.xy - st.xy[home]).T)
    ok = (dist >= p.work_km[0]) & (dist <= p.work_km[1])
    if not ok.any():
        return -1
    weight = np.where(ok, st.weight * np.maximum(dist, 1e-9) ** -p.work_decay, 0.0)
    return int(rng.choice(len(st), p=weight / weight.sum()))


class Walker:
    """EPR state of one user: visit counts and the explore/return step."""

    def __init__(
        self, st: StationIndex, p: MobilityParams, rng: np.random.Generator, home: int, scale: float
    ):
        self.st, self.p, self.rng, self.home, self.scale = st, p, rng, home, scale
        self.visited: list[int] = [home]
        self.counts: dict[int, float] = {home: 1.0}
        a, b = (p.jump_km[0] + p.jump_r0_km), (p.jump_km[1] + p.jump_r0_km)
        self._ja, self._jb = a ** (1 - p.jump_beta), b ** (1 - p.jump_beta)

    def visit(self, loc: int) -> int:
        if loc not in self.counts:
            self.visited.append(loc)
            self.counts[loc] = 0.0
        self.counts[loc] += 1.0
        return loc

    def step(self, cur: int) -> int:
        """One EPR move from `cur`: explore a new place or return to a visited one."""
        p, rng = self.p, self.rng
        explore = rng.random() < p.rho * len(self.visited) ** -p.gamma
        if not explore:
            cands = [loc for loc in self.visited if loc != cur and loc != self.home]
            if cands:  # Python floats: this runs ~100 times a user, numpy calls cost more here
                w = list(accumulate(self.counts[loc] for loc in cands))
                return self.visit(cands[bisect_right(w, rng.random() * w[-1])])
        return self.visit(self._explore(cur, rng))

    def _explore(self, cur: int, rng: np.random.Generator) -> int:
        u, theta = rng.random(), 2 * np.pi * rng.random()
        p = self.p
        r = (self._ja - u * (self._ja - self._jb)) ** (1 / (1 - p.jump_beta)) - p.jump_r0_km
        r = min(r * self.scale, p.jump_km[1])
        target = self.st.xy[cur] + r * np.array([np.cos(theta), np.sin(theta)])
        _, near = self.st.tree.query(target, k=min(4, len(self.st)))
        near = np.atleast_1d(near)
        near = near[near != cur] if (near != cur).any() else near
        w = list(accumulate(self.st.weight[near].tolist()))
        return int(near[bisect_right(w, rng.random() * w[-1])])


def km_between(st: StationIndex, a: int, b: int) -> float:
    (ax, ay), (bx, by) = st.xy[a].tolist(), st.xy[b].tolist()
    return math.hypot(bx - ax, by - ay)


class Itinerary:
    """Where the phone is over time: stays at a station and transits between two stations."""

    def __init__(self) -> None:
        self.t: list[float] = []  # segment start, hours since the first day
        self.a: list[int] = []  # station (stay) or origin (transit)
        self.b: list[int] = []  # -1 (stay) or destination (transit)
        self.transits: list[tuple[float, float, int]] = []  # (start, end, day index)

    def stay(self, t: float, loc: int) -> None:
        self.t.append(t)
        self.a.append(loc)
        self.b.append(-1)

    def move(self, t: float, src: int, dst: int, hours: float, day_index: int) -> None:
        if hours > 0 and src != dst:
            self.t.append(t)
            self.a.append(src)
            self.b.append(dst)
            self.transits.append((t, t + hours, day_index))
        self.stay(t + max(hours, 0.0), dst)

    def move_into_transit(self, t, rec_i, n_days, share, rng) -> np.ndarray:
        """Move each record of a day with transits there with probability `share`."""
        if not self.transits or share <= 0:
            return t
        tr = np.asarray(self.transits)
        day_of = tr[:, 2].astype(np.int64)
        count = np.bincount(day_of, minlength=n_days)
        first = np.r_[0, np.cumsum(count)[:-1]]
        moved = (rng.random(len(t)) < share) & (count[rec_i] > 0)
        k = first[rec_i[moved]] + (rng.random(int(moved.sum())) * count[rec_i[moved]]).astype(int)
        t = t.copy()
        t[moved] = tr[k, 0] + rng.random(len(k)) * (tr[k, 1] - tr[k, 0])
        return t

    def locate(self, hours: np.ndarray, st: StationIndex) -> np.ndarray:
        """Station index at each time (sorted or not): the stay, or nearest to the transit line."""
        seg_t = np.asarray(self.t)
        seg = np.searchsorted(seg_t, hours, "right") - 1
        a = np.asarray(self.a, np.int64)[seg]
        b = np.asarray(self.b, np.int64)[seg]
        moving = b >= 0
        if moving.any():
            seg_m = seg[moving]
            frac = (hours[moving] - seg_t[seg_m]) / (seg_t[seg_m + 1] - seg_t[seg_m])
            pos = st.xy[a[moving]] + frac[:, None] * (st.xy[b[moving]] - st.xy[a[moving]])
            a[moving] = st.tree.query(pos)[1]
        return a

"""TraCS-D (direction + distance) and TraCS-C (coordinates): continuous-space trajectory
perturbation (Zheng and Hu, PETS 2026), outputs snapped to P (or kept raw for the error study).

The continuous space is P's bounding rectangle in a local planar projection (equirectangular,
km, about the rectangle's centre): public, a function of P only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from udfs.budget import BudgetRecord, RecordedMechanism, Step, check_epsilon, split
from udfs.errors import InvalidParameterError
from udfs.geo import KM_PER_DEGREE
from udfs.mechanisms.piecewise import TWO_PI, CircularPiecewise, LinearPiecewise
from udfs.space import LocationSpace

DIRECTION_SHARE = math.pi / (math.pi + 1.0)  # TraCS-D's eps_d / eps per location (authors' runs)


@dataclass(frozen=True)
class Plane:
    """P's bounding rectangle [0, w] x [0, h] (km) in a local equirectangular projection."""

    lat0: float
    lon0: float
    x_min: float
    y_min: float
    w: float
    h: float

    @classmethod
    def of(cls, space: LocationSpace) -> Plane:
        lat, lon = space.coords[:, 0], space.coords[:, 1]
        lat0, lon0 = (lat.min() + lat.max()) / 2, (lon.min() + lon.max()) / 2
        x, y = cls._xy(lat, lon, lat0, lon0)
        return cls(float(lat0), float(lon0), float(x.min()), float(y.min()),
                   float(x.max() - x.min()), float(y.max() - y.min()))

    @staticmethod
    def _xy(lat, lon, lat0, lon0):
        k = KM_PER_DEGREE
        return (np.asarray(lon) - lon0) * k * math.cos(math.radians(lat0)), \
            (np.asarray(lat) - lat0) * k

    def to_xy(self, lat, lon) -> np.ndarray:
        x, y = self._xy(lat, lon, self.lat0, self.lon0)
        return np.stack([np.clip(x - self.x_min, 0, self.w), np.clip(y - self.y_min, 0, self.h)],
                        -1)

    def to_latlon(self, xy) -> tuple[np.ndarray, np.ndarray]:
        k = KM_PER_DEGREE
        lat = self.lat0 + (xy[..., 1] + self.y_min) / k
        lon = self.lon0 + (xy[..., 0] + self.x_min) / (k * math.cos(math.radians(self.lat0)))
        return lat, lon

    def reach(self, ref: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """Distance from ref (inside the rectangle) to its boundary along direction phi."""
        c, s = np.cos(phi), np.sin(phi)
        with np.errstate(divide="ignore", invalid="ignore"):
            tx = np.where(c > 0, (self.w - ref[..., 0]) / c,
                          np.where(c < 0, ref[..., 0] / -c, np.inf))
            ty = np.where(s > 0, (self.h - ref[..., 1]) / s,
                          np.where(s < 0, ref[..., 1] / -s, np.inf))
        r = np.minimum(tx, ty)
        return np.where(np.isfinite(r), np.maximum(r, 0.0), 0.0)


class _TraCS(RecordedMechanism):
    """Shared by TraCS-D and TraCS-C: the plane, snapping and the batch loop."""

    space: LocationSpace
    epsilon_total: float

    def __post_init__(self):
        object.__setattr__(self, "epsilon_total", check_epsilon(self.epsilon_total))

    @property
    def plane(self) -> Plane:
        return self.space.cached("tracs_plane", lambda: Plane.of(self.space))

    def snap(self, xy: np.ndarray) -> np.ndarray:
        lat, lon = self.plane.to_latlon(xy)
        return self.space.nearest(lat.ravel(), lon.ravel()).reshape(lat.shape)

    def perturb_batch(self, traj: np.ndarray, lens, *, rng: np.random.Generator) -> np.ndarray:
        """(N, L) padded trajectories with lengths ``lens`` -> (N, L) outputs snapped to P."""
        lens = np.asarray(lens, dtype=np.int64)
        out = np.array(traj, dtype=np.int64, copy=True)
        for length in np.unique(lens).tolist():
            rows = np.flatnonzero(lens == length)
            out[rows, :length] = self.snap(self.perturb_raw(out[rows, :length], rng=rng))
        return out

    def perturb(self, x, *, rng: np.random.Generator) -> np.ndarray:
        """One trajectory (1-D location ids) -> its perturbed trajectory (ids of P)."""
        x = np.asarray(x, dtype=np.int64)
        return self.snap(self.perturb_raw(x[None, :], rng=rng))[0]

    def raw_latlon(self, traj: np.ndarray, *, rng: np.random.Generator):
        """(N, L) trajectories of one length -> raw continuous outputs (lat, lon), unsnapped."""
        return self.plane.to_latlon(self.perturb_raw(traj, rng=rng))


@dataclass(frozen=True, eq=False)
class TraCSD(_TraCS):
    """TraCS-D: each point as (direction, distance) from the previous *perturbed* point.

    Point i's reference is the previous raw output (point 1: the rectangle's south-west corner,
    as the authors' runs use (0, 0)). Direction phi of the point seen from the reference by
    `CircularPiecewise(eps_d)`; its distance normalised by the reach of the rectangle along phi,
    t in [0, 1], by `LinearPiecewise(eps_r)`; output = reference + t' reach(phi') (cos, sin)(phi'),
    inside the rectangle, then snapped to the nearest point of P. A point equal to its reference
    has no direction: phi = 0, t = 0 are perturbed all the same (no deterministic output).

    Guarantee: user-level eps-LDP for one trajectory of public length L: each point's two
        releases are eps_d- and eps_r-LDP for ANY input (phi in [0, 2 pi), t in [0, 1]) given
        the public reference (a function of earlier outputs), so by adaptive sequential
        composition the L points cost L (eps_d + eps_r) <= eps; snapping is post-processing.
        PROOF.md section 11.
    Budget: eps / L per point, of which pi/(pi+1) on the direction, 1/(pi+1) on the distance
        (the split of the authors' discrete-space runs).
    Citations: Zheng and Hu, "TraCS: Trajectory Collection in Continuous Space under Local
        Differential Privacy", PETS 2026 (arXiv 2412.00620), TraCS-D.
    Runtime: O(1) per point (independent of |P|) plus one nearest-point query to snap.
    Utility: error shrinks as e^(-eps/(2L)) per point; at small eps the output is spread over
        the whole rectangle (worse than EM over P, whose output never leaves P).
    """

    space: LocationSpace
    epsilon_total: float
    direction_share: float = DIRECTION_SHARE
    name = "tracs_d"

    def __post_init__(self):
        super().__post_init__()
        f = float(self.direction_share)
        if not (math.isfinite(f) and 0 < f < 1):
            raise InvalidParameterError(
                f"tracs_d direction_share={self.direction_share!r} must be in (0, 1)")
        object.__setattr__(self, "direction_share", f)

    def split(self, length: int) -> tuple[float, float]:
        ed, er = split(self.epsilon_total, [(length, self.direction_share),
                                            (length, 1.0 - self.direction_share)])
        return ed, er

    def record(self, length: int) -> BudgetRecord:
        ed, er = self.split(length)
        steps = []
        for i in range(length):
            steps += [Step("-", "direction", i, ed), Step("-", "distance", i, er)]
        return BudgetRecord(self.name, length, tuple(steps))

    def perturb_raw(self, traj: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """(N, L) trajectories of one length -> (N, L, 2) raw outputs in plane km."""
        traj = np.asarray(traj, dtype=np.int64)
        big_n, length = traj.shape
        ed, er = self.split(length)
        circ, lin = CircularPiecewise(ed), LinearPiecewise(er)
        pl = self.plane
        pts = pl.to_xy(self.space.coords[traj, 0], self.space.coords[traj, 1])
        out = np.empty((big_n, length, 2))
        ref = np.zeros((big_n, 2))
        for i in range(length):
            v = pts[:, i] - ref
            dist = np.hypot(v[:, 0], v[:, 1])
            phi = np.where(dist > 0, np.arctan2(v[:, 1], v[:, 0]) % TWO_PI, 0.0)
            span = pl.reach(ref, phi)
            t = np.where(span > 0, np.clip(dist / np.where(span > 0, span, 1.0), 0, 1), 0.0)
            phi2 = circ.perturb(phi, rng=rng)
            t2 = lin.perturb(t, rng=rng)
            r2 = t2 * pl.reach(ref, phi2)
            ref = np.stack([np.clip(ref[:, 0] + r2 * np.cos(phi2), 0, pl.w),
                            np.clip(ref[:, 1] + r2 * np.sin(phi2), 0, pl.h)], -1)
            out[:, i] = ref
        return out


@dataclass(frozen=True, eq=False)
class TraCSC(_TraCS):
    """TraCS-C: each coordinate of each point, normalised to [0, 1] in the rectangle, by
    `LinearPiecewise(eps / (2 L))`; output snapped to the nearest point of P.

    Guarantee: user-level eps-LDP for one trajectory of public length L (2 L releases, each
        eps/(2L)-LDP for any coordinate in [0, 1]; snapping is post-processing). A zero-width
        side of the rectangle (all P on one meridian or parallel) releases a constant.
        PROOF.md section 11.
    Budget: eps / (2 L) per coordinate.
    Citations: Zheng and Hu, TraCS, PETS 2026 (arXiv 2412.00620), TraCS-C.
    Runtime: O(1) per point plus one nearest-point query.
    Utility: per-coordinate error shrinks as e^(-eps/(4L)); outputs spread over the rectangle.
    """

    space: LocationSpace
    epsilon_total: float
    name = "tracs_c"

    def record(self, length: int) -> BudgetRecord:
        (e,) = split(self.epsilon_total, [(2 * length, 1.0)])
        return BudgetRecord(self.name, length, tuple(
            Step("-", axis, i, e) for i in range(length) for axis in ("x", "y")))

    def perturb_raw(self, traj: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        traj = np.asarray(traj, dtype=np.int64)
        (e,) = split(self.epsilon_total, [(2 * traj.shape[1], 1.0)])
        lin = LinearPiecewise(e)
        pl = self.plane
        pts = pl.to_xy(self.space.coords[traj, 0], self.space.coords[traj, 1])
        size = np.array([pl.w, pl.h])
        unit = np.where(size > 0, pts / np.where(size > 0, size, 1.0), 0.0)
        return lin.perturb(unit, rng=rng) * size

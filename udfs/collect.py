"""Entry point of LDP collection: `perturb` a batch of trajectories with TP, ATP, EXP or UNIFORM.

The Spark layer calls :func:`perturb` once per batch of users (an Arrow batch of a partition)
with one secret 64-bit key per trajectory (derived from the run key, the setting, the user and
the trajectory: `udfs.collect_kernel.trajectory_keys`). Every random number a trajectory uses
is a function of its key and a counter naming the draw (`udfs.streams`), so its output does
not depend on which other trajectories share the call: any partitioning gives the same
release. Within one call, all trajectories (of every length) are perturbed together as one
padded (N, max length) batch with array operations (no Python loop per point and no
per-length pass). An int / SeedSequence / Generator seed draws the keys from a generator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

import numpy as np

from udfs.atp import ATP
from udfs.baselines import EXP, Uniform
from udfs.budget import BudgetRecord
from udfs.errors import InvalidParameterError, InvalidTrajectoryError
from udfs.granularity import choose_granularity
from udfs.mechanisms.ngram import REACH_SHARE, NGram
from udfs.mechanisms.tracs import TraCSC, TraCSD
from udfs.space import LocationSpace
from udfs.streams import Stream, keys_from
from udfs.tp import TP


@runtime_checkable
class TrajectoryMechanism(Protocol):
    """What every LDP trajectory mechanism offers the collection entry points: its budget
    record for a length, and a batch perturbation of padded trajectories. `keyed` mechanisms
    take a `udfs.streams.Stream` as `rng` (one key per trajectory); the others a Generator."""

    keyed: bool

    def record(self, n: int) -> BudgetRecord: ...

    def perturb_batch(self, traj: np.ndarray, lens, *, rng) -> np.ndarray: ...


@dataclass(frozen=True)
class MechanismOptions:
    """The options a mechanism may take (each mechanism reads the ones it has)."""

    granularity: Any = "auto"
    r_dir: float = 0.75
    calibrated: bool = True
    combiner: str = "medoid"
    single_point: str = "one_copy"


MECHANISM_OPTIONS = tuple(f.name for f in fields(MechanismOptions))

_Builder = Callable[[LocationSpace, float, MechanismOptions], TrajectoryMechanism]

# The one registry of collection mechanisms: every name the config, the kernel and the reports
# accept is a key here. A bigram n-gram calls consecutive points plausible within a quarter
# of the diameter of P.
_REGISTRY: dict[str, _Builder] = {
    "tp": lambda space, eps, o: TP(space, eps, r_dir=o.r_dir, granularity=o.granularity,
                                   combiner=o.combiner, single_point=o.single_point),
    "atp": lambda space, eps, o: ATP(space, eps, granularity=o.granularity,
                                     calibrated=o.calibrated, combiner=o.combiner,
                                     single_point=o.single_point),
    "exp": lambda space, eps, o: EXP(space, eps),
    "uniform": lambda space, eps, o: Uniform(space, eps),
    "ngram": lambda space, eps, o: NGram(space, eps, n=2,
                                         reach_km=REACH_SHARE * space.diameter),
    "tracs_d": lambda space, eps, o: TraCSD(space, eps),
    "tracs_c": lambda space, eps, o: TraCSC(space, eps),
}
MECHANISMS = tuple(_REGISTRY)
# Mechanisms whose output ignores the input: they charge nothing and are never published.
INPUT_FREE = ("uniform",)
PUBLISHED_MECHANISMS = tuple(m for m in MECHANISMS if m not in INPUT_FREE)

__all__ = ["INPUT_FREE", "MECHANISMS", "MECHANISM_OPTIONS", "MechanismOptions",
           "PUBLISHED_MECHANISMS", "TrajectoryMechanism", "as_generator", "choose_granularity",
           "make_mechanism", "perturb"]


def as_generator(seed) -> np.random.Generator:
    """int >= 0, numpy SeedSequence or Generator -> Generator (a Generator is used as is)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if isinstance(seed, int | np.integer) and not isinstance(seed, bool) and seed >= 0:
        return np.random.default_rng(int(seed))
    raise InvalidParameterError(
        f"seed={seed!r} is not a non-negative int, numpy SeedSequence or Generator; derive one "
        "from the run key and user id (np.random.SeedSequence([...]))"
    )


def make_mechanism(space: LocationSpace, epsilon: float, mechanism: str,
                   **options) -> TrajectoryMechanism:
    """Build the mechanism value object (validates every parameter); `options` are
    :class:`MechanismOptions` fields."""
    if not isinstance(space, LocationSpace):
        raise InvalidParameterError("space must be a udfs.space.LocationSpace "
                                    "(build it with LocationSpace.from_latlon)")
    build = _REGISTRY.get(mechanism)
    if build is None:
        raise InvalidParameterError(
            f"unknown mechanism {mechanism!r}; use one of {', '.join(MECHANISMS)}"
        )
    return build(space, epsilon, MechanismOptions(**options))


def _validate(trajectories, n_loc: int, max_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(all points as one int64 array, lengths) of valid trajectories; anything odd goes to
    :func:`_validate_slow`, which raises the error of the first bad trajectory (same messages,
    same order). numpy int arrays (what every caller passes) are checked in one pass over
    their concatenation, without a numpy call per trajectory."""
    if max_len is not None and not (isinstance(max_len, int | np.integer)
                                    and not isinstance(max_len, bool) and max_len >= 1):
        _validate_slow(trajectories, n_loc, max_len)  # raises on max_len
    trajs = trajectories if isinstance(trajectories, list) else list(trajectories)
    if not trajs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    if set(map(type, trajs)) == {np.ndarray}:
        arrays = trajs
    else:  # lists and other sequences: one conversion each (as np.asarray would)
        arrays = [t if type(t) is np.ndarray else np.asarray(t) for t in trajs]
    if (set(map(attrgetter("ndim"), arrays)) == {1}
            and {dt.kind for dt in set(map(attrgetter("dtype"), arrays))} <= {"i", "u"}):
        lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        if lengths.min() >= 1 and (max_len is None or lengths.max() <= max_len):
            # unsafe cast per array, as astype(np.int64): a huge uint64 id wraps negative and
            # fails the range test below like it does in _validate_slow
            cat = np.concatenate(arrays, dtype=np.int64, casting="unsafe")
            if cat.min() >= 0 and cat.max() < n_loc:
                return cat, lengths
    out = _validate_slow(trajs, n_loc, max_len)
    return np.concatenate(out), np.fromiter(map(len, out), dtype=np.int64, count=len(out))


def _validate_slow(trajectories, n_loc: int, max_len: int | None) -> list[np.ndarray]:
    if max_len is not None and (
        not isinstance(max_len, int | np.integer) or isinstance(max_len, bool) or max_len < 1
    ):
        raise InvalidParameterError(f"max_len={max_len!r} must be an int >= 1 (or None)")
    out = []
    for i, t in enumerate(trajectories):
        a = np.asarray(t)
        if a.ndim != 1:
            raise InvalidTrajectoryError(
                f"trajectory {i} has shape {a.shape}; pass a 1-D array of location ids")
        if a.size == 0:
            raise InvalidTrajectoryError(
                f"trajectory {i} is empty; drop empty trajectories before perturbing")
        if not np.issubdtype(a.dtype, np.integer):
            if not (np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a))
                    and np.all(a == np.round(a))):
                raise InvalidTrajectoryError(
                    f"trajectory {i} holds non-integer values ({a.dtype}); pass location ids")
        a = a.astype(np.int64)
        if a.min() < 0 or a.max() >= n_loc:
            raise InvalidTrajectoryError(
                f"trajectory {i} has location id {int(a.min() if a.min() < 0 else a.max())} "
                f"outside [0, {n_loc}); map points to ids of this LocationSpace first")
        if max_len is not None and a.size > max_len:
            raise InvalidTrajectoryError(
                f"trajectory {i} has {a.size} points > max_len={max_len}; cut it into pieces "
                f"of at most {max_len} points (ingestion does) or raise max_len")
        out.append(a)
    return out


def _is_keys(seed) -> bool:
    return isinstance(seed, np.ndarray) and seed.dtype == np.uint64


def trajectory_keys(seed, n: int) -> np.ndarray:
    """One 64-bit stream key per trajectory (`udfs.streams`): the given (n,) uint64 array, or
    n keys drawn from the generator of an int / SeedSequence / Generator seed."""
    if _is_keys(seed):
        if seed.shape != (n,):
            raise InvalidParameterError(
                f"seed holds {seed.shape} trajectory keys for {n} trajectories; pass one uint64 "
                "key per trajectory (udfs.collect_kernel.trajectory_keys derives them)")
        return seed
    return keys_from(as_generator(seed), n)


def perturb_keyed(mech, pad: np.ndarray, lengths: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(N, L) padded trajectories -> outputs, each row's noise a function of its own key only.

    Mechanisms whose `perturb_batch` takes a `udfs.streams.Stream` (`keyed = True`: TP, ATP,
    EXP, UNIFORM) run once over the whole batch; any other runs once per trajectory with a
    numpy Generator seeded by that trajectory's key (same guarantee, slower)."""
    if mech.keyed:
        return mech.perturb_batch(pad, lengths, rng=Stream(keys))
    out = np.array(pad, dtype=np.int64, copy=True)
    for i, (k, n) in enumerate(zip(keys.tolist(), lengths.tolist(), strict=True)):
        rng = np.random.default_rng(np.random.SeedSequence(int(k)))
        out[i, :n] = mech.perturb_batch(pad[i:i + 1, :n], lengths[i:i + 1], rng=rng)[0]
    return out


def perturb_padded(pad: np.ndarray, lengths: np.ndarray, space: LocationSpace, epsilon: float,
                   mechanism: str, keys: np.ndarray, *, max_len: int | None = None,
                   **options) -> np.ndarray:
    """The batch entry point: (N, L) padded trajectories (row i valid in its first lengths[i]
    positions) with one uint64 stream key each -> (N, L) outputs, each row a function of its
    own key and points only. Validates in bulk (the first bad row raises :func:`perturb`'s
    error); `options` are :func:`make_mechanism`'s."""
    mech = make_mechanism(space, epsilon, mechanism, **options)
    pad = np.asarray(pad, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    keys = trajectory_keys(keys, lengths.size)
    if lengths.size == 0:
        return pad
    valid = np.arange(pad.shape[1])[None, :] < lengths[:, None]
    vals = pad[valid]
    if (lengths.min() < 1 or vals.min() < 0 or vals.max() >= space.n
            or (max_len is not None and lengths.max() > max_len)):
        _validate_slow([r[:n] for r, n in zip(pad, lengths.tolist(), strict=True)], space.n,
                       max_len)
    return perturb_keyed(mech, pad, lengths, keys)


def perturb(trajectories, space: LocationSpace, epsilon: float, mechanism: str, seed, *,
            granularity="auto", r_dir: float = 0.75, max_len: int | None = None,
            calibrated: bool = True, combiner: str = "medoid", single_point: str = "one_copy",
            return_budget: bool = False):
    """Perturb each trajectory with `mechanism` at budget `epsilon` per whole trajectory.

    Args:
        trajectories: list of 1-D integer arrays of location ids of `space` (each non-empty).
        space: the public location set P.
        epsilon: user-level budget of each trajectory (finite, > 0).
        mechanism: one of MECHANISMS ("tp", "atp", "exp", "uniform", "ngram", "tracs_d",
            "tracs_c").
        seed: int, SeedSequence or Generator (same seed and input -> same output), or an
            (N,) uint64 array of per-trajectory stream keys: then each trajectory's output
            depends only on its key and points, whatever else is in the call (the collect
            kernel's partition-independent release; `udfs.streams`).
        granularity: "auto" (Eq. 8 evaluated at the per-direction budget; PROOF.md section 5)
            or a fixed g in {2, 4, 6, 12} (TP/ATP only).
        r_dir: TP's share of each copy spent on directions (ATP uses its fixed shares).
        max_len: if given, a longer trajectory raises InvalidTrajectoryError.
        calibrated: ATP's radius calibration on/off (post-processing either way).
        combiner: how TP/ATP join their two copies (post-processing, `udfs.tp.combine`):
            "medoid" (default), "copy_medoid", "paper" (Eq. 7 as written) or "midpoint".
        single_point: TP/ATP on length-1 trajectories: "one_copy" (default, one EM draw over P
            with the whole epsilon; deviation from docs/architecture.md, see udfs/PROOF.md 2a) or
            "two_copies" (docs/architecture.md: two eps/2 copies combined).
        return_budget: also return one BudgetRecord per trajectory (each step's epsilon).

    Returns:
        list of int64 arrays (same order and lengths), or (list, list[BudgetRecord]).
    """
    mech = make_mechanism(space, epsilon, mechanism, granularity=granularity, r_dir=r_dir,
                          calibrated=calibrated, combiner=combiner, single_point=single_point)
    points, lengths = _validate(trajectories, space.n, max_len)
    out: list[np.ndarray] = []
    if lengths.size:
        valid = np.arange(int(lengths.max()))[None, :] < lengths[:, None]
        pad = np.zeros(valid.shape, np.int64)  # (N, L), row i valid in its first n_i
        pad[valid] = points
        if mech.keyed or _is_keys(seed):
            res = perturb_keyed(mech, pad, lengths, trajectory_keys(seed, lengths.size))
        else:  # a mechanism without streams, seeded as a whole: one generator for the call
            res = mech.perturb_batch(pad, lengths, rng=as_generator(seed))
        flat = res[valid]  # row after row: slices of it are the trajectories
        ends = np.cumsum(lengths)
        out = [flat[s:e] for s, e in zip((ends - lengths).tolist(), ends.tolist(), strict=True)]
    if return_budget:
        records: dict[int, BudgetRecord] = {}
        recs = [records.setdefault(n, mech.record(n)) for n in lengths.tolist()]
        return out, recs
    return out

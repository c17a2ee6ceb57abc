"""Catalogue of bad inputs (issue 10): configs, raw files, location sets and parameters.

Every entry gets a clear outcome, checked here:
  * a typed error from `udfs.errors` whose message names the problem, or
  * a quarantine row with its reason, with nothing lost: records read = accepted + quarantined
    (and every good record of the same file accepted), or
  * documented acceptance (a single-point trajectory, a one-point location set, epsilon 1e6)
    with the output checked.
Each case runs under a wall-clock limit (SIGALRM), so a hang fails instead of blocking CI.
Almost everything runs at the pure layer (pandas readers, config models, `udfs`); only the missing
catalog table needs Spark (marker `spark`).

`python tests/reliability/test_bad_inputs.py` prints the catalogue as a markdown table with the
observed outcome of every entry.
"""

from __future__ import annotations

import contextlib
import math
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from jobs.ingest.locmap import LocationSet, load_locations
from jobs.ingest.readers.pipeline import ReaderOptions, ingest_local
from udfs.errors import (
    ConfigError,
    InputDataError,
    InvalidParameterError,
    InvalidTrajectoryError,
    TrajprivError,
)

LIMIT_S = 60  # per case; the slowest (100,000 records of one user) takes a few seconds

HEADER = b"user,start,end,lat,lon,station\n"
GOOD = [  # three good records of user u1 on 2014-06-01 (stations 1, 2, 3)
    b"u1,2014-06-01 08:00:00,2014-06-01 08:20:00,31.2000,121.4000,1",
    b"u1,2014-06-01 09:00:00,,31.2100,121.4100,2",
    b"u1,2014-06-01 10:00:00,,31.2200,121.4500,3",
]
STATIONS = LocationSet(
    np.array([1, 2, 3, 4]),
    np.array([31.20, 31.21, 31.22, 31.25]),
    np.array([121.40, 121.41, 121.45, 121.50]),
    np.array(["1", "2", "3", "4"], dtype=object),
)
PLT_HEADER = (
    b"Geolife trajectory\nWGS 84\nAltitude is in Feet\nReserved 3\n"
    b"0,2,255,My Track,0,0,2,8421376\n0\n"
)


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail (TimeoutError) instead of hanging; SIGALRM, so main thread / POSIX only."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"bad-input case did not finish within {seconds} s (hang?)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ runners
@dataclass
class Ingested:
    """What a raw-file case produced: the four tables plus how many records the file holds."""

    tables: dict
    records: int
    good: int  # how many of them are known-good records that must be accepted

    @property
    def quarantine_reasons(self) -> list[str]:
        return sorted(self.tables["quarantine"]["reason"].tolist())


def _ingest_csv(
    tmp: Path, bad: list[bytes], *, terminated: bool = True, good: list[bytes] = GOOD, **opts
) -> Ingested:
    body = b"\n".join([*good, *bad]) + (b"\n" if terminated else b"")
    path = tmp / "records.csv"
    path.write_bytes(HEADER + body)
    tables, _ = ingest_local([path], ReaderOptions(source="telecom", **opts), STATIONS)
    return Ingested(tables, len(good) + len(bad), len(good))


def record(user="u1", ts="2014-06-01 11:00:00", lat="31.2500", lon="121.5000", station=""):
    return f"{user},{ts},,{lat},{lon},{station}".encode()


def _plt(tmp: Path, lines: list[bytes]) -> Ingested:
    from jobs.ingest.locmap import Grid

    folder = tmp / "007" / "Trajectory"
    folder.mkdir(parents=True)
    path = folder / "t.plt"
    path.write_bytes(PLT_HEADER + b"".join(lines))
    opts = ReaderOptions(source="plt", max_distance_km=1.0)
    tables, _ = ingest_local([path], opts, Grid(0.01, (39.5, 40.5, 115.8, 117.0)))
    return Ingested(tables, len(lines), len(lines) - 1)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _load_config_text(tmp: Path, text: bytes):
    from jobs.config import load_config

    path = tmp / "conf.yaml"
    path.write_bytes(text)
    return load_config(path)


def _set(*overrides: str):
    from jobs.config import load_config

    return lambda tmp: load_config(None, list(overrides))


def _space(lat, lon):
    from udfs.space import LocationSpace

    return LocationSpace.from_latlon(np.asarray(lat, float), np.asarray(lon, float))


SMALL = (
    [31.20, 31.21, 31.22, 31.25, 31.30, 31.18],
    [121.40, 121.41, 121.45, 121.50, 121.47, 121.38],
)


def _perturb(trajs, *, epsilon=1.0, mechanism="atp", seed=0, space=None, **kw):
    from udfs.collect import perturb

    sp = space if space is not None else _space(*SMALL)
    return lambda tmp: perturb(trajs, sp, epsilon, mechanism, seed, **kw)


def _big_user(tmp: Path) -> Ingested:
    """One user, 100,000 records over 100 days (1,000 a day, cycling the four stations)."""
    n = 100_000
    base = np.datetime64("2014-06-01T00:00:00")
    ts = (
        base
        + (np.arange(n) // 1000).astype("timedelta64[D]")
        + ((np.arange(n) % 1000) * 80).astype("timedelta64[s]")
    )
    st = np.arange(n) % 4
    lat, lon = STATIONS.lat[st], STATIONS.lon[st]
    text = "\n".join(
        f"big,{str(t).replace('T', ' ')},,{a:.4f},{o:.4f},{s + 1}"
        for t, a, o, s in zip(ts, lat, lon, st, strict=True)
    ).encode()
    path = tmp / "big.csv"
    path.write_bytes(HEADER + text + b"\n")
    tables, _ = ingest_local([path], ReaderOptions(source="telecom", max_len=8), STATIONS)
    return Ingested(tables, n, n)


def _corrupt_parquet(tmp: Path):
    from jobs.config import load_config
    from jobs.ingest import stage as ingest

    rec = tmp / "records"
    rec.mkdir()
    (rec / "part-0.parquet").write_bytes(b"PAR1" + b"\x00garbage, not a footer" * 10)
    (tmp / "stations.csv").write_text("loc_id,lat,lon\n1,31.2,121.4\n")
    cfg = load_config(
        None,
        [
            f"storage.root={tmp}",
            f"ingest.path={rec}",
            f"ingest.locations_path={tmp / 'stations.csv'}",
        ],
    )
    return ingest.plan_inputs(cfg)


def _train_config(**fields):
    from models.config import TrainConfig

    return lambda tmp: TrainConfig.from_dict(fields)


# ------------------------------------------------------------------ the catalogue
@dataclass(frozen=True)
class Case:
    id: str
    layer: str
    what: str
    run: Callable[[Path], object]
    raises: type[Exception] | None = None
    match: str = ""  # regex the error message must contain (names the problem)
    reason: str | None = None  # expected quarantine reason of the one bad record
    check: Callable[[object], None] | None = None  # for accepted inputs
    xfail: str = ""  # a known gap outside the pure modules this catalogue may fix


def _single_point_ok(out):
    assert len(out) == 1 and out[0].shape == (1,) and 0 <= int(out[0][0]) < 6


def _one_location_ok(out):
    assert all(np.array_equal(o, np.zeros_like(o)) for o in out)


def _huge_eps_ok(out):
    assert np.array_equal(out[0], np.array([0, 3, 5]))  # eps 1e6: exact, no NaN/overflow


def _nearest_fallback_ok(res: Ingested):
    """Documented rule (README, ingestion): an id not in the set falls back to the nearest
    location within ingest.max_distance_km."""
    pts = res.tables["points"]
    assert len(pts) == res.records and int(pts["loc_id"].iloc[-1]) == 4


def _big_user_ok(res: Ingested):
    assert len(res.tables["points"]) == res.records  # every record accepted
    assert (res.tables["trajectories"]["n"] <= 8).all()


CASES: list[Case] = [
    # ---- raw records (telecom CSV through the pandas ingestion pipeline)
    Case(
        "nan_coordinate",
        "ingest_local (telecom csv)",
        "latitude `nan`",
        lambda t: _ingest_csv(t, [record(lat="nan")]),
        reason="missing_coordinate",
    ),
    Case(
        "inf_coordinate",
        "ingest_local (telecom csv)",
        "longitude `inf`",
        lambda t: _ingest_csv(t, [record(lon="inf")]),
        reason="missing_coordinate",
    ),
    Case(
        "empty_coordinate",
        "ingest_local (telecom csv)",
        "empty latitude field",
        lambda t: _ingest_csv(t, [record(lat="")]),
        reason="missing_coordinate",
    ),
    Case(
        "swapped_lat_lon",
        "ingest_local (telecom csv)",
        "latitude and longitude swapped (121.5, 31.25)",
        lambda t: _ingest_csv(t, [record(lat="121.5000", lon="31.2500")]),
        reason="coordinate_out_of_range",
    ),
    Case(
        "latitude_out_of_range",
        "ingest_local (telecom csv)",
        "latitude 95",
        lambda t: _ingest_csv(t, [record(lat="95.0")]),
        reason="coordinate_out_of_range",
    ),
    Case(
        "null_island",
        "ingest_local (telecom csv)",
        "coordinates (0, 0)",
        lambda t: _ingest_csv(t, [record(lat="0", lon="0")]),
        reason="null_island",
    ),
    Case(
        "far_from_every_location",
        "ingest_local (telecom csv)",
        "a point 500 km from every station, no station id",
        lambda t: _ingest_csv(t, [record(lat="35.0", lon="121.5")]),
        reason="too_far",
    ),
    Case(
        "unknown_location_id",
        "ingest_local (telecom csv)",
        "station id 999 not in the set, 500 km from every station",
        lambda t: _ingest_csv(t, [record(station="999", lat="35.0")]),
        reason="unknown_location",
    ),
    Case(
        "unknown_location_id_near_station",
        "ingest_local (telecom csv)",
        "station id 999 not in the set, coordinates on station 4",
        lambda t: _ingest_csv(t, [record(station="999")]),
        check=_nearest_fallback_ok,
    ),
    Case(
        "duplicate_record",
        "ingest_local (telecom csv)",
        "the same user, timestamp and station twice",
        lambda t: _ingest_csv(t, [GOOD[0].replace(b"2014-06-01 08:20:00", b"")]),
        reason="duplicate",
    ),
    Case(
        "unparsable_timestamp",
        "ingest_local (telecom csv)",
        "timestamp `2014-13-45 25:00`",
        lambda t: _ingest_csv(t, [record(ts="2014-13-45 25:00")]),
        reason="unparsable_timestamp",
    ),
    Case(
        "non_utf8_bytes",
        "ingest_local (telecom csv)",
        "bytes \\xff\\xfe inside a record",
        lambda t: _ingest_csv(t, [b"u1,2014-06-01 11:00:00,,31.25\xff\xfe,121.5,"]),
        reason="non_utf8",
    ),
    Case(
        "csv_truncated_last_line",
        "ingest_local (telecom csv)",
        "the file ends mid-record (`u1,2014-06-0`)",
        lambda t: _ingest_csv(t, [b"u1,2014-06-0"], terminated=False),
        reason="truncated_line",
    ),
    Case(
        "csv_missing_fields",
        "ingest_local (telecom csv)",
        "a record with 3 of 6 fields",
        lambda t: _ingest_csv(t, [b"u1,2014-06-01 11:00:00,"]),
        reason="truncated_line",
    ),
    Case(
        "csv_extra_fields",
        "ingest_local (telecom csv)",
        "a record with 8 fields",
        lambda t: _ingest_csv(t, [record() + b",x,y"]),
        reason="unparsable_line",
    ),
    Case(
        "missing_user",
        "ingest_local (telecom csv)",
        "empty user id",
        lambda t: _ingest_csv(t, [record(user="")]),
        reason="unparsable_line",
    ),
    Case(
        "plt_truncated_line",
        "ingest_local (plt)",
        "a PLT line cut after 4 of 7 fields",
        lambda t: _plt(
            t,
            [
                b"40.0083,116.3198,0,492,39745.09,2008-10-24,02:09:59\n",
                b"40.0085,116.3200,0,492\n",
                b"40.0087,116.3202,0,492,39745.09,2008-10-24,06:30:00\n",
            ],
        ),
        reason="truncated_line",
    ),
    Case(
        "csv_header_lacks_column",
        "ingest_local (telecom csv)",
        "header without a latitude column",
        lambda t: ingest_local(
            [_write(t / "h.csv", b"user,start,lon\nu1,2014-06-01 08:00,121.4\n")],
            ReaderOptions(),
            STATIONS,
        ),
        raises=InputDataError,
        match=r"lacks a column for lat",
    ),
    Case(
        "user_with_100000_records",
        "ingest_local (telecom csv)",
        "one user with 100,000 records in 100 days",
        _big_user,
        check=_big_user_ok,
    ),
    Case(
        "reader_max_len_0",
        "ingest_local (shaping)",
        "ReaderOptions(max_len=0)",
        lambda t: _ingest_csv(t, [], max_len=0),
        raises=InvalidParameterError,
        match=r"max_len must be at least 1, got 0",
    ),
    Case(
        "corrupt_parquet",
        "jobs.ingest.stage.plan_inputs (driver, no Spark)",
        "a `.parquet` file of garbage bytes",
        _corrupt_parquet,
        raises=InputDataError,
        match=r"part-0\.parquet: not a readable Parquet file",
    ),
    # ---- location sets
    Case(
        "empty_location_set",
        "udfs.space.LocationSpace.from_latlon",
        "no locations",
        lambda t: _space([], []),
        raises=InvalidTrajectoryError,
        match=r"location set is empty",
    ),
    Case(
        "empty_location_file",
        "jobs.ingest.locmap.load_locations",
        "a 0-byte stations file",
        lambda t: load_locations(_write(t / "s.csv", b"")),
        raises=InputDataError,
        match=r"s\.csv is empty",
    ),
    Case(
        "location_set_nan",
        "udfs.space.LocationSpace.from_latlon",
        "a NaN latitude",
        lambda t: _space([31.2, math.nan], [121.4, 121.5]),
        raises=InvalidTrajectoryError,
        match=r"NaN/inf coordinates at ids \[1\]",
    ),
    Case(
        "location_set_swapped",
        "udfs.space.LocationSpace.from_latlon",
        "(lon, lat) passed as (lat, lon)",
        lambda t: _space([121.4, 121.5], [31.2, 31.3]),
        raises=InvalidTrajectoryError,
        match=r"latitudes outside \[-90, 90\]",
    ),
    Case(
        "duplicate_location_ids",
        "jobs.ingest.locmap.load_locations",
        "station id 7 twice",
        lambda t: load_locations(
            _write(t / "s.csv", b"loc_id,lat,lon\n7,31.2,121.4\n7,31.3,121.5\n")
        ),
        raises=InputDataError,
        match=r"line 3: duplicate location id '7'",
    ),
    Case(
        "location_set_of_one_point",
        "udfs.collect.perturb (tp, atp, exp)",
        "|P| = 1 (diameter 0)",
        lambda t: [
            o
            for m in ("tp", "atp", "exp")
            for o in _perturb(
                [np.array([0, 0, 0]), np.array([0])], mechanism=m, space=_space([31.2], [121.4])
            )(t)
        ],
        check=_one_location_ok,
    ),
    # ---- trajectories and mechanism parameters (udfs.collect.perturb)
    Case(
        "empty_trajectory",
        "udfs.collect.perturb",
        "a trajectory with no points",
        _perturb([np.array([1, 2]), np.array([], dtype=np.int64)]),
        raises=InvalidTrajectoryError,
        match=r"trajectory 1 is empty",
    ),
    Case(
        "single_point_trajectory",
        "udfs.collect.perturb",
        "a trajectory of one point (ATP)",
        _perturb([np.array([3])]),
        check=_single_point_ok,
    ),
    Case(
        "unknown_location_in_trajectory",
        "udfs.collect.perturb",
        "location id 6 with |P| = 6",
        _perturb([np.array([0, 6])]),
        raises=InvalidTrajectoryError,
        match=r"location id 6 outside \[0, 6\)",
    ),
    Case(
        "negative_location_id",
        "udfs.collect.perturb",
        "location id -1",
        _perturb([np.array([-1, 2])]),
        raises=InvalidTrajectoryError,
        match=r"location id -1 outside",
    ),
    Case(
        "nan_location_id",
        "udfs.collect.perturb",
        "a float NaN as a location id",
        _perturb([np.array([1.0, math.nan])]),
        raises=InvalidTrajectoryError,
        match=r"non-integer values",
    ),
    Case(
        "epsilon_zero",
        "udfs.collect.perturb",
        "epsilon = 0",
        _perturb([np.array([1, 2])], epsilon=0.0),
        raises=InvalidParameterError,
        match=r"epsilon=0\.0 must be finite and > 0",
    ),
    Case(
        "epsilon_negative",
        "udfs.collect.perturb",
        "epsilon = -1",
        _perturb([np.array([1, 2])], epsilon=-1.0),
        raises=InvalidParameterError,
        match=r"epsilon=-1\.0 must be finite and > 0",
    ),
    Case(
        "epsilon_nan",
        "udfs.collect.perturb",
        "epsilon = NaN",
        _perturb([np.array([1, 2])], epsilon=math.nan),
        raises=InvalidParameterError,
        match=r"epsilon=nan must be finite and > 0",
    ),
    Case(
        "epsilon_inf",
        "udfs.collect.perturb",
        "epsilon = inf",
        _perturb([np.array([1, 2])], epsilon=math.inf),
        raises=InvalidParameterError,
        match=r"epsilon=inf must be finite and > 0",
    ),
    Case(
        "epsilon_string",
        "udfs.collect.perturb",
        "epsilon = 'one'",
        _perturb([np.array([1, 2])], epsilon="one"),
        raises=InvalidParameterError,
        match=r"epsilon='one' is not a number",
    ),
    Case(
        "epsilon_1e6",
        "udfs.collect.perturb",
        "epsilon = 1e6 (ATP)",
        _perturb([np.array([0, 3, 5])], epsilon=1e6),
        check=_huge_eps_ok,
    ),
    Case(
        "perturb_max_len_0",
        "udfs.collect.perturb",
        "max_len = 0",
        _perturb([np.array([1, 2])], max_len=0),
        raises=InvalidParameterError,
        match=r"max_len=0 must be an int >= 1",
    ),
    Case(
        "trajectory_over_max_len",
        "udfs.collect.perturb",
        "9 points with max_len = 8",
        _perturb([np.arange(9) % 6], max_len=8),
        raises=InvalidTrajectoryError,
        match=r"9 points > max_len=8",
    ),
    Case(
        "bad_granularity",
        "udfs.collect.perturb",
        "granularity = 5",
        _perturb([np.array([1, 2])], granularity=5),
        raises=InvalidParameterError,
        match=r"granularity=5 is not 'auto' or one of",
    ),
    Case(
        "unknown_mechanism",
        "udfs.collect.perturb",
        "mechanism = 'laplace'",
        _perturb([np.array([1, 2])], mechanism="laplace"),
        raises=InvalidParameterError,
        match=r"unknown mechanism 'laplace'",
    ),
    Case(
        "negative_seed",
        "udfs.collect.perturb",
        "seed = -1",
        _perturb([np.array([1, 2])], seed=-1),
        raises=InvalidParameterError,
        match=r"seed=-1 is not a non-negative int",
    ),
    # ---- pipeline config (jobs.config.load_config)
    Case(
        "config_unknown_key",
        "jobs.config.load_config",
        "`collect.epsilons` (the old sweep key)",
        _set("collect.epsilons=[1]"),
        raises=ConfigError,
        match=r"collect\.epsilons: unknown key",
    ),
    Case(
        "config_unknown_key_in_file",
        "jobs.config.load_config",
        "YAML with `ingest.maxlen`",
        lambda t: _load_config_text(t, b"ingest:\n  maxlen: 8\n"),
        raises=ConfigError,
        match=r"ingest\.maxlen: unknown key",
    ),
    Case(
        "config_non_utf8",
        "jobs.config.load_config",
        "YAML file with bytes \\xff\\xfe",
        lambda t: _load_config_text(t, b"dataset: \xff\xfe\n"),
        raises=ConfigError,
        match=r"is not valid YAML",
    ),
    Case(
        "config_not_a_mapping",
        "jobs.config.load_config",
        "YAML whose top level is a list",
        lambda t: _load_config_text(t, b"- collect\n- ingest\n"),
        raises=ConfigError,
        match=r"top level must be a mapping",
    ),
    Case(
        "config_epsilon_zero",
        "jobs.config.load_config",
        "collect.epsilon=0",
        _set("collect.epsilon=0"),
        raises=ConfigError,
        match=r"collect\.epsilon: .*finite and in \(0, 100\]",
    ),
    Case(
        "config_epsilon_negative",
        "jobs.config.load_config",
        "collect.epsilon=-1",
        _set("collect.epsilon=-1"),
        raises=ConfigError,
        match=r"collect\.epsilon: .*finite and in \(0, 100\]",
    ),
    Case(
        "config_epsilon_nan",
        "jobs.config.load_config",
        "collect.epsilon=.nan",
        _set("collect.epsilon=.nan"),
        raises=ConfigError,
        match=r"collect\.epsilon: .*finite and in \(0, 100\]",
    ),
    Case(
        "config_epsilon_1e6",
        "jobs.config.load_config",
        "study.epsilons=[1e6]",
        _set("study.epsilons=[1000000]"),
        raises=ConfigError,
        match=r"study\.epsilons: .*finite and in \(0, 100\]",
    ),
    Case(
        "config_max_len_0",
        "jobs.config.load_config",
        "ingest.max_len=0",
        _set("ingest.max_len=0"),
        raises=ConfigError,
        match=r"ingest\.max_len: .*greater than or equal to 1",
    ),
    Case(
        "config_window_reversed",
        "jobs.config.load_config",
        "window_end before window_start",
        _set("ingest.window_start=2014-06-10", "ingest.window_end=2014-06-01"),
        raises=ConfigError,
        match=r"window_end 2014-06-01 is before window_start",
    ),
    Case(
        "config_user_budget_inf",
        "jobs.config.load_config",
        "privacy.budget=.inf",
        _set("privacy.budget=.inf"),
        raises=ConfigError,
        match=r"privacy\.budget: .*must be finite",
    ),
    Case(
        "config_target_epsilon_inf",
        "jobs.config.load_config",
        "train.target_epsilon=.inf",
        _set("train.target_epsilon=.inf"),
        raises=ConfigError,
        match=r"train\.target_epsilon: .*must be finite",
    ),
    Case(
        "config_noise_inf",
        "jobs.config.load_config",
        "train.noise=.inf",
        _set("train.noise=.inf"),
        raises=ConfigError,
        match=r"train\.noise=inf: must be finite",
    ),
    Case(
        "config_negative_seed",
        "jobs.config.load_config",
        "seed=-1",
        _set("seed=-1"),
        raises=ConfigError,
        match=r"seed: .*greater than or equal to 0",
    ),
    Case(
        "config_prq_negative",
        "jobs.config.load_config",
        "study.prq_km=[-1]",
        _set("study.prq_km=[-1]"),
        raises=ConfigError,
        match=r"study\.prq_km: .*finite and > 0 km",
    ),
    Case(
        "config_missing_file",
        "jobs.config.load_config",
        "a config path that does not exist",
        lambda t: __import__("jobs.config").config.load_config(t / "nope.yaml"),
        raises=ConfigError,
        match=r"nope\.yaml does not exist",
    ),
    # ---- training config (models.config.TrainConfig)
    Case(
        "train_unknown_field",
        "models.config.TrainConfig",
        "field `noize`",
        _train_config(noize=0.1),
        raises=ConfigError,
        match=r"unknown train config field\(s\) \['noize'\]",
    ),
    Case(
        "train_noise_nan",
        "models.config.TrainConfig",
        "noise = NaN",
        _train_config(noise=math.nan),
        raises=ConfigError,
        match=r"'noise'=nan: must be finite and > 0",
    ),
    Case(
        "train_noise_zero",
        "models.config.TrainConfig",
        "noise = 0",
        _train_config(noise=0.0),
        raises=ConfigError,
        match=r"'noise'=0\.0: must be finite and > 0",
    ),
    Case(
        "train_target_epsilon_negative",
        "models.config.TrainConfig",
        "target_epsilon = -1",
        _train_config(target_epsilon=-1.0),
        raises=ConfigError,
        match=r"'target_epsilon'=-1\.0: must be finite and > 0",
    ),
    Case(
        "train_target_epsilon_inf",
        "models.config.TrainConfig",
        "target_epsilon = inf",
        _train_config(target_epsilon=math.inf),
        raises=ConfigError,
        match=r"'target_epsilon'=inf: must be finite",
    ),
    Case(
        "train_noise_inf",
        "models.config.TrainConfig",
        "noise = inf",
        _train_config(noise=math.inf),
        raises=ConfigError,
        match=r"'noise'=inf: must be finite",
    ),
    # --- real exports (issue 19) ------------------------------------------------------------
    Case(
        "nul_inside_latitude",
        "ingest_local (telecom csv)",
        "a NUL byte inside a latitude (31.24\\x006946)",
        lambda t: _ingest_csv(t, [b"u1,2014-06-01 11:00:00,,31.24\x006946,121.5,"]),
        reason="control_character",
    ),
    Case(
        "nul_inside_user",
        "ingest_local (telecom csv)",
        "a NUL byte inside a user id (u\\x00bad: merged into user u before)",
        lambda t: _ingest_csv(t, [b"u\x00bad,2014-06-01 11:00:00,,31.25,121.5,"]),
        reason="control_character",
    ),
    Case(
        "escape_character",
        "ingest_local (telecom csv)",
        "an ESC (0x1b) control character in a record",
        lambda t: _ingest_csv(t, [b"u1,2014-06-01 11:00:00,,31.25,121.5,\x1b[0m"]),
        reason="control_character",
    ),
    Case(
        "negative_station_id",
        "jobs.ingest.locmap.load_locations",
        "a location file with station id -5",
        lambda t: load_locations(
            _write(t / "s.csv", b"loc_id,lat,lon\n1,31.2,121.4\n-5,31.3,121.5\n")),
        raises=InputDataError,
        match=r"line 3: location id '-5' is negative",
    ),
    Case(
        "station_id_over_31_bits",
        "jobs.ingest.locmap.load_locations",
        "a location file with station id 3000000000",
        lambda t: load_locations(
            _write(t / "s.csv", b"loc_id,lat,lon\n1,31.2,121.4\n3000000000,31.3,121.5\n")),
        raises=InputDataError,
        match=r"line 3: location id '3000000000' is 2\^31 or more",
    ),
    Case(
        "header_trailing_comma",
        "ingest_local (telecom csv)",
        "header `user,start,end,lat,lon,station,` (a spreadsheet's trailing comma)",
        lambda t: _trailing_comma_header(t),
        check=lambda res: _all_accepted(res),
    ),
    Case(
        "rows_trailing_comma",
        "ingest_local (telecom csv)",
        "every row ends with an extra `,`",
        lambda t: _ingest_csv(t, [], good=[g + b"," for g in GOOD]),
        check=lambda res: _all_accepted(res),
    ),
    Case(
        "telecom_epoch_seconds",
        "ingest_local (telecom csv)",
        "start/end in epoch seconds with ingest.ts_unit: seconds",
        lambda t: _epoch_seconds(t),
        check=lambda res: _all_accepted(res),
    ),
    Case(
        "mixed_utc_offsets",
        "ingest_local (telecom csv)",
        "`+08:00` and `Z` timestamps in one file",
        lambda t: _ingest_csv(t, [], good=[b"u1,2014-06-01T23:30:00+08:00,,31.2,121.4,1",
                                           b"u1,2014-06-02T01:00:00Z,,31.21,121.41,2"]),
        check=lambda res: _all_accepted(res),
    ),
    Case(
        "duplicate_longer_stay",
        "ingest_local (telecom csv)",
        "the same start and station twice, the second ending 3 h later",
        lambda t: _ingest_csv(
            t, [b"u1,2014-06-01 08:00:00,2014-06-01 11:00:00,31.2000,121.4000,1"]),
        reason="duplicate",
    ),
    Case(
        "yaml_section_twice",
        "jobs.config.load_config",
        "two `ingest:` sections in one YAML file",
        lambda t: _load_config_text(t, b"ingest:\n  max_len: 5\ningest:\n  gap_hours: 2\n"),
        raises=ConfigError,
        match=r"key 'ingest' appears twice \(lines 1 and 3\)",
    ),
    Case(
        "gap_hours_1e300",
        "jobs.config.load_config",
        "ingest.gap_hours = 1e300 (an OverflowError inside ingest before)",
        _set("ingest.gap_hours=1e300"),
        raises=ConfigError,
        match=r"ingest\.gap_hours: Input should be less than or equal to 87840",
    ),
    Case(
        "max_len_1e30",
        "jobs.config.load_config",
        "ingest.max_len = 1e30",
        _set("ingest.max_len=1e30"),
        raises=ConfigError,
        match=r"ingest\.max_len",
    ),
    Case(
        "huge_garbage_line",
        "ingest_local (telecom csv)",
        "a 3,000,000-character garbage line (stored whole in quarantine before)",
        lambda t: _ingest_csv(t, [b"x" * 3_000_000]),
        reason="truncated_line",
    ),
    Case(
        "gzip_cut_short",
        "jobs.ingest.readers.pipeline.parse_file",
        "a .csv.gz file cut in half",
        lambda t: _cut_gzip(t),
        raises=InputDataError,
        match=r"not a whole gzip file .* cut short or is corrupt",
    ),
    # --- issue 19, second batch: clock times, dates beyond pandas, quoted lines, grids, disks
    Case(
        "clock_times_date_from_file_name",
        "ingest_local (telecom, tab, no header)",
        "`H.MM` clock times, the day in the file name `cdr_20140601.txt` (ingest.date_from)",
        lambda t: _clock_times(t),
        check=lambda res: _clock_times_ok(res),
    ),
    Case(
        "clock_file_name_without_date",
        "jobs.ingest.readers.pipeline.parse_file",
        "clock times in a file whose name holds no date (`cdr_latest.txt`)",
        lambda t: _clock_times(t, name="cdr_latest.txt"),
        raises=InputDataError,
        match=r"cdr_latest\.txt: the file name does not match ingest\.date_from",
    ),
    Case(
        "clock_ts_format_with_a_date",
        "jobs.config.load_config",
        "date_from with ts_format '%Y-%m-%d %H:%M' (the day would come from two places)",
        _set("ingest.date_from=(\\d{8})", "ingest.ts_format='%Y-%m-%d %H:%M'"),
        raises=ConfigError,
        match=r"ts_format .* may hold the time of day only",
    ),
    Case(
        "date_9999_12_31",
        "ingest_local (telecom csv)",
        "start `9999-12-31 10:00:00` (valid, beyond pandas' 1677-2262 timestamps)",
        lambda t: _ingest_csv(t, [record(ts="9999-12-31 10:00:00")]),
        reason="timestamp_out_of_range",
    ),
    Case(
        "end_sentinel_9999",
        "ingest_local (telecom csv)",
        "end `9999-12-31 23:59:59` (an open-ended stay's sentinel)",
        lambda t: _ingest_csv(
            t, [b"u1,2014-06-01 11:00:00,9999-12-31 23:59:59,31.2500,121.5000,"]),
        reason="timestamp_out_of_range",
    ),
    Case(
        "end_unparsable",
        "ingest_local (telecom csv)",
        "end `soon` (read as a missing end before: the stay silently lost its end)",
        lambda t: _ingest_csv(t, [b"u1,2014-06-01 11:00:00,soon,31.2500,121.5000,"]),
        reason="unparsable_timestamp",
    ),
    Case(
        "epoch_seconds_beyond_range",
        "ingest_local (telecom csv)",
        "ts_unit seconds, start 1e12 (year 33658)",
        lambda t: _epoch_seconds(t, extra=b"u1,1000000000000,,31.21,121.41,2\n"),
        reason="timestamp_out_of_range",
    ),
    Case(
        "quoted_field_spanning_lines",
        "ingest_local (telecom csv, quoting: csv)",
        "a quoted note field holding two line breaks and a blank line",
        lambda t: _quoted(t, b'u1,2014-06-01 11:00:00,,31.25,121.5,4,"line one\n\nline, three"'),
        check=lambda res: _quoted_ok(res),
    ),
    Case(
        "quote_left_open",
        "ingest_local (telecom csv, quoting: csv)",
        "a quote opened and never closed (it must not swallow the rest of the file)",
        lambda t: _quoted(t, b'u1,2014-06-01 11:00:00,,31.25,121.5,4,"never closed'),
        reason="unparsable_line",
    ),
    Case(
        "grid_km_point_outside_box",
        "ingest_local (telecom, ingest.grid_km)",
        "a record outside grid_bbox, no location file (grid_km 1)",
        lambda t: _grid_km(t, [record(lat="40.0", lon="116.4")]),
        reason="too_far",
    ),
    Case(
        "grid_km_without_box",
        "jobs.config.load_config",
        "ingest.grid_km=1 without ingest.grid_bbox (a box from the data leaks its extremes)",
        _set("ingest.grid_km=1"),
        raises=ConfigError,
        match=r"grid_km needs grid_bbox",
    ),
    Case(
        "grid_km_too_many_cells",
        "jobs.ingest.locmap.km_grid",
        "grid_km 0.01 over a 10 x 10 degree box",
        lambda t: __import__("jobs.ingest.locmap").ingest.locmap.km_grid(
            0.01, (30.0, 40.0, 110.0, 120.0)),
        raises=InputDataError,
        match=r"cells, more than 4,000,000: raise grid_km or shrink grid_bbox",
    ),
    Case(
        "root_is_a_file",
        "jobs.spark.session.check_root (before any JVM)",
        "storage.root names a file",
        lambda t: _check_root(_write(t / "data", b"x"), 0),
        raises=TrajprivError,
        match=r"storage\.root .*/data is a file, not a folder",
    ),
    Case(
        "root_read_only",
        "jobs.spark.session.check_root (before any JVM)",
        "storage.root on a read-only file system (os.access says no, as on EROFS)",
        lambda t: _check_root(t / "data", 0, writable=False),
        raises=TrajprivError,
        match=r"storage\.root .*/data: .* is not writable by this user",
    ),
    Case(
        "disk_full_at_start",
        "jobs.spark.session.check_root (before any JVM)",
        "less free space on the root's disk than storage.min_free_mb",
        lambda t: _check_root(t / "data", 1e15),
        raises=TrajprivError,
        match=r"storage\.root .*/data: only \d+ MiB free on its disk",
    ),
    Case(
        "disk_full_during_a_write",
        "jobs.harness.main (a stage's write fails)",
        "OSError ENOSPC while a stage writes under the root",
        lambda t: _stage_fails(t, OSError(28, "No space left on device",
                                          str(t / "data" / "staging" / "part-0.parquet"))),
        check=lambda res: _env_exit_ok(res, "no space left on device at ", "part-0.parquet"),
    ),
    Case(
        "disk_full_inside_spark",
        "jobs.harness.main (a stage's write fails)",
        "a Py4J error whose cause is `java.io.IOException: No space left on device`",
        lambda t: _stage_fails(t, RuntimeError(
            "An error occurred while calling o262.insertInto.\n: org.apache.spark."
            "SparkException: Job aborted.\n\tat org.apache.spark.sql.X\nCaused by: "
            f"java.io.IOException: No space left on device: {t / 'data'}/warehouse/x.parquet"
            "\n\tat java.io.FileOutputStream.writeBytes")),
        check=lambda res: _env_exit_ok(res, "no space left on device at ", "warehouse/x.parquet"),
    ),
    Case(
        "read_only_during_a_write",
        "jobs.harness.main (a stage's write fails)",
        "OSError EROFS (the root remounted read-only mid-run)",
        lambda t: _stage_fails(t, OSError(30, "Read-only file system", str(t / "data" / "runs"))),
        check=lambda res: _env_exit_ok(res, "read-only file system at ", "/data/runs"),
    ),
    # --- real exports, round three: no silent year, merge of users, or end before start
    Case(
        "file_date_without_year_config",
        "jobs.config.load_config",
        "date_from with date_format '%m_%d' (`data_6_14.txt`), no year anywhere",
        _set("ingest.date_from=data_(?P<date>\\d+_\\d+)", "ingest.date_format='%m_%d'",
             "ingest.ts_format='%H.%M'"),
        raises=ConfigError,
        match=r"date_format '%m_%d' holds no year, so every file's date would fall in 1900: "
              r"set ingest\.date_year",
    ),
    Case(
        "file_date_without_year_reader",
        "jobs.ingest.readers.pipeline.parse_file",
        "the same export read without a year (the kernel, no config)",
        lambda t: _clock_times(t, name="data_6_14.txt", date_from=r"data_(?P<date>\d+_\d+)",
                               date_format="%m_%d"),
        raises=InputDataError,
        match=r"data_6_14\.txt: ingest\.date_format '%m_%d' holds no year",
    ),
    Case(
        "file_date_with_date_year",
        "ingest_local (telecom, tab, no header)",
        "`data_2_29.txt` with date_format '%m_%d' and ingest.date_year 2016",
        lambda t: _clock_times(t, name="data_2_29.txt", date_from=r"data_(?P<date>\d+_\d+)",
                               date_format="%m_%d", date_year=2016),
        check=lambda res: _clock_times_ok(res, day="2016-02-29"),
    ),
    Case(
        "file_date_year_from_window",
        "jobs.config.load_config",
        "date_format '%m_%d' with window_start/window_end 2014-06-01..2014-06-30",
        _set("ingest.date_from=data_(?P<date>\\d+_\\d+)", "ingest.date_format='%m_%d'",
             "ingest.ts_format='%H.%M'", "ingest.window_start=2014-06-01",
             "ingest.window_end=2014-06-30"),
        check=lambda cfg: _year_ok(cfg, 2014),
    ),
    Case(
        "user_id_with_surrounding_spaces",
        "ingest_local (telecom csv)",
        "user ids `u1`, ` u1` and `u1 ` in one export",
        lambda t: _ingest_csv(t, [record(user=" u1"), record(user="u1 ", ts="2014-06-01 12:00")]),
        check=lambda res: _users_as_written(res, {"u1", " u1", "u1 "}),
    ),
    Case(
        "end_before_start_same_day",
        "ingest_local (telecom csv)",
        "start `2014-06-01 11:00:00`, end `2014-06-01 10:30:00`",
        lambda t: _ingest_csv(
            t, [b"u1,2014-06-01 11:00:00,2014-06-01 10:30:00,31.2500,121.5000,"]),
        reason="end_before_start",
    ),
    Case(
        "end_before_start_parquet",
        "ingest_local (telecom parquet)",
        "a Parquet record whose end is an hour before its start",
        lambda t: _parquet_end_before_start(t),
        reason="end_before_start",
    ),
    Case(
        "collect_log_window_unset",
        "jobs.collect.stage (log line)",
        "no collect.window_start/window_end: the window as the log line names it",
        lambda t: __import__("jobs.config").config.load_config(None, []).collect.window_text(),
        check=lambda text: _equal(text, "all dates"),
    ),
    # --- check-in arrays (.npy, the Foursquare NYC layout [user, venue, minutes])
    Case(
        "npy_unknown_venue",
        "ingest_local (check-in array)",
        "a row naming venue 99, which the location file does not hold",
        lambda t: _npy(t, [[7, 99, 660]]),
        reason="unknown_location",
    ),
    Case(
        "npy_user_not_a_number",
        "ingest_local (check-in array)",
        "a float array whose user id is NaN",
        lambda t: _npy(t, [[np.nan, 4, 660]]),
        reason="unparsable_line",
    ),
    Case(
        "npy_column_count",
        "jobs.ingest.readers.pipeline.parse_file",
        "ingest.columns names 4 columns of a 3-column array",
        lambda t: _npy(t, [], columns=("user", "location id", "timestamp", "extra")),
        raises=InputDataError,
        match=r"NYC\.npy: the array has 3 columns but ingest\.columns names 4",
    ),
    Case(
        "npy_without_location_file",
        "jobs.ingest.stage.plan_inputs (driver, no Spark)",
        "a check-in array (venue ids, no coordinates) without ingest.locations_path",
        lambda t: _plan_npy(t),
        raises=InputDataError,
        match=r"NYC\.npy: check-in arrays name locations by id, so they need the location file",
    ),
]


def _all_accepted(res: Ingested) -> None:
    assert len(res.tables["quarantine"]) == 0, res.tables["quarantine"]
    assert len(res.tables["points"]) == res.records


def _trailing_comma_header(tmp: Path) -> Ingested:
    path = tmp / "records.csv"
    path.write_bytes(HEADER.rstrip(b"\n") + b",\n" + b"\n".join(GOOD) + b"\n")
    tables, _ = ingest_local([path], ReaderOptions(source="telecom"), STATIONS)
    return Ingested(tables, len(GOOD), len(GOOD))


def _epoch_seconds(tmp: Path, extra: bytes = b"") -> Ingested:
    import datetime as dt

    path = tmp / "records.csv"
    path.write_bytes(HEADER + b"u1,1401609600,1401610800,31.2,121.4,1\n"
                              b"u1,1401613200,,31.21,121.41,2\n" + extra)
    opts = ReaderOptions(source="telecom", ts_unit="seconds", time_origin=dt.datetime(1970, 1, 1))
    tables, _ = ingest_local([path], opts, STATIONS)
    return Ingested(tables, 2 + bool(extra), 2)


def _cut_gzip(tmp: Path):
    import gzip

    from jobs.ingest.readers.pipeline import parse_file

    whole = gzip.compress(HEADER + b"\n".join(GOOD * 20) + b"\n")
    return parse_file(whole[: len(whole) // 2], str(tmp / "records.csv.gz"),
                      ReaderOptions(source="telecom"))


def _clock_times(tmp: Path, name: str = "cdr_20140601.txt", **dating) -> Ingested:
    """A tab-separated, header-less export with H.MM clock times; the day is in the name."""
    path = tmp / name
    path.write_bytes(b"u1\t8.05\t8.20\t121.4000\t31.2000\n"
                     b"u1\t9.30\t\t121.4100\t31.2100\n"
                     b"u1\t23.50\t0.10\t121.4500\t31.2200\n")  # ends after midnight
    dating = dating or {"date_from": r"cdr_(?P<date>\d{8})", "date_format": "%Y%m%d"}
    opts = ReaderOptions(source="telecom", sep="\t", header=False,
                         columns=("user", "start", "end", "lon", "lat"), ts_format="%H.%M",
                         **dating)
    tables, _ = ingest_local([path], opts, STATIONS)
    return Ingested(tables, 3, 3)


def _clock_times_ok(res: Ingested, day: str = "2014-06-01") -> None:
    _all_accepted(res)
    ts = sorted(res.tables["points"]["ts"].astype(str))
    assert ts == [f"{day} 08:05:00", f"{day} 09:30:00", f"{day} 23:50:00"], ts


def _year_ok(cfg, year: int) -> None:
    from jobs.ingest.readers.plan import reader_options

    assert reader_options(cfg.ingest).date_year == year


def _users_as_written(res: Ingested, users: set[str]) -> None:
    _all_accepted(res)
    assert set(res.tables["points"]["user_id"]) == users, set(res.tables["points"]["user_id"])


def _equal(got, want) -> None:
    assert got == want, got


NPY_GOOD = [[7, 1, 480], [7, 2, 540], [7, 3, 600]]  # user 7 at venues 1, 2, 3 from 08:00


def _npy(tmp: Path, bad: list, columns=("user", "location id", "timestamp")) -> Ingested:
    import datetime as dt

    path = tmp / "NYC.npy"
    np.save(path, np.array(NPY_GOOD + bad, dtype=np.float64 if bad and np.isnan(
        np.sum(bad)) else np.int32))
    opts = ReaderOptions(source="checkins", header=False, columns=tuple(columns),
                         ts_unit="minutes", time_origin=dt.datetime(2014, 6, 1))
    tables, _ = ingest_local([path], opts, STATIONS)
    return Ingested(tables, len(NPY_GOOD) + len(bad), len(NPY_GOOD))


def _plan_npy(tmp: Path):
    from jobs.config import load_config
    from jobs.ingest.readers.plan import plan_inputs

    path = tmp / "NYC.npy"
    np.save(path, np.array(NPY_GOOD, dtype=np.int32))
    cfg = load_config(None, [f"storage.root={tmp}", "ingest.source=checkins",
                             f"ingest.path={path}", "ingest.header=false",
                             "ingest.columns=[user, location id, timestamp]",
                             "ingest.ts_unit=minutes"])
    return plan_inputs(cfg)


def _parquet_end_before_start(tmp: Path) -> Ingested:
    import pandas as pd

    from jobs.ingest.locmap import map_points
    from jobs.ingest.readers.arrow import from_arrow
    from jobs.ingest.readers.common import Window
    from jobs.ingest.readers.pipeline import finish_bucket, split_union, union_table
    from jobs.ingest.readers.telecom import parse_frame

    start = pd.to_datetime(["2014-06-01 08:00", "2014-06-01 09:00", "2014-06-01 10:00"])
    batch = pd.DataFrame({"user": ["u1"] * 3, "start": start,
                          "end": [start[0] + pd.Timedelta(minutes=20), pd.NaT,
                                  start[2] - pd.Timedelta(hours=1)],
                          "lat": [31.20, 31.21, 31.22], "lon": [121.40, 121.41, 121.45]})
    mapped = map_points(parse_frame(batch, str(tmp / "part-0.parquet"), Window()), STATIONS, 1.0)
    tables = split_union(from_arrow(union_table(finish_bucket(mapped, ReaderOptions()))))
    return Ingested(tables, 3, 2)


def _quoted(tmp: Path, bad: bytes) -> Ingested:
    """A quoted export with a free-text `note` column after the station."""
    path = tmp / "records.csv"
    good = [b'"u1","2014-06-01 08:00:00","2014-06-01 08:20:00",31.2,121.4,1,"a, b"',
            b'u1,2014-06-01 09:00:00,,31.21,121.41,2,""',
            b'u1,2014-06-01 10:00:00,,31.22,121.45,3,"say ""hi"""']
    path.write_bytes(b"user,start,end,lat,lon,station,note\n" + b"\n".join([good[0], bad,
                                                                             *good[1:]]) + b"\n")
    tables, _ = ingest_local([path], ReaderOptions(source="telecom", quoted=True), STATIONS)
    return Ingested(tables, 4, 3)


def _quoted_ok(res: Ingested) -> None:
    _all_accepted(res)
    pts = res.tables["points"].sort_values("ts")
    assert pts["loc_id"].tolist() == [1, 2, 3, 4]  # the spanning record is one record, line 3


def _grid_km(tmp: Path, bad: list[bytes]) -> Ingested:
    from jobs.ingest.locmap import km_grid

    path = tmp / "records.csv"
    path.write_bytes(HEADER + b"\n".join([*GOOD, *bad]) + b"\n")
    grid = km_grid(1.0, (31.0, 31.5, 121.0, 121.8))
    tables, _ = ingest_local([path], ReaderOptions(source="telecom"), grid)
    return Ingested(tables, len(GOOD) + len(bad), len(GOOD))


def _check_root(root: Path, min_free_mb: float, writable: bool = True) -> None:
    import os
    from unittest import mock

    from jobs.spark.session import check_root

    if writable:
        return check_root(root, min_free_mb)
    with mock.patch.object(os, "access", lambda path, mode: False):
        return check_root(root, min_free_mb)


def _stage_fails(tmp: Path, exc: Exception) -> tuple[int, str]:
    """`trajpriv <stage>` (harness.main) whose stage raises `exc`, with a stand-in session
    (no JVM): the exit code and what it printed on stderr."""
    import io
    from unittest import mock

    import jobs.spark.session as session
    from jobs import harness

    def stage(spark, cfg, ctx):
        raise exc

    err = io.StringIO()
    with (mock.patch.object(session, "get_spark", lambda cfg: None),
          mock.patch.object(session, "stop_spark", lambda spark: None),
          contextlib.redirect_stderr(err)):
        code = harness.main("ingest", stage, ["--set", f"storage.root={tmp / 'data'}"])
    return code, err.getvalue()


def _env_exit_ok(res: tuple[int, str], what: str, path: str) -> None:
    code, err = res
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("trajpriv ")]  # no log
    assert code == 2 and len(lines) == 1 and err.strip().endswith(lines[0]), err
    assert lines[0].startswith(f"trajpriv ingest: error: {what}") and path in lines[0], err
    assert "storage.root" in lines[0], err


def outcome(case: Case, tmp: Path) -> str:
    """Run a case and describe what happened (for the markdown catalogue)."""
    try:
        with time_limit(LIMIT_S):
            res = case.run(tmp)
    except TrajprivError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}" + (
            " " + " ".join(s.strip() for s in str(exc).splitlines()[1:]) if "\n" in str(exc) else ""
        )
    except Exception as exc:  # noqa: BLE001 (reported, the test fails on it)
        return f"UNTYPED {type(exc).__name__}: {exc}"
    if case.xfail:
        return f"**KNOWN GAP (xfail)**: accepted silently; {case.xfail}"
    if isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], int):  # (exit, stderr)
        return f"exit {res[0]}: `{res[1].strip().splitlines()[-1]}`"
    if isinstance(res, Ingested):
        q = res.quarantine_reasons
        if q:
            return (
                f"quarantine `{', '.join(q)}`; read {res.records} = accepted "
                f"{len(res.tables['points'])} + quarantined {len(q)}"
            )
        if case.id == "unknown_location_id_near_station":
            return "accepted: mapped to the nearest station within max_distance_km (documented)"
        if case.id == "user_id_with_surrounding_spaces":
            users = sorted(res.tables["points"]["user_id"].unique())
            return f"accepted: {len(users)} users {users}, kept as written (none merged)"
        return (
            f"accepted: {len(res.tables['points']):,} points, "
            f"{len(res.tables['trajectories']):,} trajectories"
        )
    return "accepted: " + {
        "single_point_trajectory": "one EM draw over P with the whole epsilon",
        "location_set_of_one_point": "every output is the only location (0-LDP, no NaN)",
        "epsilon_1e6": "output equals the input (no overflow or NaN)",
        "unknown_location_id_near_station": "mapped to the nearest station (documented)",
        "file_date_year_from_window": "the file dates' year is the window's, 2014",
    }.get(case.id, repr(res)[:80])


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        )
        for c in CASES
    ],
)
def test_bad_input(case: Case, tmp_path: Path):
    with time_limit(LIMIT_S):
        if case.raises is not None:
            with pytest.raises(case.raises, match=case.match) as info:
                case.run(tmp_path)
            assert isinstance(info.value, TrajprivError)
            return
        res = case.run(tmp_path)
    if case.reason is not None:
        assert isinstance(res, Ingested)
        q = res.tables["quarantine"]
        # exactly the bad record is quarantined, with the expected reason; nothing is lost
        assert res.quarantine_reasons == [case.reason], q[["line", "record", "reason"]]
        assert len(res.tables["points"]) == res.good
        assert len(res.tables["points"]) + len(q) == res.records
    else:
        assert case.check is not None, "a case must raise, quarantine or be checked"
        case.check(res)


def test_catalogue_is_big_enough():
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.spark
def test_missing_table_is_input_data_error(spark):
    from jobs.spark.catalog import read_table

    with (
        time_limit(LIMIT_S),
        pytest.raises(
            InputDataError, match=r"table trajpriv_raw\.no_such_table does not exist: run the "
        ),
    ):
        read_table(spark, "trajpriv_raw.no_such_table")


MISSING_TABLE_ROW = (
    "missing_table",
    "jobs.spark.catalog.read_table (Spark)",
    "`trajpriv_raw.no_such_table`",
    "InputDataError: table trajpriv_raw.no_such_table does not exist: run the "
    "stage that writes it first (datagen/ingest for trajpriv_raw.*, "
    "collect/synthesize/evaluate for trajpriv_pub.*)",
)


def markdown() -> str:
    import tempfile

    lines = ["| # | input | layer | outcome |", "|---|---|---|---|"]
    rows = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(
                (case.id, case.layer, case.what, outcome(case, Path(tmp)).replace(tmp, "<tmp>"))
            )
    rows.append(MISSING_TABLE_ROW)
    for i, (cid, layer, what, out) in enumerate(rows, 1):
        what, out = what.replace("|", "\\|"), out.replace("|", "\\|")
        lines.append(f"| {i} | {what} (`{cid}`) | {layer} | {out} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(markdown())

"""Home re-identification: raw data finds the homes, UNIFORM output does not, and the same rule
is applied to both. Synthetic city: 60 users on a 40 x 40 km box, homes at least 3 km apart in
expectation; night points at home, more day points at work."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.attacks.home import (
    density_mode,
    haversine_km,
    home_coverage,
    home_reidentification,
    infer_homes,
    night_mask,
)
from udfs.collect import perturb
from udfs.space import LocationSpace


def _city(n_users: int = 60, seed: int = 0):
    """Locations on a grid (P), users with a home and a work location in P; raw points with
    local timestamps: 3 night check-ins at home, 5 day check-ins at work, 2 elsewhere."""
    rng = np.random.default_rng(seed)
    lat, lon = np.meshgrid(41.7 + np.arange(40) * 0.009, -87.9 + np.arange(40) * 0.012)
    space = LocationSpace.from_latlon(lat.ravel(), lon.ravel())
    rows = []
    for u in range(n_users):
        home, work = rng.choice(space.n, 2, replace=False)
        locs = [home] * 3 + [work] * 5 + list(rng.choice(space.n, 2))
        hours = [23, 2, 21] + [10, 11, 14, 15, 16] + [12, 18]
        for i, (p, h) in enumerate(zip(locs, hours, strict=True)):
            rows.append((u, p, pd.Timestamp("2010-05-01") + pd.Timedelta(days=i, hours=h)))
    raw = pd.DataFrame(rows, columns=["who", "loc", "ts"])
    raw["lat"], raw["lon"] = space.coords[raw["loc"], 0], space.coords[raw["loc"], 1]
    return space, raw


def _published(space, raw, mechanism, epsilon=4.0, seed=0):
    out = []
    for u, g in raw.groupby("who"):  # one trajectory of all the user's points, in time order
        ids = perturb([g.sort_values("ts")["loc"].to_numpy()], space, epsilon, mechanism,
                      np.random.SeedSequence([seed, int(u)]))[0]
        out.append(pd.DataFrame({"who": u, "lat": space.coords[ids, 0],
                                 "lon": space.coords[ids, 1]}))
    return pd.concat(out, ignore_index=True)


def test_raw_and_uniform_are_the_two_ends():
    space, raw = _city()
    truth_rule = home_reidentification(raw, raw[["who", "lat", "lon"]])
    # published raw has no time of day: the rule finds the most frequent place, here work
    assert truth_rule["share_within_km"] < 0.2
    night = raw[night_mask(raw["ts"])][["who", "lat", "lon"]]
    assert home_reidentification(raw, night)["share_within_km"] == 1.0
    uni = home_reidentification(raw, _published(space, raw, "uniform"))
    # chance that a uniform point of a 36 x 40 km box falls within 1 km of home: ~0.2 %
    assert uni["share_within_km"] < 0.1
    assert uni["n_users"] == 60 and uni["share_lo"] <= uni["share_within_km"] <= uni["share_hi"]


def test_homes_from_night_rows_of_synthetic_days():
    # synthetic days: a `night` flag (slots 0-11, 44-47); home at location A, day at B
    day = pd.DataFrame({"who": 0, "slot": np.arange(48)})
    day["night"] = day["slot"].isin(list(range(12)) + list(range(44, 48)))
    day["lat"] = np.where(day["night"], 41.80, 41.90)
    day["lon"] = -87.70
    h = infer_homes(day)
    assert (h["lat"].item(), h["lon"].item()) == (41.80, -87.70)
    cov = home_coverage(h, pd.DataFrame({"lat": [41.805, 42.5], "lon": [-87.70, -87.7]}))
    assert cov == 1.0  # 0.56 km away


def test_density_mode_oracle():
    # a cluster of 3 points within 300 m beats a repeated far-away point
    lat = np.array([41.0, 41.001, 41.002, 41.5, 41.5])
    lon = np.array([-87.0, -87.0, -87.0, -87.0, -87.0])
    assert density_mode(lat, lon, 0.5) == 1  # middle of the cluster: smallest spread
    assert haversine_km(41.0, -87.0, 41.009, -87.0) == pytest.approx(1.0008, abs=1e-3)


def test_users_without_published_points_count_as_missed():
    raw = pd.DataFrame({"who": [1, 2], "lat": [41.0, 41.2], "lon": [-87.0, -87.0],
                        "night": [True, True]})
    res = home_reidentification(raw, raw.iloc[:1][["who", "lat", "lon"]], n_boot=50)
    assert res["share_within_km"] == 0.5 and res["covered_users"] == 1

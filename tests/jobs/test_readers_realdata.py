"""Readers on the real files in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from jobs.ingest.locmap import Grid, load_locations
from jobs.ingest.readers import slots48
from jobs.ingest.readers.common import Window
from jobs.ingest.readers.pipeline import ReaderOptions, ingest_local

pytestmark = pytest.mark.realdata


def test_plt_fixture_244_points(shared_data):
    path = shared_data / "geolife_plt" / "000" / "Trajectory" / "20081024020959.plt"
    tables, _ = ingest_local([path], ReaderOptions(source="plt"), Grid(0.01))
    assert len(tables["points"]) == 244 and len(tables["quarantine"]) == 0
    assert set(tables["points"]["user_id"]) == {"000"}
    gps = load_locations(shared_data / "geolife_pategail" / "gps")
    tables, _ = ingest_local([path], ReaderOptions(source="plt", max_distance_km=1.0), gps)
    assert len(tables["points"]) == 244
    assert tables["trajectories"]["n"].sum() >= 1


def test_chi_checkins(shared_data):
    path = shared_data / "ldp_checkins" / "chi_checkins.csv"
    tables, locs = ingest_local([path], ReaderOptions(source="checkins"), None)
    n_lines = sum(1 for line in path.read_bytes().splitlines()[1:] if line.strip())
    assert n_lines == 36094
    q = tables["quarantine"]
    assert len(tables["points"]) + len(q) == n_lines
    assert set(q["reason"]) == {"duplicate"} and len(q) == 5  # 5 exact repeats in the file
    assert len(locs) == 1000
    assert tables["points"]["user_id"].nunique() == 3990
    assert locs.diameter_km() == pytest.approx(50.65, abs=0.01)


def test_cps_checkins(shared_data):
    base = shared_data / "ldp_checkins"
    locs = load_locations(base / "cps_campus_locations.csv")
    opts = ReaderOptions(
        source="checkins",
        ts_unit="minutes",
        order="file",
        time_origin=dt.datetime(2020, 1, 1),
        max_distance_km=0.5,
    )
    tables, _ = ingest_local([base / "cps_campus_checkins.csv"], opts, locs)
    assert len(locs) == 262 and locs.diameter_km() == pytest.approx(3.75, abs=0.01)
    assert len(tables["points"]) == 22098 and len(tables["quarantine"]) == 0
    traj = tables["trajectories"]
    assert traj["user_id"].nunique() == 4000
    assert traj["n"].max() <= 8


def test_geolife_48_slots(shared_data):
    folder = shared_data / "geolife_pategail"
    frame, gps = slots48.read_slots(folder, None, dt.date(2008, 1, 1))
    assert frame["reason"].isna().all()
    assert len(frame) == 5616 and frame["user_id"].nunique() == 83
    real = np.loadtxt(folder / "real.data", dtype=int)
    assert np.array_equal(np.stack(frame["slots"].to_numpy()), real)
    assert len(load_locations(gps)) == 4210


def test_window_applies_to_real_checkins(shared_data):
    path = shared_data / "ldp_checkins" / "chi_checkins.csv"
    opts = ReaderOptions(source="checkins", window=Window(dt.date(2010, 1, 1), None))
    tables, _ = ingest_local([path], opts, None)
    q = tables["quarantine"]
    assert (q["reason"] == "outside_window").sum() > 0
    assert len(q) + len(tables["points"]) == 36094

"""Station layouts of the generator: real list (filtered, weighted) and generated clusters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from haversine import Unit, haversine

from jobs.datagen.stations import (
    LAYOUT_BOX,
    StationIndex,
    generate_layout,
    load_stations,
    nearest_neighbour_km,
)
from udfs.errors import InputDataError


def test_generated_layout_shape_and_spacing():
    table = generate_layout(3233, seed=3)
    assert len(table) == 3233 and list(table["loc_id"]) == list(range(3233))
    assert table["lat"].between(LAYOUT_BOX[0], LAYOUT_BOX[1]).all()
    assert table["lon"].between(LAYOUT_BOX[2], LAYOUT_BOX[3]).all()
    assert table["weight"].sum() == pytest.approx(1.0)
    nn = nearest_neighbour_km(table)
    # Design target: median nearest-neighbour spacing about 0.5 km (seeds 1..5 give 0.50-0.52).
    assert 0.4 <= np.median(nn) <= 0.6
    assert nn.min() >= 0.149  # dart throwing keeps masts 0.15 km apart (planar km)


def test_generated_layout_is_deterministic_per_seed():
    a, b, c = generate_layout(300, seed=1), generate_layout(300, seed=1), generate_layout(300, 2)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["lat"], c["lat"])


def test_nearest_neighbour_agrees_with_haversine():
    table = generate_layout(50, seed=4)
    nn = nearest_neighbour_km(table)
    pts = list(zip(table["lat"], table["lon"], strict=True))
    oracle = [min(haversine(p, q, unit=Unit.KILOMETERS) for q in pts if q != p) for p in pts]
    np.testing.assert_allclose(nn, oracle, rtol=5e-3)  # planar projection vs great circle


def test_usage_weights_join_to_nearest_station(tmp_path):
    stations = tmp_path / "stations.csv"
    stations.write_text(
        "id,latitude,longitude\n0,31.20,121.40\n1,31.25,121.45\n2,31.30,121.50\n3,40.0,116.4\n"
    )
    usage = tmp_path / "usage.csv"
    usage.write_text(
        "ID,latitude,longitude,UserAccessTime(min),UserAccessNum,worktime(min)\n"
        "1,31.2001,121.4001,5,30,1\n"  # -> station 0
        "2,31.2500,121.4500,5,10,1\n"  # -> station 1
        "3,31.2499,121.4501,5,,1\n"  # no count: ignored
        "4,22.5,114.2,5,999,1\n"  # outside the box: ignored
    )
    table = load_stations(stations, usage)
    assert len(table) == 3  # Beijing dropped by the box
    # Station 2 has no usage row: it gets the smallest observed count (10).
    np.testing.assert_allclose(table["weight"], np.array([30, 10, 10]) / 50)


def test_missing_station_file_names_it(tmp_path):
    with pytest.raises(InputDataError, match="stations file .*nope.csv does not exist"):
        load_stations(tmp_path / "nope.csv")


def test_station_file_without_coordinates(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputDataError, match=r"lacks columns \['latitude', 'longitude'\]"):
        load_stations(bad)


def test_index_neighbours_are_nearest_first():
    table = generate_layout(200, seed=9)
    index = StationIndex.from_table(table)
    d = np.hypot(*(index.xy[index.neighbours] - index.xy[:, None, :]).transpose(2, 0, 1))
    assert (np.diff(d, axis=1) >= -1e-12).all()
    assert (index.neighbours != np.arange(200)[:, None]).all()


@pytest.mark.realdata
def test_real_shanghai_stations(shared_data):
    folder = shared_data / "shanghai_telecom"
    table = load_stations(folder / "base_stations.csv", folder / "base_station_usage_june2014.csv")
    assert len(table) == 3009  # data README: 3,009 stations inside the Shanghai box
    assert table["weight"].sum() == pytest.approx(1.0)
    assert table["weight"].max() / table["weight"].min() > 100  # real popularity is skewed


def test_missing_station_list_falls_back_to_a_generated_layout(tmp_path, caplog):
    from jobs.config import load_config
    from jobs.datagen.stage import station_table

    cfg = load_config(
        None, [f"datagen.stations_csv={tmp_path / 'absent.csv'}", "datagen.n_stations=120"]
    )
    with caplog.at_level("WARNING", logger="jobs.datagen.stage"):
        table, source = station_table(cfg)
    assert len(table) == 120 and source == "generated: 120 stations"
    assert "absent.csv is absent" in caplog.text

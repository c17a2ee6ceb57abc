"""The ingest guide's recipes (docs/guides/ingest.md), run as written: each YAML block under a
`<!-- recipe: NAME -->`
marker is loaded as the config (only its input paths pointed at exports this test writes) and
ingested through the local path (`jobs.ingest.local`, the same plan, readers, mapping and
shaping as `trajpriv ingest`). No Spark."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from jobs.config import load_config
from jobs.ingest.local import ingest_config_local
from jobs.ingest.locmap import km_grid
from udfs.errors import InputDataError

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "ingest.md"


def recipe(name: str) -> str:
    """The YAML of the ingest guide's block marked `<!-- recipe: name -->`."""
    text = GUIDE.read_text(encoding="utf-8")
    m = re.search(rf"<!-- recipe: {re.escape(name)} -->\s*```yaml\n(.*?)```", text, re.S)
    assert m, f"{GUIDE.name} has no recipe {name!r}"
    return m.group(1)


def config(tmp: Path, name: str, **paths: Path):
    conf = tmp / f"{name}.yaml"
    conf.write_text(recipe(name), encoding="utf-8")
    sets = [f"storage.root={tmp / 'root'}"] + [f"ingest.{k}={v}" for k, v in paths.items()]
    return load_config(conf, sets)


def test_telecom_cdr_recipe_tab_separated_headerless_clock_times(tmp_path):
    cdr = tmp_path / "cdr"
    cdr.mkdir()
    (tmp_path / "stations.csv").write_text(
        "station_id,lat,lon\n1,31.2000,121.4000\n2,31.2100,121.4100\n3,31.2200,121.4500\n")
    (cdr / "cdr_20140601.txt").write_text(
        "u1\t8.05\t8.20\t121.4000\t31.2000\n"
        "u1\t9.30\t9.45\t121.4100\t31.2100\n"
        "u2\t23.50\t0.10\t121.4500\t31.2200\n")  # ends after midnight: the next day
    (cdr / "cdr_20140602.txt").write_text(
        "u1\t7.00\t7.05\t121.4500\t31.2200\n"
        "u1\t7.xx\t\t121.4500\t31.2200\n")  # not a clock time
    cfg = config(tmp_path, "telecom-cdr", path=cdr, locations_path=tmp_path / "stations.csv")
    tables, locations = ingest_config_local(cfg)
    points = tables["points"].sort_values(["user_id", "ts"])
    assert points["ts"].astype(str).tolist() == [
        "2014-06-01 08:05:00", "2014-06-01 09:30:00", "2014-06-02 07:00:00",
        "2014-06-01 23:50:00"]
    assert points["loc_id"].tolist() == [1, 2, 3, 3]
    assert tables["quarantine"]["reason"].tolist() == ["unparsable_timestamp"]
    assert tables["quarantine"]["line"].tolist() == [2]
    assert len(points) + len(tables["quarantine"]) == 5  # read = accepted + quarantined
    traj = tables["trajectories"].sort_values(["user_id", "date"])
    assert [list(t) for t in traj["loc_ids"]] == [[1, 2], [3], [3]]
    assert len(locations) == 3


def test_telecom_cdr_recipe_refuses_a_file_without_a_date_in_its_name(tmp_path):
    cdr = tmp_path / "cdr"
    cdr.mkdir()
    (tmp_path / "stations.csv").write_text("station_id,lat,lon\n1,31.2,121.4\n")
    (cdr / "cdr_20140601.txt").write_text("u1\t8.05\t8.20\t121.4\t31.2\n")
    (cdr / "cdr_latest.txt").write_text("u1\t9.05\t9.20\t121.4\t31.2\n")
    cfg = config(tmp_path, "telecom-cdr", path=cdr, locations_path=tmp_path / "stations.csv")
    with pytest.raises(InputDataError, match=r"cdr_latest\.txt: the file name does not match"):
        ingest_config_local(cfg)


def test_taxi_gps_recipe_lon_lat_order_and_a_grid_without_a_location_set(tmp_path):
    taxi = tmp_path / "taxi"
    taxi.mkdir()
    (taxi / "1.txt").write_text(
        "1,2008-02-02 15:36:08,116.51172,39.92123\n"
        "1,2008-02-02 15:46:08,116.51135,39.93883\n"
        "1,2008-02-02 15:56:08,116.51627,39.91034\n")
    (taxi / "2.txt").write_text(
        "2,2008-02-02 13:33:52,116.36422,39.88781\n"
        "2,2008-02-02 13:37:16,121.47000,31.23000\n")  # Shanghai: outside the Beijing box
    cfg = config(tmp_path, "taxi-gps", path=taxi)
    assert cfg.ingest.locations_path is None and cfg.ingest.grid_km == 1
    tables, locations = ingest_config_local(cfg)
    grid = km_grid(1, (39.4, 40.6, 115.7, 117.4))
    rows, cols = grid.shape
    assert len(locations) == rows * cols  # every cell of the public box, none from the data
    points = tables["points"]
    assert len(points) == 4
    assert tables["quarantine"]["reason"].tolist() == ["too_far"]
    # each point is in its cell: the centre within half a cell's diagonal (about 0.71 km)
    ids = points["loc_id"].to_numpy(np.int64)
    clat, clon = grid.centres(ids)
    from udfs.geo import haversine_km

    dist = haversine_km(points["lat"].to_numpy(float), points["lon"].to_numpy(float), clat, clon)
    assert (dist < 0.72).all(), dist
    # the cells are about 1 km on each side
    lat_step = (grid.centres(np.array([cols]))[0] - grid.centres(np.array([0]))[0])[0]
    lon_step = (grid.centres(np.array([1]))[1] - grid.centres(np.array([0]))[1])[0]
    assert haversine_km(40.0, 116.0, 40.0 + lat_step, 116.0) == pytest.approx(1.0, rel=1e-3)
    assert haversine_km(40.0, 116.0, 40.0, 116.0 + lon_step) == pytest.approx(1.0, rel=2e-2)

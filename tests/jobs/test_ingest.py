"""`trajpriv ingest` on Spark: the five tables, the invariant, reruns and bad input."""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from jobs.config import IngestConfig
from jobs.harness import execute
from jobs.ingest import stage as ingest
from jobs.ingest.locmap import load_locations
from jobs.ingest.readers.pipeline import ingest_local
from udfs.errors import InputDataError

pytestmark = pytest.mark.spark

HEADER = "user,start,end,lat,lon,loc_id\n"
STATIONS = "loc_id,lat,lon\n10,31.20,121.40\n11,31.23,121.47\n12,31.30,121.50\n"


def _telecom_files(folder: Path) -> list[Path]:
    (folder / "records").mkdir(parents=True)
    (folder / "stations.csv").write_text(STATIONS)
    day = [
        "1,2014-06-01 08:00:00,2014-06-01 08:05:00,31.2001,121.4001,10",
        "1,2014-06-01 08:30:00,2014-06-01 08:35:00,31.2301,121.4702,11",
        "1,2014-06-01 08:40:00,,31.2301,121.4702,11",
        "1,2014-06-01 15:00:00,,31.3001,121.5001,",
        "2,2014-06-02 09:00:00,,31.2001,121.4001,10",
        "2,2014-06-02 09:00:00,,31.2001,121.4001,10",  # duplicate
        "2,2014-06-02 10:00:00,,45.0,121.4,",  # too far
        "3,2014-06-02 10:00:00,,nan,121.4,",  # missing coordinate
        "3,bad time,,31.2,121.4,",  # unparsable timestamp
        "3,2014-06-03 10:00:00,,0,0,",  # null island
    ]
    a = folder / "records" / "part-00000.csv"
    b = folder / "records" / "part-00001.csv"
    a.write_text(HEADER + "\n".join(day[:5]) + "\n")
    b.write_bytes((HEADER + "\n".join(day[5:]) + "\n4,2014-06-0").encode() + b"\n5,\xff\n")
    return [a, b]


def _cfg(spark_config, dataset: str, **ingest_fields):
    return spark_config.model_copy(
        update={"dataset": dataset, "ingest": IngestConfig(**ingest_fields)}
    )


def _run(spark, cfg):
    return execute("ingest", ingest.run, cfg, argparse.Namespace(), spark)


def _rows(spark, table: str, dataset: str) -> pd.DataFrame:
    return spark.sql(f"SELECT * FROM {table} WHERE dataset = '{dataset}'").toPandas()


def test_telecom_tables_invariant_and_rerun(spark, spark_config):
    landing = spark_config.storage.landing / "tele"
    files = _telecom_files(landing)
    cfg = _cfg(spark_config, "tele", source="telecom", max_distance_km=0.5, buckets=2)
    figures = _run(spark, cfg)
    n_lines = sum(len([ln for ln in f.read_bytes().split(b"\n")[1:] if ln.strip()]) for f in files)
    assert figures["records_read"] == n_lines == 12
    assert figures["records_accepted"] + figures["records_quarantined"] == n_lines
    assert figures["quarantined_by_reason"] == {
        "duplicate": 1,
        "missing_coordinate": 1,
        "non_utf8": 1,
        "null_island": 1,
        "too_far": 1,
        "truncated_line": 1,
        "unparsable_timestamp": 1,
    }

    # The Spark job equals the pandas pipeline on the same files (same kernels, other adapter).
    oracle, _ = ingest_local(
        files, ingest.reader_options(cfg.ingest), load_locations(landing / "stations.csv")
    )
    points = _rows(spark, "trajpriv_raw.points", "tele")
    assert len(points) == len(oracle["points"]) == 5
    assert sorted(points["loc_id"]) == sorted(oracle["points"]["loc_id"])
    traj = _rows(spark, "trajpriv_raw.trajectories", "tele").sort_values(["user_id", "traj_id"])
    # user 1: 10 -> 11 (merged stay 08:30-08:40), then 12 at 15:00 is > 3 h later: split.
    assert [list(x) for x in traj["loc_ids"]] == [[10, 11], [12], [10]]
    assert str(traj["date"].iloc[0]) == "2014-06-01"
    slots = _rows(spark, "trajpriv_raw.slot_days", "tele")
    assert len(slots) == 2 and all(len(s) == 48 for s in slots["slots"])

    # Whole tables against the oracle: numbering files, partitioning by user and the union
    # (Arrow) in between change nothing.
    def keyed(frame, cols):
        def value(col, x):
            if col in ("loc_ids", "slots"):
                return tuple(int(v) for v in x)
            return int(x) if col == "traj_id" else str(x)  # the oracle's union has float ids

        return sorted(
            tuple(value(c, x) for c, x in zip(cols, row, strict=True))
            for row in frame[cols].itertuples(index=False)
        )

    tcols = ["user_id", "traj_id", "loc_ids"]
    assert keyed(traj, tcols) == keyed(oracle["trajectories"], tcols)
    assert keyed(slots, ["user_id", "slots"]) == keyed(oracle["slot_days"], ["user_id", "slots"])
    assert sorted(_rows(spark, "trajpriv_raw.quarantine", "tele")["record"]) == sorted(
        oracle["quarantine"]["record"]
    )
    q = _rows(spark, "trajpriv_raw.quarantine", "tele")
    assert len(q) == 7
    assert q["source"].str.contains(r"part-00001\.csv:\d+$").all()
    assert set(_rows(spark, "trajpriv_pub.locations", "tele")["loc_id"]) == {10, 11, 12}

    again = _run(spark, cfg)  # a rerun replaces, never appends
    assert again["records_read"] == 12
    assert len(_rows(spark, "trajpriv_raw.points", "tele")) == 5

    # Rerun from Parquet records with two valid rows: the dataset now holds exactly those.
    pq_dir = landing / "parquet"
    pq_dir.mkdir()
    pd.DataFrame(
        {
            "user": [7, 7],
            "start": pd.to_datetime(["2014-06-05 08:00", "2014-06-05 09:00"]),
            "end": pd.to_datetime(["2014-06-05 08:10", "2014-06-05 09:10"]),
            "lat": [31.2001, 31.3001],
            "lon": [121.4001, 121.5001],
            "loc_id": [10, 12],
        }
    ).to_parquet(pq_dir / "part-0.parquet", coerce_timestamps="us")
    cfg = _cfg(spark_config, "tele", source="telecom", path=pq_dir, max_distance_km=0.5, buckets=2)
    figures = _run(spark, cfg)
    assert (figures["records_read"], figures["records_quarantined"]) == (2, 0)
    points = _rows(spark, "trajpriv_raw.points", "tele")
    assert sorted(points["loc_id"]) == [10, 12] and set(points["user_id"]) == {"7"}
    assert _rows(spark, "trajpriv_raw.quarantine", "tele").empty
    traj = _rows(spark, "trajpriv_raw.trajectories", "tele")
    assert [list(x) for x in traj["loc_ids"]] == [[10, 12]]
    assert list(traj["ts"].iloc[0]) == list(
        pd.to_datetime(["2014-06-05 08:00", "2014-06-05 09:00"])
    )


def test_plt_folder_and_slots48(spark, spark_config, tmp_path):
    for user in ("000", "001"):
        folder = tmp_path / "plt" / user / "Trajectory"
        folder.mkdir(parents=True)
        lines = "".join(
            f"40.{i:04d},116.3198,0,492,39745.09,2008-10-24,0{i // 60}:{i % 60:02d}:00\n"
            for i in range(0, 300, 7)
        )
        (folder / "a.plt").write_text("h\nh\nh\nh\nh\nh\n" + lines + "40.01,116.3")
    cfg = _cfg(spark_config, "plt_t", source="plt", path=tmp_path / "plt", buckets=2, grid_deg=0.01)
    figures = _run(spark, cfg)
    assert figures["records_read"] == 2 * (len(range(0, 300, 7)) + 1)
    assert figures["quarantined_by_reason"] == {"truncated_line": 2}
    locs = _rows(spark, "trajpriv_pub.locations", "plt_t")
    assert set(locs["loc_id"]) == set(_rows(spark, "trajpriv_raw.points", "plt_t")["loc_id"])

    slots = tmp_path / "s48"
    slots.mkdir()
    (slots / "gps").write_text("40.00 116.25\n40.01 116.25\n40.02 116.25\n")
    (slots / "real.data").write_text(
        " ".join(["0"] * 20 + ["1"] * 28) + "\n" + " ".join(["2"] * 48) + "\n1 2 3\n"
    )
    cfg = _cfg(
        spark_config, "s48_t", source="slots48", path=slots, time_origin=dt.datetime(2008, 1, 1)
    )
    figures = _run(spark, cfg)
    assert (figures["records_read"], figures["records_accepted"]) == (3, 2)
    assert figures["slot_days"] == 2 and figures["points"] == 96
    traj = _rows(spark, "trajpriv_raw.trajectories", "s48_t").sort_values("user_id")
    assert [list(x) for x in traj["loc_ids"]] == [[0, 1], [2]]


def test_checkins_the_papers_way_gap_segments_min_len_and_dense_ids(spark, spark_config,
                                                                    tmp_path):
    """Measured defects: trajectories were always cut at midnight and one-point pieces kept;
    check-ins' own location ids (Gowalla's run to 7 digits) were published as loc_id, which
    `collect` refuses (it indexes P by loc_id)."""
    path = tmp_path / "checkins.csv"
    path.write_text(
        "User ID,Latitude,Longitude,Timestamp,Location ID\n"
        "7,41.80,-87.60,2010-09-01 23:30:00,144390\n"
        "7,41.81,-87.61,2010-09-02 00:20:00,9943\n"  # after midnight: same trajectory
        "7,41.82,-87.62,2010-09-02 09:00:00,555\n"  # 8.7 h later: alone, under min_len
        "8,41.80,-87.60,2010-09-03 10:00:00,144390\n"
        "8,41.82,-87.62,2010-09-03 11:00:00,555\n"
    )
    cfg = _cfg(spark_config, "chi_t", source="checkins", path=path, segment="gap", min_len=2,
               buckets=2)
    figures = _run(spark, cfg)
    assert figures["records_read"] == figures["records_accepted"] == 5
    assert figures["trajectories"] == 2
    assert figures["trajectories_dropped"] == 1
    assert figures["trajectories_dropped_by_reason"] == {"shorter_than_min_len": 1}
    locs = _rows(spark, "trajpriv_pub.locations", "chi_t").sort_values("loc_id")
    assert locs["loc_id"].tolist() == [0, 1, 2]  # ids 555, 9943, 144390 in id order
    traj = _rows(spark, "trajpriv_raw.trajectories", "chi_t").sort_values("user_id")
    assert [list(x) for x in traj["loc_ids"]] == [[2, 1], [2, 0]]
    assert traj["date"].astype(str).tolist() == ["2010-09-01", "2010-09-03"]
    assert traj["n"].tolist() == [2, 2]


def test_file_names_with_glob_characters_are_read_as_named(spark, spark_config, tmp_path):
    """Measured defect: Spark read `day[1].csv` as a glob pattern (PATH_NOT_FOUND for a file
    that exists)."""
    folder = tmp_path / "export{a}"
    folder.mkdir()
    (tmp_path / "stations.csv").write_text(STATIONS)
    (folder / "day[1].csv").write_text(HEADER + "1,2014-06-01 08:00:00,,31.2001,121.4001,10\n")
    (folder / "day*2.csv").write_text(HEADER + "2,2014-06-01 09:00:00,,31.2301,121.4702,11\n")
    cfg = _cfg(spark_config, "glob_t", path=folder, locations_path=tmp_path / "stations.csv",
               buckets=2)
    figures = _run(spark, cfg)
    assert figures["files"] == 2 and figures["records_accepted"] == 2


def test_a_tab_separated_header_less_export_ingests_with_config_alone(spark, spark_config,
                                                                      tmp_path):
    folder = tmp_path / "cdr"
    folder.mkdir()
    (tmp_path / "stations.csv").write_text(STATIONS)
    (folder / "20140601.txt").write_text("7\t2014-06-01 08:00:00\t121.4001\t31.2001\n"
                                         "7\t2014-06-01 09:00:00\t121.4702\t31.2301\n")
    cfg = _cfg(spark_config, "tsv_t", path=folder, locations_path=tmp_path / "stations.csv",
               sep="tab", header=False, columns=["user", "start", "lon", "lat"], buckets=2)
    figures = _run(spark, cfg)
    assert figures["records_read"] == figures["records_accepted"] == 2
    bad = _cfg(spark_config, "tsv_t", path=folder, locations_path=tmp_path / "stations.csv",
               sep="tab", header=False, columns=["user", "start", "lon"])
    with pytest.raises(InputDataError, match=r"\(ingest\.columns\) line 1: header .* lat"):
        ingest.plan_inputs(bad)


def test_bad_input_fails_clearly_and_writes_nothing(spark, spark_config, tmp_path):
    with pytest.raises(InputDataError, match="does not exist"):
        _run(spark, _cfg(spark_config, "bad1", source="plt", path=tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.plt").write_bytes(b"")
    with pytest.raises(InputDataError, match="empty"):
        _run(spark, _cfg(spark_config, "bad2", source="plt", path=tmp_path / "empty"))
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "User ID,Latitude,Longitude,Timestamp,Location ID\n"
        "1,nan,-87.6,2010-01-01 00:00:00,5\n2,0,0,2010-01-01 00:00:00,5\n"
    )
    with pytest.raises(
        InputDataError,
        match=r"bad\.csv line 2: missing_coordinate.*"
        r"Nothing was written",
    ):
        _run(spark, _cfg(spark_config, "bad3", source="checkins", path=bad))
    allbad = tmp_path / "allbad" / "u1" / "Trajectory"
    allbad.mkdir(parents=True)
    (allbad / "a.plt").write_text("h\nh\nh\nh\nh\nh\n0,0,0,1,1,2008-10-24,02:00:00\n40.0,116.3,0\n")
    with pytest.raises(
        InputDataError,
        match=r"no record in .*allbad was accepted .*"
        r"a\.plt line 7: null_island",
    ):
        _run(spark, _cfg(spark_config, "bad3", source="plt", path=tmp_path / "allbad"))
    for table in ("trajpriv_raw.points", "trajpriv_raw.quarantine"):
        if spark.catalog.tableExists(table):
            assert _rows(spark, table, "bad3").empty
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "part-0.parquet").write_bytes(b"PAR1 this is not parquet")
    (tmp_path / "st.csv").write_text(STATIONS)
    with pytest.raises(InputDataError, match=r"part-0\.parquet: not a readable Parquet file"):
        _run(
            spark,
            _cfg(
                spark_config,
                "bad6",
                source="telecom",
                path=corrupt,
                locations_path=tmp_path / "st.csv",
            ),
        )
    nohead = tmp_path / "nohead.csv"
    nohead.write_text("a,b\n1,2\n")
    with pytest.raises(InputDataError, match=r"nohead\.csv line 1: header .* lacks"):
        _run(spark, _cfg(spark_config, "bad4", source="checkins", path=nohead))
    with pytest.raises(InputDataError, match="need a location set"):
        _run(spark, _cfg(spark_config, "bad5", source="telecom", path=nohead))


@pytest.mark.slow
def test_cli_reports_one_clear_line_and_exit_code(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text(
        f"storage:\n  root: {tmp_path / 'root'}\ningest:\n  source: plt\n"
        f"  path: {tmp_path / 'missing'}\n"
    )
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "trajpriv"), "ingest", "--config", str(conf)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert (
        f"trajpriv ingest: error: input path {tmp_path / 'missing'} does not exist" in done.stderr
    )
    bad_conf = tmp_path / "bad.yaml"
    bad_conf.write_text("ingest:\n  max_len: 0\n")
    done = subprocess.run(
        [str(bin_dir / "trajpriv"), "ingest", "--config", str(bad_conf)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "ingest.max_len" in done.stderr


def _table_rows(spark, dataset: str) -> dict[str, list]:
    """Every row of the dataset in each of the five tables, as sortable text (no dataset)."""
    out = {}
    for table in ("trajpriv_raw.points", "trajpriv_raw.trajectories", "trajpriv_raw.slot_days",
                  "trajpriv_raw.quarantine", "trajpriv_pub.locations"):
        frame = _rows(spark, table, dataset).drop(columns=["dataset", "ingested_at"],
                                                  errors="ignore")
        out[table] = sorted(map(str, frame.sort_index(axis=1).itertuples(index=False)))
    return out


def test_an_ingest_killed_among_its_table_writes_is_finished_by_the_next_stage(
        spark, spark_config, monkeypatch):
    """Defect: ingest wrote its five tables one by one; a kill in between left new points
    next to old trajectories. Now all five end up the new ingest's, or none changes."""
    from udfs.faults import CRASH_AT, InjectedCrash

    landing = spark_config.storage.landing / "tele_commit"
    _telecom_files(landing)
    cfg = _cfg(spark_config, "tele_commit", source="telecom", max_distance_km=0.5, buckets=2,
               path=landing / "records", locations_path=landing / "stations.csv")
    _run(spark, cfg)
    want = _table_rows(spark, "tele_commit")
    # A different input for the same dataset (user 1's records dropped), then a kill after
    # the second of the five writes.
    records = landing / "records" / "part-00000.csv"
    records.write_text(HEADER + "2,2014-06-02 11:00:00,,31.2301,121.4702,11\n")
    monkeypatch.setenv(CRASH_AT, "ingest_after_trajectories:raise")
    with pytest.raises(InjectedCrash):
        _run(spark, cfg)
    monkeypatch.delenv(CRASH_AT)
    half = _table_rows(spark, "tele_commit")
    assert half["trajpriv_raw.points"] != want["trajpriv_raw.points"]  # partly written ...
    assert half["trajpriv_raw.slot_days"] == want["trajpriv_raw.slot_days"]  # ... partly old
    staging = spark_config.storage.root.resolve() / "staging"
    assert list(staging.glob("ingest-*/READY.json")), "the staged commit must survive the kill"

    # The next stage, whatever it is, finishes the ingest before it reads anything.
    figures = execute("noop", lambda spark, cfg, ctx: {}, cfg, argparse.Namespace(), spark)
    assert len(figures["finished_ingests"]) == 1
    assert not list(staging.glob("ingest-*"))
    done = _table_rows(spark, "tele_commit")
    fresh = _cfg(spark_config, "tele_commit_ref", source="telecom", max_distance_km=0.5,
                 buckets=2, path=landing / "records", locations_path=landing / "stations.csv")
    _run(spark, fresh)
    assert done == _table_rows(spark, "tele_commit_ref")  # what an undisturbed ingest writes


RAW_COUNTS = ("records_read", "records_accepted", "records_quarantined", "quarantined_by_reason",
              "points", "trajectories", "trajectories_dropped", "trajectories_dropped_by_reason",
              "slot_days", "files", "records_per_s")


def test_the_runs_row_and_console_line_carry_no_raw_count(spark, spark_config):
    """Defect: ingest had no PUBLIC_FIGURES, so the exact counts of the raw data (records
    read, quarantined by reason, trajectories, ...) went unnoised to trajpriv_pub.runs and the
    console. Now they stay in the trusted run folder's figures.json (0600)."""
    import json
    import stat

    from jobs.harness import public_view, summarise

    landing = spark_config.storage.landing / "tele_private"
    _telecom_files(landing)
    cfg = _cfg(spark_config, "tele_private", source="telecom", max_distance_km=0.5, buckets=2,
               path=landing / "records", locations_path=landing / "stations.csv")
    run_id = "ingest-privacy-test"
    figures = execute("ingest", ingest.run, cfg, argparse.Namespace(), spark, run_id)
    assert figures["records_read"] == 12  # the stage still counts (trusted zone)

    row = spark.sql(f"SELECT figures FROM trajpriv_pub.runs WHERE run_id = '{run_id}'").collect()
    published = json.loads(row[0]["figures"])
    console = summarise(public_view(ingest.run, figures))
    for key in RAW_COUNTS:
        assert key not in published, key
        assert f"{key}=" not in console, key
    assert set(published) <= set(ingest.PUBLIC_FIGURES) | {"error"}
    assert published["dataset"] == "tele_private" and published["locations"] == 3

    trusted = cfg.storage.runs_dir / run_id / "figures.json"
    assert published["trusted_figures"] == str(trusted)
    assert stat.S_IMODE(trusted.stat().st_mode) == 0o600
    kept = json.loads(trusted.read_text())
    assert kept["records_read"] == 12 and kept["quarantined_by_reason"]["duplicate"] == 1


FOURSQUARE_CONF = Path(__file__).resolve().parents[2] / "conf" / "foursquare_nyc.yaml"


@pytest.mark.realdata
def test_foursquare_nyc_slice_through_the_stage_matches_numpy(spark, spark_config, shared_data,
                                                              tmp_path):
    """conf/foursquare_nyc.yaml's ingest section, on its first 50 users (ingest.path set to a
    slice of NYC.npy), through the Spark stage: every count and slot day as numpy gives them
    from the arrays directly."""
    import numpy as np

    from jobs.config import load_config

    folder = shared_data / "foursquare_nyc"
    rows = np.load(folder / "NYC.npy")
    rows = rows[rows[:, 0] <= 50]
    np.save(tmp_path / "NYC.npy", rows)
    icfg = load_config(FOURSQUARE_CONF, [f"ingest.path={tmp_path / 'NYC.npy'}",
                                         f"ingest.locations_path={folder / 'NYC_POI.npy'}",
                                         "ingest.buckets=2"]).ingest
    figures = _run(spark, spark_config.model_copy(update={"dataset": "fsq50", "ingest": icfg}))

    unique = np.unique(rows, axis=0)  # exact repeats of (user, venue, minute) are duplicates
    stamps = np.datetime64(icfg.time_origin) + unique[:, 2].astype("timedelta64[m]")
    days = np.unique(np.c_[unique[:, 0], stamps.astype("datetime64[D]").astype(np.int64)], axis=0)
    assert figures["records_read"] == len(rows)
    assert figures["quarantined_by_reason"] == {"duplicate": len(rows) - len(unique)}
    assert figures["points"] == len(unique) and figures["slot_days"] == len(days)

    points = _rows(spark, "trajpriv_raw.points", "fsq50")
    assert points["user_id"].nunique() == 50
    poi = np.load(folder / "NYC_POI.npy")
    at = {int(i): (lat, lon) for i, lat, lon in poi}
    want = np.array([at[int(v)] for v in points["loc_id"]])
    np.testing.assert_allclose(points[["lat", "lon"]].to_numpy(), want)  # the venue's place
    got = points.assign(ts=points["ts"].astype("datetime64[ns]"))
    assert sorted(zip(got["user_id"].astype(int), got["loc_id"], got["ts"], strict=True)) == sorted(
        zip(unique[:, 0], unique[:, 1], stamps.astype("datetime64[ns]"), strict=True))

    # A day of one check-in is that venue in all 48 slots (held all day: the shaping rule).
    slot_days = _rows(spark, "trajpriv_raw.slot_days", "fsq50")
    per_day = pd.Series(1, index=pd.MultiIndex.from_arrays(
        [unique[:, 0].astype(str), pd.DatetimeIndex(stamps).normalize()])).groupby(level=[0, 1])
    single = per_day.sum()[lambda c: c == 1].index
    one = slot_days.set_index(["user_id", pd.DatetimeIndex(slot_days["date"])]).loc[single]
    assert len(one) > 100 and all(len(set(s)) == 1 for s in one["slots"])

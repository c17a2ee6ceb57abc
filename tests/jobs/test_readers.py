"""Readers and location mapping on fixtures written here (no Spark, no shared data).

Oracles are independent of the code under test: line counts straight from the fixture text,
distances from the `haversine` package, nearest locations by brute force.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from haversine import Unit, haversine

from jobs.ingest.locmap import Grid, LocationSet, derive_locations, load_locations, map_points
from jobs.ingest.readers import checkins, plt, slots48, telecom
from jobs.ingest.readers.common import REASONS, Window
from jobs.ingest.readers.pipeline import ReaderOptions, ingest_local
from udfs.errors import InputDataError

PLT_HEADER = (
    b"Geolife trajectory\nWGS 84\nAltitude is in Feet\nReserved 3\n"
    b"0,2,255,My Track,0,0,2,8421376\n0\n"
)


def plt_line(lat, lon, when: str) -> bytes:
    d, t = when.split(" ")
    return f"{lat},{lon},0,492,39745.09,{d},{t}\n".encode()


# (line bytes, expected reason or None); every kind of bad PLT record.
PLT_CASES = [
    (plt_line(40.0083, 116.3198, "2008-10-24 02:09:59"), None),
    (plt_line(40.0084, 116.3199, "2008-10-24 02:10:04"), None),
    (plt_line(40.0084, 116.3199, "2008-10-24 02:10:04"), "duplicate"),
    (b"40.0085,116.3200,0,492\n", "truncated_line"),
    (b"40.0085,116.\xff\xfe3200,0,492,39745.09,2008-10-24,02:10:09\n", "non_utf8"),
    (b"forty,116.32,0,492,39745.09,2008-10-24,02:10:09\n", "unparsable_line"),
    (b"40.0,116.3,0,492,39745.09,2008-10-24,02:10:09,extra\n", "unparsable_line"),
    (plt_line("nan", 116.32, "2008-10-24 02:10:14"), "missing_coordinate"),
    (plt_line(40.0, "inf", "2008-10-24 02:10:14"), "missing_coordinate"),
    (b",116.32,0,492,39745.09,2008-10-24,02:10:14\n", "missing_coordinate"),
    (plt_line(95.0, 116.32, "2008-10-24 02:10:19"), "coordinate_out_of_range"),
    (plt_line(40.0, -181.0, "2008-10-24 02:10:19"), "coordinate_out_of_range"),
    (plt_line(0, 0, "2008-10-24 02:10:24"), "null_island"),
    (plt_line(40.0086, 116.3201, "2008-13-45 02:10:29"), "unparsable_timestamp"),
    (plt_line(40.0086, 116.3201, "2009-01-01 02:10:29"), "outside_window"),
    (plt_line(41.5, 116.32, "2008-10-24 03:10:34"), "too_far"),
    (b"\n", "blank"),  # not a record
    (plt_line(40.0087, 116.3202, "2008-10-24 06:30:00"), None),
    (b"40.0087,116.3202,0,49", "truncated_line"),  # the file ends mid-line
]
WINDOW = Window(dt.date(2008, 10, 1), dt.date(2008, 10, 31))
BEIJING = Grid(0.01, (39.5, 40.5, 115.8, 117.0))


def write_plt(tmp_path, cases=PLT_CASES, user="007"):
    folder = tmp_path / user / "Trajectory"
    folder.mkdir(parents=True)
    path = folder / "20081024020959.plt"
    path.write_bytes(PLT_HEADER + b"".join(line for line, _ in cases))
    return path


def test_plt_every_bad_kind_is_quarantined_with_its_reason(tmp_path):
    path = write_plt(tmp_path)
    opts = ReaderOptions(source="plt", window=WINDOW, max_distance_km=1.0)
    tables, _ = ingest_local([path], opts, BEIJING)
    expected = [r for _, r in PLT_CASES if r != "blank"]
    # Oracle: non-blank lines after the six header lines, counted on the raw bytes.
    body = path.read_bytes().split(b"\n")[6:]
    n_records = sum(1 for line in body if line.strip())
    assert n_records == len(expected)
    quarantine, points = tables["quarantine"], tables["points"]
    assert len(points) + len(quarantine) == n_records  # read = accepted + quarantined
    assert len(points) == expected.count(None)
    got = quarantine.sort_values("line")["reason"].tolist()
    assert got == [r for r in expected if r is not None]
    assert set(got) <= set(REASONS)
    assert (points["user_id"] == "007").all()
    bad_bytes = quarantine.loc[quarantine["reason"] == "non_utf8", "record"].iloc[0]
    assert "\\xff\\xfe" in bad_bytes  # the offending bytes stay visible in the record text


def test_plt_line_numbers_and_user_from_folder(tmp_path):
    path = write_plt(tmp_path)
    parsed = plt.parse_plt(path.read_bytes(), str(path), WINDOW)
    assert parsed["line"].iloc[0] == 7  # six header lines
    assert plt.user_of(str(path)) == "007"
    assert parsed["ts"].iloc[0] == pd.Timestamp("2008-10-24 02:09:59")


TELECOM_HEADER = "user,start,end,lat,lon,loc_id\n"
STATIONS = pd.DataFrame(
    {"loc_id": [10, 11, 12], "lat": [31.20, 31.23, 31.30], "lon": [121.40, 121.47, 121.50]}
)


def telecom_lines() -> list[tuple[str, str | None]]:
    t = "2014-06-01 08:00:00,2014-06-01 08:05:00"
    return [
        (f"1,{t},31.2001,121.4001,10", None),
        (f"1,{t},31.2001,121.4001,10", "duplicate"),
        ("1,2014-06-01 09:00:00,2014-06-01 09:10:00,31.2301,121.4702,", None),  # nearest: 11
        ("1,2014-06-01 10:00:00,,31.2301,121.4702,99", None),  # unknown id, near 11 -> 11
        ("2,2014-06-01 10:00:00,,35.0,121.4702,", "too_far"),
        ("2,2014-06-01 10:00:00,,35.0,121.4702,77", "unknown_location"),
        ("2,2014-06-01 10:00:00,,NaN,121.47,", "missing_coordinate"),
        ("2,2014-06-01 10:00:00,,31.2,-200,", "coordinate_out_of_range"),
        ("2,2014-06-01 10:00:00,,0,0,", "null_island"),
        ("2,yesterday,,31.2,121.4,", "unparsable_timestamp"),
        ("2,9999-12-31 10:00:00,,31.2,121.4,", "timestamp_out_of_range"),  # beyond pandas
        ("2,2013-06-01 10:00:00,,31.2,121.4,", "outside_window"),
        ("2,2014-06-01 10:00:00,2014-06-01 09:00:00,31.2,121.4,", "end_before_start"),
        ("2,2014-06-01 10:00:00,,31.2", "truncated_line"),
        (",2014-06-01 10:00:00,,31.2,121.4,", "unparsable_line"),
        ("2,2014-06-01 10:00:00,,31.2,121.4,10,surplus", "unparsable_line"),
        ("2,2014-06-01 10:00:00,,31.2,121.4,\udcff", "non_utf8"),  # a lone 0xFF byte
        # measured defect: the C parser cut 31.24\x006946 to 31.24 (700 m off) and u\x00bad to u
        ("1,2014-06-01 11:00:00,,31.24\x006946,121.47,", "control_character"),
        ("u\x00bad,2014-06-01 11:00:00,,31.2301,121.4702,", "control_character"),
        ("u\x1bbad,2014-06-01 11:00:00,,31.2301,121.4702,", "control_character"),
    ]


def test_telecom_csv_maps_given_then_nearest_and_quarantines(tmp_path):
    path = tmp_path / "part-0.csv"
    cases = telecom_lines()
    text = TELECOM_HEADER + "\n".join(line for line, _ in cases) + "\n"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    locs = LocationSet(
        STATIONS.loc_id.to_numpy(),
        STATIONS.lat.to_numpy(),
        STATIONS.lon.to_numpy(),
        STATIONS.loc_id.astype(str).to_numpy(object),
    )
    opts = ReaderOptions(
        source="telecom", window=Window(dt.date(2014, 6, 1), None), max_distance_km=0.5
    )
    tables, _ = ingest_local([path], opts, locs)
    q, p = tables["quarantine"], tables["points"]
    assert len(q) + len(p) == len(cases)
    assert q.sort_values("line")["reason"].tolist() == [r for _, r in cases if r]
    assert p.sort_values("line")["loc_id"].tolist() == [10, 11, 11]
    assert q["record"].str.contains("surplus").any()
    assert set(q["reason"]) == set(REASONS)  # this one file holds every kind of bad record


def test_telecom_parquet_frame_matches_csv(tmp_path):
    frame = pd.DataFrame(
        {
            "user": [5, 5],
            "start": pd.to_datetime(["2014-06-01 08:00", "2014-06-01 09:00"]),
            "end": pd.to_datetime(["2014-06-01 08:10", "2014-06-01 09:10"]),
            "lat": [31.2, np.nan],
            "lon": [121.4, 121.4],
            "loc_id": [10, 11],
        }
    )
    parsed = telecom.parse_frame(frame, "x.parquet", Window())
    assert parsed["reason"].tolist() == [None, "missing_coordinate"]
    assert parsed["user_id"].tolist() == ["5", "5"]
    assert parsed["given_loc"].tolist() == ["10", "11"]


def test_header_without_a_required_column_names_file_and_column(tmp_path):
    content = b"user,start,end,latitude\n1,2014-06-01 08:00:00,,31.2\n"
    with pytest.raises(InputDataError, match=r"bad\.csv line 1: .*lon"):
        telecom.parse_csv(content, "bad.csv", Window())


def test_checkins_chi_and_cps_shapes():
    chi = (
        b"User ID,Latitude,Longitude,Timestamp,Location ID\n"
        b"17,41.86,-87.61,2010-09-01 17:25:27,9943\n"
        b"17,41.92,-87.63,2010-09-05 00:58:36,144390\n"
    )
    parsed = checkins.parse_csv(chi, "chi.csv", Window())
    assert parsed["reason"].isna().all()
    derived = derive_locations(parsed)
    # numbered densely in id order (collect indexes P by loc_id); the ids stay as names
    assert derived.loc_id.tolist() == [0, 1] and derived.names.tolist() == ["9943", "144390"]
    assert derived.lookup(pd.Series(["144390", "9943", "7"])).tolist() == [1, 0, -1]
    cps = (
        b"User ID,Location ID,Timestamp,Latitude,Longitude\n"
        b"1,IONA,0.0,49.27088,-123.250325\n1,ALUM,49.5,49.266009,-123.249577\n"
        b"1,ALUM,abc,49.266009,-123.249577\n"
    )
    parsed = checkins.parse_csv(
        cps, "cps.csv", Window(), ts_unit="minutes", ts_origin=dt.datetime(2020, 1, 1)
    )
    assert parsed["ts"].iloc[1] == pd.Timestamp("2020-01-01 00:49:30")
    assert parsed["reason"].tolist() == [None, None, "unparsable_timestamp"]


def test_nearest_location_matches_brute_force_haversine():
    rng = np.random.default_rng(7)
    lat = 31.0 + rng.random(300) * 0.5
    lon = 121.2 + rng.random(300) * 0.5
    locs = LocationSet(
        np.arange(300) * 3, lat, lon, (np.arange(300) * 3).astype(str).astype(object)
    )
    qlat, qlon = 31.0 + rng.random(200) * 0.5, 121.2 + rng.random(200) * 0.5
    ids, dist = locs.nearest(qlat, qlon)
    for i in range(200):
        d = [
            haversine((qlat[i], qlon[i]), (lat[j], lon[j]), unit=Unit.KILOMETERS)
            for j in range(300)
        ]
        assert ids[i] == 3 * int(np.argmin(d))
        assert dist[i] == pytest.approx(min(d), rel=1e-9, abs=1e-9)


def test_grid_cells_are_stable_and_centred():
    grid = Grid(0.01)
    ids, dist = grid.assign(np.array([40.0083, 40.0089, 40.0183]), np.array([116.3198] * 3))
    assert ids[0] == ids[1] != ids[2]
    clat, clon = grid.centres(ids)
    assert np.all(np.abs(clat - np.array([40.0083, 40.0089, 40.0183])) <= 0.005 + 1e-12)
    assert np.all(dist < 0.8)  # at most half a 0.01-degree cell's diagonal at 40 N
    boxed = Grid(0.01, (39.5, 40.5, 115.8, 117.0))
    outside, _ = boxed.assign(np.array([41.0]), np.array([116.0]))
    assert outside[0] == -1
    assert len(boxed.frame()) == 100 * 120


def test_map_points_keeps_earlier_reasons():
    parsed = pd.DataFrame(
        {
            "lat": [31.2, np.nan],
            "lon": [121.4, 121.4],
            "given_loc": [None, None],
            "reason": [None, "missing_coordinate"],
        }
    )
    locs = LocationSet(np.array([1]), np.array([31.2]), np.array([121.4]), np.array(["1"], object))
    out = map_points(parsed, locs, 1.0)
    assert out["loc_id"].tolist() == [1, -1]
    assert out["reason"].tolist() == [None, "missing_coordinate"]
    assert parsed["reason"].tolist() == [None, "missing_coordinate"]  # input not mutated


def test_load_locations_formats_and_errors(tmp_path):
    gps = tmp_path / "gps"
    gps.write_text("40.06 116.25\n39.99 116.31\n")
    locs = load_locations(gps)
    assert locs.loc_id.tolist() == [0, 1] and locs.lat.tolist() == [40.06, 39.99]
    named = tmp_path / "named.csv"
    named.write_text("Latitude,Longitude,Location ID\n49.26,-123.25,VANR\n49.27,-123.26,IONA\n")
    locs = load_locations(named)
    assert locs.loc_id.tolist() == [0, 1]
    assert locs.lookup(pd.Series(["IONA", "NOPE", None])).tolist() == [1, -1, -1]
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InputDataError, match="empty"):
        load_locations(empty)
    dup = tmp_path / "dup.csv"
    dup.write_text("loc_id,lat,lon\n1,31.2,121.4\n1,31.3,121.5\n")
    with pytest.raises(InputDataError, match=r"dup\.csv line 3: duplicate location id"):
        load_locations(dup)
    bad = tmp_path / "bad.csv"
    bad.write_text("loc_id,lat,lon\n1,31.2,121.4\n2,nan,121.5\n")
    with pytest.raises(InputDataError, match=r"bad\.csv line 3"):
        load_locations(bad)
    with pytest.raises(InputDataError, match="does not exist"):
        load_locations(tmp_path / "missing.csv")


def _slot_row(user, day, ids):
    return ",".join([str(user), str(day), *map(str, ids)])


def test_slots48_per_user_rows_and_quarantine(tmp_path):
    (tmp_path / "gps").write_text("".join(f"40.{i:02d} 116.25\n" for i in range(10)))
    header = "user_id,day_idx," + ",".join(f"s{i}" for i in range(48))
    rows = [
        (_slot_row(0, 0, [1] * 48), None),
        (_slot_row(0, 1, [2] * 24 + [3] * 24), None),
        (_slot_row(0, 1, [2] * 48), "duplicate"),
        (_slot_row(1, 0, [1] * 47), "truncated_line"),
        (_slot_row(1, 1, [1] * 47 + [99]), "unknown_location"),
        (_slot_row(1, 2, [1] * 47 + ["x"]), "unparsable_line"),
    ]
    (tmp_path / "real_data_per_user.csv").write_text(
        header + "\n" + "\n".join(r for r, _ in rows) + "\n"
    )
    frame, gps = slots48.read_slots(tmp_path, None, dt.date(2008, 1, 1))
    assert gps == tmp_path / "gps"
    assert frame["reason"].tolist() == [r for _, r in rows]
    ok = frame[frame["reason"].isna()]
    assert ok["date"].tolist() == [pd.Timestamp("2008-01-01"), pd.Timestamp("2008-01-02")]
    assert list(ok["slots"].iloc[1][:25]) == [2] * 24 + [3]


def test_slots48_plain_rows_are_users_of_their_own(tmp_path):
    (tmp_path / "gps").write_text("40.00 116.25\n40.01 116.25\n")
    (tmp_path / "real.data").write_text(" ".join(["0"] * 48) + "\n" + " ".join(["1"] * 48) + "\n")
    frame, _ = slots48.read_slots(tmp_path, None, dt.date(2008, 1, 1))
    assert frame["user_id"].tolist() == ["row0", "row1"]
    assert frame["reason"].isna().all()


@pytest.mark.parametrize("bad_id, what", [("-5", "negative"), ("3000000000", "2\\^31 or more")])
def test_a_location_file_with_an_id_that_cannot_be_published_is_refused(tmp_path, bad_id, what):
    """Measured defects: a negative id was accepted (its records then quarantined), an id of
    2^31 or more renumbered every station in file order without a word."""
    path = tmp_path / "stations.csv"
    path.write_text(f"loc_id,lat,lon\n10,31.2,121.4\n{bad_id},31.3,121.5\n")
    with pytest.raises(InputDataError, match=f"line 3: location id '{bad_id}' is {what}"):
        load_locations(path)


@pytest.mark.parametrize("header_tail, row_tail", [(",", ""), ("", ","), (",,", ",,"), ("", ", ,")])
def test_trailing_separators_of_spreadsheet_exports_are_read(header_tail, row_tail):
    """Measured defect: a trailing comma in the header (`user,start,end,lat,lon,`) quarantined
    every record `truncated_line`; on the rows, `unparsable_line`."""
    content = (f"user,start,end,lat,lon{header_tail}\n"
               f"1,2014-06-01 08:00:00,,31.2001,121.4001{row_tail}\n"
               f"2,2014-06-01 09:00:00,,31.2301,121.4702{row_tail}\n"
               f"3,2014-06-01 09:00:00,,31.2301,121.4702{header_tail},surplus\n").encode()
    parsed = telecom.parse_csv(content, "export.csv", Window())
    assert parsed["reason"].tolist() == [None, None, "unparsable_line"]
    assert parsed["lon"].tolist()[:2] == [121.4001, 121.4702]
    assert parsed["record"].iloc[0].endswith(f"121.4001{row_tail}")  # the record as written


def test_an_unnamed_trailing_column_with_values_is_still_read():
    content = b"user,start,end,lat,lon,\n1,2014-06-01 08:00:00,,31.2,121.4,x\n1,2014-06-01,,31.2\n"
    parsed = telecom.parse_csv(content, "export.csv", Window())
    assert parsed["reason"].tolist() == [None, "truncated_line"]


def test_telecom_records_take_the_configured_timestamp_unit():
    """Measured defect: `ingest.ts_unit: seconds` was ignored for `source: telecom` (every
    epoch-seconds record quarantined `unparsable_timestamp`)."""
    content = b"user,start,end,lat,lon\n1,1401610000,1401610300,31.2,121.4\n"
    opts = ReaderOptions(source="telecom", ts_unit="seconds",
                         time_origin=dt.datetime(1970, 1, 1))
    from jobs.ingest.readers.pipeline import parse_file

    parsed = parse_file(content, "epoch.csv", opts)
    assert parsed["reason"].tolist() == [None]
    assert parsed["ts"].iloc[0] == pd.Timestamp("2014-06-01 08:06:40")
    assert parsed["end_ts"].iloc[0] == pd.Timestamp("2014-06-01 08:11:40")
    frame = pd.DataFrame({"user": ["1"], "start": [1401610000], "lat": [31.2], "lon": [121.4]})
    typed = telecom.parse_frame(frame, "epoch.parquet", Window(), ts_unit="seconds",
                                ts_origin=dt.datetime(1970, 1, 1))
    assert typed["ts"].iloc[0] == pd.Timestamp("2014-06-01 08:06:40")


@pytest.mark.parametrize("offsets, want", [("local", ["2014-06-01 23:30:00"] * 2),
                                            ("utc", ["2014-06-01 15:30:00",
                                                     "2014-06-01 23:30:00"])])
def test_utc_offsets_keep_the_written_day_or_convert_when_asked(offsets, want):
    """Measured defects: `23:30+08:00` was silently stored as 15:30 UTC; a file mixing `+08:00`
    and `Z` crashed the job."""
    content = (b"User ID,Latitude,Longitude,Timestamp,Location ID\n"
               b"1,41.8,-87.6,2014-06-01T23:30:00+08:00,5\n"
               b"1,41.8,-87.6,2014-06-01T23:30:00Z,5\n")
    parsed = checkins.parse_csv(content, "tz.csv", Window(), utc_offsets=offsets)
    assert parsed["reason"].tolist() == [None, None]
    assert parsed["ts"].astype(str).tolist() == want


def test_a_huge_garbage_line_is_quarantined_bounded():
    """Measured defect: a 100 MB garbage line was stored whole in quarantine.record."""
    from jobs.ingest.readers.common import RECORD_LIMIT

    junk = "x" * 3_000_000
    content = f"user,start,end,lat,lon\n{junk}\n".encode()
    parsed = telecom.parse_csv(content, "junk.csv", Window())
    assert parsed["reason"].tolist() == ["truncated_line"]
    record = parsed["record"].iloc[0]
    assert len(record) < RECORD_LIMIT + 40 and record.endswith("(3,000,000 characters in all)")


def test_a_cut_gzip_file_is_refused_naming_the_file():
    """Measured defect: a truncated .csv.gz crashed the job with the cause lost."""
    import gzip

    from jobs.ingest.readers.pipeline import parse_file
    from udfs.errors import InputDataError

    whole = gzip.compress(b"user,start,end,lat,lon\n1,2014-06-01 08:00:00,,31.2,121.4\n" * 50)
    with pytest.raises(InputDataError, match=r"cut\.csv\.gz: not a whole gzip file"):
        parse_file(whole[: len(whole) // 2], "cut.csv.gz", ReaderOptions(source="telecom"))


def test_a_header_less_tab_separated_export_reads_with_config_alone(tmp_path):
    """Measured gap: no separator or header-less layout could be expressed (a conversion
    script was needed); a taxi export's `id,datetime,lon,lat` order is given by `columns`."""
    path = tmp_path / "cdr.tsv.txt"
    path.write_text("7\t2014-06-01 08:00:00\t121.4001\t31.2001\n"
                    "7\t2014-06-01 09:00:00\t121.4702\t31.2301\n")
    opts = ReaderOptions(source="telecom", sep="\t", header=False,
                         columns=("user", "start", "lon", "lat"), max_distance_km=0.5)
    locs = LocationSet(STATIONS.loc_id.to_numpy(), STATIONS.lat.to_numpy(),
                       STATIONS.lon.to_numpy(), STATIONS.loc_id.astype(str).to_numpy(object))
    tables, _ = ingest_local([path], opts, locs)
    assert len(tables["quarantine"]) == 0
    assert tables["points"].sort_values("ts")["loc_id"].tolist() == [10, 11]
    from jobs.ingest.readers.pipeline import parse_file

    parsed = parse_file(path.read_bytes(), str(path), opts)
    assert parsed["line"].tolist() == [1, 2]  # no header line: records from line 1


@pytest.mark.parametrize("encoding", ["utf-16", "latin-1"])
def test_other_encodings_and_separators(tmp_path, encoding):
    text = ("User ID;Latitude;Longitude;Timestamp;Location ID\n"
            "José;41.80;-87.60;2010-09-01 17:25:27;9943\n")
    with pytest.raises(InputDataError, match="lacks a column"):  # default layout: refused
        checkins.parse_csv(text.encode(encoding), "c.csv", Window())
    from jobs.ingest.readers.pipeline import parse_file

    opts = ReaderOptions(source="checkins", sep=";", encoding=encoding)
    parsed = parse_file(text.encode(encoding), "c.csv", opts)
    assert parsed["reason"].tolist() == [None] and parsed["user_id"].tolist() == ["José"]


def test_include_and_exclude_pick_the_record_files(tmp_path):
    """Measured defect: a README.txt beside the data made the whole ingest refuse."""
    from jobs.config import load_config
    from jobs.ingest.readers.plan import plan_inputs

    data = tmp_path / "export"
    (data / "2014").mkdir(parents=True)
    (data / "2014" / "day1.csv").write_text(
        "user,start,lat,lon\n1,2014-06-01 08:00:00,31.2,121.4\n")
    (data / "README.txt").write_text("Exported by the billing system.\n")
    (tmp_path / "stations.csv").write_text("loc_id,lat,lon\n10,31.2,121.4\n")
    base = [f"ingest.path={data}", f"ingest.locations_path={tmp_path / 'stations.csv'}"]
    with pytest.raises(InputDataError, match=r"README\.txt line 1: header"):
        plan_inputs(load_config(None, base))
    for extra in (["ingest.exclude=[README*]"], ["ingest.include=['*.csv']"],
                  ["ingest.include=['2014/*']"]):
        plan = plan_inputs(load_config(None, base + extra))
        assert [p.rsplit("/", 1)[-1] for p in plan.files] == ["day1.csv"], extra


def test_strptime_formats_and_epoch_milliseconds():
    from jobs.ingest.readers.pipeline import parse_file

    content = b"user,time,lat,lon\n1,01/06/2014 08:05,31.2,121.4\n1,2014-06-01 08:05,31.2,121.4\n"
    parsed = parse_file(content, "f.csv", ReaderOptions(source="telecom",
                                                        ts_format="%d/%m/%Y %H:%M"))
    assert parsed["ts"].iloc[0] == pd.Timestamp("2014-06-01 08:05")
    assert parsed["reason"].tolist() == [None, "unparsable_timestamp"]  # not the given format
    content = b"user,time,lat,lon\n1,1401609900000,31.2,121.4\n"
    parsed = parse_file(content, "m.csv", ReaderOptions(
        source="telecom", ts_unit="milliseconds", time_origin=dt.datetime(1970, 1, 1)))
    assert parsed["ts"].iloc[0] == pd.Timestamp("2014-06-01 08:05")


def test_quoted_csv_with_ingest_quoting_csv():
    """Measured defect: quoted CSV (QUOTE_NONE) quarantined every line."""
    from jobs.ingest.readers.pipeline import parse_file

    content = (b'"user","start","lat","lon","station"\n'
               b'"Smith, J.","2014-06-01 08:00:00","31.2","121.4","10"\n'
               b'"say ""hi""","2014-06-01 09:00:00","31.2","121.4",""\n'
               b'"x","2014-06-01 09:00:00","31.2","121.4","10","surplus"\n')
    plain = parse_file(content, "q.csv", ReaderOptions(source="telecom"))
    assert plain["reason"].notna().all()
    parsed = parse_file(content, "q.csv", ReaderOptions(source="telecom", quoted=True))
    assert parsed["reason"].tolist() == [None, None, "unparsable_line"]
    assert parsed["user_id"].tolist()[:2] == ["Smith, J.", 'say "hi"']
    assert parsed["lat"].tolist()[:2] == [31.2, 31.2]


def test_clock_times_and_counts_from_the_day_in_the_file_name():
    """`ingest.date_from`: the day of every record comes from the file name; the timestamps
    are clock times (ts_format) or ts_unit counts from that midnight."""
    from jobs.ingest.readers.pipeline import parse_file

    clock = ReaderOptions(source="telecom", ts_format="%H:%M", date_from=r"(\d{4}-\d{2}-\d{2})")
    content = b"user,start,end,lat,lon\n1,08:05,08:20,31.2,121.4\n1,23:50,00:10,31.2,121.4\n"
    parsed = parse_file(content, "/x/2014-06-01/day_2014-06-03.csv", clock)
    assert parsed["ts"].astype(str).tolist() == ["2014-06-03 08:05:00", "2014-06-03 23:50:00"]
    assert parsed["end_ts"].astype(str).tolist() == ["2014-06-03 08:20:00",
                                                     "2014-06-04 00:10:00"]  # after midnight
    seconds = ReaderOptions(source="telecom", ts_unit="seconds", date_from=r"_(\d{8})\.",
                            date_format="%Y%m%d")
    content = b"user,start,lat,lon\n1,29100,31.2,121.4\n1,-5,31.2,121.4\n"
    parsed = parse_file(content, "cdr_20140601.csv", seconds)
    assert parsed["ts"].astype(str).tolist() == ["2014-06-01 08:05:00", "2014-05-31 23:59:55"]
    # a name whose captured text is no date in date_format is refused, naming the file
    with pytest.raises(InputDataError, match=r"cdr_20141341\.csv: '20141341'.* is not a date"):
        parse_file(content, "cdr_20141341.csv", seconds)


def test_the_run_states_its_location_set_in_public_settings():
    from jobs.ingest.locmap import km_grid, location_figures

    grid = km_grid(2.0, (31.0, 31.4, 121.2, 121.8))
    rows, cols = grid.shape
    assert location_figures(grid) == {"location_set": "grid_km", "grid_km": 2.0,
                                      "grid_bbox": [31.0, 31.4, 121.2, 121.8],
                                      "grid_cells": rows * cols}
    assert rows == 23 and cols == 29  # 0.4 deg of latitude = 44.5 km; 0.6 of lon at 31.2 N
    assert location_figures(Grid(0.01, None)) == {"location_set": "grid_deg", "grid_bbox": None}
    assert location_figures(None) == {"location_set": "record ids"}  # check-ins' own ids

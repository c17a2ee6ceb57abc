"""Trajectory and slot-day shaping against a plain-Python reference of DESIGN.md section 5."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.ingest import shaping
from udfs.errors import InvalidParameterError

T0 = pd.Timestamp("2014-06-01")


def pts(rows):
    """rows: (user, minutes after T0, loc[, end minutes])."""
    frame = pd.DataFrame(
        {
            "user_id": [str(r[0]) for r in rows],
            "ts": [T0 + pd.Timedelta(minutes=r[1]) for r in rows],
            "loc_id": [r[2] for r in rows],
            "end_ts": [T0 + pd.Timedelta(minutes=r[3]) if len(r) > 3 else pd.NaT for r in rows],
        }
    )
    frame["line"] = np.arange(len(frame))
    return frame


def reference(points: pd.DataFrame, max_len: int, gap_hours: float, segment: str = "day",
              min_len: int = 1) -> list[tuple]:
    """Loop-per-record reference: (user, date, traj_id, loc tuple, ts tuple)."""
    out = []
    p = points.sort_values(["user_id", "ts", "line"])
    day = p["ts"].dt.normalize() if segment == "day" else pd.Series(0, index=p.index)
    for _, grp in p.groupby([p["user_id"], day], sort=True):
        stays = []  # [loc, start, end]
        for rec in grp.itertuples():
            end = rec.ts if pd.isna(rec.end_ts) else max(rec.ts, rec.end_ts)
            if stays and stays[-1][0] == rec.loc_id:
                stays[-1][2] = max(stays[-1][2], end)
            else:
                stays.append([rec.loc_id, rec.ts, end])
        segments, current = [], []
        for stay in stays:
            gap = current and stay[1] - current[-1][2] > pd.Timedelta(hours=gap_hours)
            if gap and segment != "none":
                segments.append(current)
                current = []
            current.append(stay)
        segments.append(current)
        for seg in segments:
            for i in range(0, len(seg), max_len):
                piece = seg[i : i + max_len]
                if len(piece) >= min_len:
                    out.append((grp["user_id"].iloc[0], piece[0][1].normalize(),
                                tuple(s[0] for s in piece), tuple(s[1] for s in piece)))
    numbered, seen = [], {}
    for user, date, locs, times in sorted(out, key=lambda r: (r[0], r[3][0])):
        k = seen.get((user, date), 0)
        seen[(user, date)] = k + 1
        numbered.append((user, date, k, locs, times))
    return sorted(numbered, key=lambda r: (r[0], r[1], r[2]))


def as_tuples(traj: pd.DataFrame) -> list[tuple]:
    return [
        (
            r.user_id,
            r.date,
            r.traj_id,
            tuple(int(x) for x in r.loc_ids),
            tuple(pd.Timestamp(x) for x in r.ts),
        )
        for r in traj.sort_values(["user_id", "date", "traj_id"]).itertuples()
    ]


def test_merge_gap_and_cut_rules_by_hand():
    rows = [
        (1, 0, 5),
        (1, 10, 5),
        (1, 20, 6),
        (1, 30, 6, 400),
        (1, 400 + 170, 7),
        (1, 400 + 170 + 181, 8),
    ]
    traj = shaping.build_trajectories(pts(rows), max_len=8, gap_hours=3)
    # 5,5 merge; 6 (ends at 400 min) then 7 after 170 min (no split); 8 after 181 min (split).
    assert [list(x) for x in traj["loc_ids"]] == [[5, 6, 7], [8]]
    assert traj["traj_id"].tolist() == [0, 1]
    assert traj["n"].tolist() == [3, 1]


def test_cut_into_pieces_of_max_len():
    rows = [(1, i, i % 5) for i in range(12)]
    traj = shaping.build_trajectories(pts(rows), max_len=5, gap_hours=3)
    assert traj["n"].tolist() == [5, 5, 2]
    assert [list(x) for x in traj["loc_ids"]][0] == [0, 1, 2, 3, 4]


def test_days_and_users_never_share_a_trajectory():
    rows = [(1, 23 * 60 + 50, 1), (1, 24 * 60 + 5, 2), (2, 24 * 60 + 6, 2)]
    traj = shaping.build_trajectories(pts(rows), max_len=8, gap_hours=3)
    assert len(traj) == 3 and traj["traj_id"].tolist() == [0, 0, 0]


@pytest.mark.parametrize("max_len,gap", [(1, 3.0), (3, 0.5), (8, 3.0)])
def test_matches_reference_on_random_points(max_len, gap):
    rng = np.random.default_rng(max_len)
    n = 600
    rows = [
        (int(rng.integers(0, 6)), int(rng.integers(0, 3 * 1440)), int(rng.integers(0, 4)))
        for _ in range(n)
    ]
    rows = [r + ((r[1] + int(rng.integers(0, 300))),) if rng.random() < 0.3 else r for r in rows]
    points = pts(rows)
    got = as_tuples(shaping.build_trajectories(points, max_len=max_len, gap_hours=gap))
    assert got == reference(points, max_len, gap)


@pytest.mark.parametrize("segment,min_len", [("gap", 1), ("gap", 2), ("none", 1), ("day", 3)])
def test_segments_and_min_len_match_reference(segment, min_len):
    rng = np.random.default_rng(7)
    rows = [(int(rng.integers(0, 5)), int(rng.integers(0, 4 * 1440)), int(rng.integers(0, 4)))
            for _ in range(500)]
    points = pts(rows)
    kept, short = shaping.cut_trajectories(points, max_len=4, gap_hours=2.0, segment=segment,
                                           min_len=min_len)
    assert as_tuples(kept) == reference(points, 4, 2.0, segment, min_len)
    every = reference(points, 4, 2.0, segment, 1)
    assert len(kept) + len(short) == len(every)
    assert (short["n"] < min_len).all() and (short["traj_id"] == -1).all()


def test_gap_segments_cross_midnight_and_none_ignores_gaps():
    rows = [(1, 23 * 60 + 50, 1), (1, 24 * 60 + 5, 2), (1, 24 * 60 + 5 + 300, 3)]
    day = shaping.build_trajectories(pts(rows), gap_hours=3, segment="day")
    gap = shaping.build_trajectories(pts(rows), gap_hours=3, segment="gap")
    none = shaping.build_trajectories(pts(rows), gap_hours=3, segment="none")
    assert [list(x) for x in day["loc_ids"]] == [[1], [2], [3]]
    assert [list(x) for x in gap["loc_ids"]] == [[1, 2], [3]]
    assert [list(x) for x in none["loc_ids"]] == [[1, 2, 3]]
    # the date of a trajectory is its first stay's; ids count per (user, date)
    assert gap["date"].tolist() == [T0, T0 + pd.Timedelta(days=1)]
    assert gap["traj_id"].tolist() == [0, 0]


def test_min_len_drops_short_pieces_and_renumbers():
    rows = [(1, 0, 1), (1, 400, 2), (1, 410, 3), (1, 900, 4)]
    kept, short = shaping.cut_trajectories(pts(rows), gap_hours=3, min_len=2)
    assert [list(x) for x in kept["loc_ids"]] == [[2, 3]] and kept["traj_id"].tolist() == [0]
    assert [list(x) for x in short["loc_ids"]] == [[1], [4]]


def test_file_order_keeps_input_order():
    rows = [(1, 0, 1), (1, 50, 2), (1, 30, 3)]
    traj = shaping.build_trajectories(pts(rows), order="file")
    assert list(traj["loc_ids"].iloc[0]) == [1, 2, 3]
    traj = shaping.build_trajectories(pts(rows), order="time")
    assert list(traj["loc_ids"].iloc[0]) == [1, 3, 2]


def test_invalid_parameters_raise():
    with pytest.raises(InvalidParameterError, match="max_len"):
        shaping.build_trajectories(pts([(1, 0, 1)]), max_len=0)
    with pytest.raises(InvalidParameterError, match="order"):
        shaping.build_trajectories(pts([(1, 0, 1)]), order="random")
    with pytest.raises(InvalidParameterError, match="segment"):
        shaping.build_trajectories(pts([(1, 0, 1)]), segment="week")
    with pytest.raises(InvalidParameterError, match="min_len"):
        shaping.build_trajectories(pts([(1, 0, 1)]), max_len=3, min_len=4)


def test_slot_days_mode_then_forward_and_back_fill():
    # slot 3 (90-119 min): loc 7 twice, loc 8 once -> 7; slot 10: loc 9; rest filled.
    rows = [(1, 95, 7), (1, 100, 8), (1, 110, 7), (1, 305, 9)]
    days = shaping.build_slot_days(pts(rows))
    slots = list(days["slots"].iloc[0])
    assert len(slots) == 48
    assert slots[:10] == [7] * 10  # back-filled slots 0-2, slot 3, forward-filled 4-9
    assert slots[10:] == [9] * 38


def test_slot_tie_goes_to_the_later_location():
    days = shaping.build_slot_days(pts([(1, 0, 1), (1, 20, 2)]))
    assert days["slots"].iloc[0][0] == 2


def test_fill_slots_matches_pandas_ffill_bfill():
    rng = np.random.default_rng(3)
    grid = np.where(rng.random((50, 48)) < 0.8, -1, rng.integers(0, 9, (50, 48)))
    grid[:, 5] = np.where(grid[:, 5] < 0, 4, grid[:, 5])  # every row observed somewhere
    expected = pd.DataFrame(np.where(grid < 0, np.nan, grid)).T.ffill().bfill().T.to_numpy()
    assert np.array_equal(shaping.fill_slots(grid), expected.astype(int))


def test_duplicates_are_same_user_time_and_location():
    frame = pts([(1, 0, 1), (1, 0, 1), (1, 0, 2), (2, 0, 1)])
    assert shaping.mark_duplicates(frame).tolist() == [False, True, False, False]


def test_a_duplicate_that_ends_later_still_extends_the_stay():
    """Measured defect: duplicates were found on (user, start, location) only and the kept
    record's end was kept, so a later end of a duplicate was lost (median 8 min, max 180)."""
    from jobs.ingest.readers import telecom
    from jobs.ingest.readers.common import Window
    from jobs.ingest.readers.pipeline import ReaderOptions, finish_bucket

    content = (b"user,start,end,lat,lon,loc_id\n"
               b"1,2014-06-01 08:00:00,2014-06-01 08:05:00,31.2,121.4,10\n"
               b"1,2014-06-01 08:00:00,2014-06-01 11:30:00,31.2,121.4,10\n"
               b"1,2014-06-01 14:00:00,,31.3,121.5,11\n")
    parsed = telecom.parse_csv(content, "dup.csv", Window()).assign(
        loc_id=lambda f: f["given_loc"].astype(int))
    out = finish_bucket(parsed, ReaderOptions(source="telecom", gap_hours=3))
    assert out.quarantined["reason"].tolist() == ["duplicate"]
    assert out.quarantined["line"].tolist() == [2]  # the shorter stay (line 2) is the duplicate
    # kept end 11:30 (the duplicate's): 14:00 is 2.5 h later, the same trajectory; with the
    # kept record's own end (08:05) it would be 5.9 h, a new trajectory
    assert [list(x) for x in out.trajectories["loc_ids"]] == [[10, 11]]

"""Realism statistics against hand-computed answers and the `haversine` package (the oracle)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from haversine import Unit, haversine

from jobs.datagen.stats import haversine_km, realism_stats, summarise, user_day_metrics

A = (31.2000, 121.4000)
B = (31.2000, 121.4500)  # about 4.76 km east of A
C = (31.2300, 121.4000)  # about 3.34 km north of A


def _records(rows: list[tuple[int, str, tuple[float, float], int]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user": [r[0] for r in rows],
            "start": pd.to_datetime([r[1] for r in rows]),
            "lat": [r[2][0] for r in rows],
            "lon": [r[2][1] for r in rows],
            "loc_id": [r[3] for r in rows],
        }
    )


@pytest.fixture
def sample() -> pd.DataFrame:
    # Out of order on purpose: the metrics sort by user and start themselves.
    return _records(
        [
            (1, "2014-06-01 18:00", A, 0),
            (1, "2014-06-01 08:00", A, 0),
            (1, "2014-06-01 12:00", B, 1),
            (1, "2014-06-01 13:00", B, 1),  # stay: not a jump
            (1, "2014-06-02 09:00", C, 2),  # next day: no jump from the 18:00 record
            (2, "2014-06-01 10:00", C, 2),
            (2, "2014-06-01 11:00", C, 2),
        ]
    )


def test_haversine_matches_the_package():
    rng = np.random.default_rng(5)
    lat1, lat2 = rng.uniform(30, 32, 50), rng.uniform(30, 32, 50)
    lon1, lon2 = rng.uniform(120, 122, 50), rng.uniform(120, 122, 50)
    expected = [
        haversine((a, b), (c, d), unit=Unit.KILOMETERS)
        for a, b, c, d in zip(lat1, lon1, lat2, lon2, strict=True)
    ]
    np.testing.assert_allclose(haversine_km(lat1, lon1, lat2, lon2), expected, rtol=1e-9)


def test_per_day_metrics(sample):
    per_day, jumps = user_day_metrics(sample)
    assert list(per_day["n_records"]) == [4, 1, 2]
    assert list(per_day["n_distinct"]) == [2, 1, 1]
    # Two records at A, two at B: the centroid is the midpoint, every record is d(A,B)/2 from it.
    d_ab = haversine(A, B, unit=Unit.KILOMETERS)
    assert per_day["rg_km"].iloc[0] == pytest.approx(d_ab / 2, rel=1e-6)
    assert per_day["rg_km"].iloc[1] == 0 and per_day["rg_km"].iloc[2] == 0
    # Jumps of user 1 on day 1: A->B (08:00 -> 12:00) and B->A (13:00 -> 18:00); none else.
    np.testing.assert_allclose(sorted(jumps), [d_ab, d_ab], rtol=1e-9)


def test_input_is_not_modified(sample):
    before = sample.copy()
    user_day_metrics(sample)
    pd.testing.assert_frame_equal(sample, before)


def test_summary_figures(sample):
    stats = realism_stats(sample, users=2, days=2)
    assert stats["records"] == 7 and stats["user_days"] == 3 and stats["jumps"] == 2
    assert stats["distinct_median"] == 1.0
    assert stats["rg_zero_share"] == pytest.approx(2 / 3, abs=1e-4)
    assert stats["active_share"] == pytest.approx(3 / 4)
    assert stats["records_per_active_day_mean"] == pytest.approx(7 / 3, abs=1e-4)


def test_empty_input_summarises_to_zero():
    per_day, jumps = user_day_metrics(_records([]))
    assert summarise(per_day, jumps) == {"user_days": 0, "records": 0}

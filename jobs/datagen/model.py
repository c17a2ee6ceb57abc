"""Per-user kernel of the synthetic Telecom-Shanghai generator (docs/architecture.md section 5). No
pyspark.

One call, `simulate_user(user_id, stations, params)`, returns every record of one phone over the
whole period; `simulate_users` stacks several. The Spark stage (`jobs/datagen/stage.py`) calls
it from `mapInArrow`; unit tests call it on plain pandas.

Model (EPR with TimeGeo-style days; Song et al. 2010, Jiang et al. PNAS 2016):
- a user has a home (drawn by station popularity) and, with probability `work_share`, a work
  place 2-15 km away (popularity times distance^-work_decay, so short commutes dominate);
- a user is active on a day with its own probability (Beta around `active_share`); only active
  days are simulated (a phone with no record that day leaves no trace in the data);
- on an active day the phone leaves home with its own probability; an outing departs around
  08:00, comes back around 18:00 and visits `k` stops (geometric, per-user mean). On weekdays a
  worker's first stop is mostly work; every other stop is an EPR step (`datagen_walk.Walker`);
  moves take time (0.1 h + km / 20 km/h);
- records: 1 + Poisson(per-user rate) a day, start times from a circadian profile that is low at
  02-05 h, short sessions (log-normal, about 4 min) that end before the next record starts; a
  record's station is where the itinerary puts the phone at its start time. A few records fall
  while travelling (`transit_share`: the station nearest the route), and a per-user share
  (`handover`, mean 19 %) is served by a neighbouring cell, mostly one of the nearest three, as
  phones do. Serving cells are sticky while the phone stays put (`handover_stick`: reselection
  hysteresis), so a handover is a short excursion to a neighbour cell, not a ping-pong on every
  record (independent per-record handovers made too many sub-kilometre jumps: a jump median of
  2.0 km against the real 2.4 km).

The defaults were calibrated on 1,500 users x 182 days (two disjoint user ranges) against the
realism targets of docs/architecture.md section 5 (`jobs.datagen.stats`); the job reports the
figures of every run.

Randomness: one `numpy.random.Generator` per user from SeedSequence(seed, spawn_key=(0, user)),
so a user's records do not depend on which Spark partition, batch or order produced them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jobs.datagen.params import MobilityParams
from jobs.datagen.stations import StationIndex
from jobs.datagen.walk import Itinerary, Walker, km_between, pick_work

USER_SPAWN_KEY = 0  # the station layout uses spawn key 1 (datagen_stations.LAYOUT_SPAWN_KEY)
RECORD_COLUMNS = ["user", "start", "end", "lat", "lon", "loc_id"]

# Which of the k nearest other stations serves a handed-over record: mostly the nearest one.
NEIGHBOUR_PICK = {k: np.array([0.35, 0.25, 0.15, 0.1, 0.1, 0.05][:k]) for k in range(1, 7)}
NEIGHBOUR_PICK = {k: w / w.sum() for k, w in NEIGHBOUR_PICK.items()}

# Share of phone records per hour of day: low 02-05 h, a morning rise, an evening peak.
CIRCADIAN = np.array(
    [3.5, 2.0, 1.0, 0.6, 0.6, 1.0, 2.5, 4.5, 5.5, 5.5, 5.5, 5.5,
     5.5, 5.0, 5.0, 5.0, 5.0, 5.5, 5.5, 6.0, 6.5, 6.5, 6.0, 5.0]
)  # fmt: skip
CIRCADIAN = CIRCADIAN / CIRCADIAN.sum()


def user_rng(seed: int, user_id: int) -> np.random.Generator:
    """The generator of one user: independent of partitioning and of the other users."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(USER_SPAWN_KEY, user_id)))


def _beta(rng: np.random.Generator, mean: float, concentration: float) -> float:
    if mean >= 1:
        return 1.0
    if mean <= 0:
        return 0.0
    return float(rng.beta(mean * concentration, (1 - mean) * concentration))


def simulate_user(user_id: int, st: StationIndex, p: MobilityParams) -> pd.DataFrame:
    """All records of one user: columns RECORD_COLUMNS, sorted by start."""
    rng = user_rng(p.seed, user_id)
    home = int(rng.choice(len(st), p=st.weight))
    work = pick_work(home, st, p, rng) if rng.random() < p.work_share else -1
    activity = _beta(rng, p.active_share, 2.0)
    out_prob = _beta(rng, p.out_share, 4.0)
    extra = (p.stops_mean - 1.0) / p.stops_shape
    stops_mean = 1.0 + rng.gamma(p.stops_shape, extra) if p.stops_mean > 1 else 1.0
    handover = _beta(rng, p.handover, 8.0)
    rate = rng.gamma(p.rate_shape, (p.records_per_day - 1.0) / p.rate_shape)
    scale = float(np.exp(rng.normal(0.0, p.range_sigma)))

    days = np.flatnonzero(rng.random(p.days) < activity)
    n_days = len(days)
    if n_days == 0:
        return empty_records()
    weekday = (np.datetime64(p.start_date, "D") + days).astype("datetime64[D]")
    weekday = ((weekday.astype(np.int64) + 3) % 7) < 5  # 1970-01-01 was a Thursday
    goes_out = rng.random(n_days) < out_prob
    depart = np.clip(rng.normal(8.0, 1.5, n_days), 5.0, 13.0)
    back = np.clip(depart + rng.normal(10.0, 2.5, n_days), depart + 1.0, 23.5)
    n_stops = np.minimum(rng.geometric(1.0 / stops_mean, n_days), 10)

    walker = Walker(st, p, rng, home, scale)
    if work >= 0:
        walker.visit(work)
    plan = Itinerary()
    for i, day in enumerate(days):
        base = 24.0 * day
        plan.stay(base, walker.visit(home))
        if not goes_out[i]:
            continue
        stops = np.sort(rng.uniform(depart[i], back[i], n_stops[i] - 1))
        times = np.concatenate(([depart[i]], stops, [back[i]]))
        cur = home
        for s in range(n_stops[i] + 1):
            if s == n_stops[i]:
                nxt = walker.visit(home)
            elif s == 0 and work >= 0 and weekday[i] and rng.random() < p.commute_share:
                nxt = walker.visit(work)
            else:
                nxt = walker.step(cur)
            limit = (times[s + 1] if s < n_stops[i] else 24.0) - times[s]
            travel = min(p.travel_h[0] + km_between(st, cur, nxt) / p.travel_h[1], 0.5 * limit)
            plan.move(base + times[s], cur, nxt, travel, i)
            cur = nxt

    # Records: 1 + Poisson(rate) a day at circadian times; a share of an outing day's records
    # fall while travelling (phones are used on the way).
    n_rec = 1 + rng.poisson(rate, n_days)
    rec_i = np.repeat(np.arange(n_days), n_rec)
    hours = rng.choice(24, size=len(rec_i), p=CIRCADIAN) + rng.random(len(rec_i))
    t = 24.0 * days[rec_i] + hours
    t = plan.move_into_transit(t, rec_i, n_days, p.transit_share, rng)
    start = np.unique(np.floor(t * 3600.0).astype(np.int64))  # sorted; no two at one second
    end = _session_ends(start, p, rng)
    loc = serving_cells(plan.locate(start / 3600.0, st), start // 86400, handover, p, st, rng)
    return _records_frame(user_id, start, end, loc, st, p)


def _session_ends(start: np.ndarray, p: MobilityParams, rng: np.random.Generator) -> np.ndarray:
    """Each record's end (seconds from the start date): a log-normal session, cut at the next
    record's start and at the end of its day."""
    dur = np.rint(rng.lognormal(np.log(p.session_median_s), 1.0, len(start))).astype(np.int64)
    day_end = (start // 86400) * 86400 + 86399
    next_start = np.r_[start[1:] - 1, day_end[-1]]
    return np.maximum(start, np.minimum.reduce([start + dur, next_start, day_end]))


def _records_frame(user_id: int, start: np.ndarray, end: np.ndarray, loc: np.ndarray,
                   st: StationIndex, p: MobilityParams) -> pd.DataFrame:
    """The RECORD_COLUMNS frame of one user's records (start, end: seconds from the start
    date; loc: station indices)."""
    origin = np.datetime64(p.start_date, "s")
    return pd.DataFrame(
        {
            "user": np.full(len(start), user_id, np.int64),
            "start": (origin + start).astype("datetime64[us]"),
            "end": (origin + end).astype("datetime64[us]"),
            "lat": st.lat[loc],
            "lon": st.lon[loc],
            "loc_id": st.loc_id[loc],
        }
    )


def serving_cells(
    loc: np.ndarray,
    day: np.ndarray,
    handover: float,
    p: MobilityParams,
    st: StationIndex,
    rng: np.random.Generator,
) -> np.ndarray:
    """The station that serves each record, given where the phone is (`loc`, by start time).

    A record is served by a neighbouring cell with probability `handover`, mostly the nearest
    one. Serving cells are sticky (reselection hysteresis): while the phone stays at one place,
    a record keeps the previous record's serving cell with probability `handover_stick` and is
    drawn afresh otherwise; a new place or a new day always draws afresh. Copying keeps the
    share of neighbour-served records at `handover` but makes fewer back-and-forth switches,
    each of which would be a short jump between two adjacent cells.
    """
    n = len(loc)
    new_place = np.r_[True, (loc[1:] != loc[:-1]) | (day[1:] != day[:-1])]
    fresh = new_place | (rng.random(n) >= p.handover_stick)
    served = rng.random(n) < handover
    k = st.neighbours.shape[1]
    pick = rng.choice(k, size=n, p=NEIGHBOUR_PICK[k])
    source = np.maximum.accumulate(np.where(fresh, np.arange(n), 0))  # last fresh draw
    out = loc.copy()
    use = served[source]
    out[use] = st.neighbours[loc[use], pick[source][use]]
    return out


def simulate_users(user_ids: np.ndarray, st: StationIndex, p: MobilityParams) -> pd.DataFrame:
    """Records of several users, in the order given (each user's records sorted by start)."""
    frames = [simulate_user(int(u), st, p) for u in np.asarray(user_ids)]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else empty_records()


def empty_records() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "user": np.empty(0, np.int64),
            "start": np.empty(0, "datetime64[us]"),
            "end": np.empty(0, "datetime64[us]"),
            "lat": np.empty(0, float),
            "lon": np.empty(0, float),
            "loc_id": np.empty(0, np.int64),
        }
    )

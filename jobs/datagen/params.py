"""The parameters of the synthetic mobility model, validated on construction (no pyspark).

Its own module so that the kernel (`jobs.datagen.model`) and the walker (`jobs.datagen.walk`)
both import it without importing each other.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from udfs.errors import InvalidParameterError


@dataclass(frozen=True)
class MobilityParams:
    """Everything the kernel needs besides the stations; validated on construction."""

    seed: int
    days: int
    start_date: dt.date
    active_share: float = 0.37
    work_share: float = 0.8
    records_per_day: float = 8.5
    rho: float = 0.6
    gamma: float = 0.21
    out_share: float = 0.6  # mean chance that an active day leaves home
    stops_mean: float = 2.3  # mean stops of an outing (population mean of per-user means)
    commute_share: float = 0.85  # chance a worker's weekday outing starts at work
    work_km: tuple[float, float] = (2.0, 15.0)
    work_decay: float = 1.5
    jump_r0_km: float = 1.0  # explore distance density proportional to (r + r0)^-beta
    jump_beta: float = 1.25
    jump_km: tuple[float, float] = (0.3, 80.0)
    session_median_s: float = 240.0
    rate_shape: float = 2.0  # Gamma shape of the per-user record rate (smaller: more spread)
    stops_shape: float = 1.5  # Gamma shape of the per-user extra stops
    handover: float = 0.19  # mean share of records served by a neighbouring station
    handover_stick: float = 0.5  # chance a record at the same place keeps the last serving cell
    range_sigma: float = 1.0  # per-user explore range multiplier exp(N(0, sigma))
    transit_share: float = 0.05  # share of an outing day's records made while travelling
    travel_h: tuple[float, float] = (0.1, 20.0)  # travel time = [0] h + km / [1] km/h

    def __post_init__(self) -> None:
        checks = {
            "days": self.days >= 1,
            "active_share": 0 < self.active_share <= 1,
            "work_share": 0 <= self.work_share <= 1,
            "records_per_day": self.records_per_day > 1,
            "rho": 0 < self.rho <= 1,
            "gamma": self.gamma >= 0,
            "out_share": 0 <= self.out_share < 1,
            "stops_mean": self.stops_mean >= 1,
            "commute_share": 0 <= self.commute_share <= 1,
            "work_km": 0 < self.work_km[0] < self.work_km[1],
            "jump_km": 0 < self.jump_km[0] < self.jump_km[1],
            "jump_beta": self.jump_beta > 1,
            "handover": 0 <= self.handover < 1,
            "handover_stick": 0 <= self.handover_stick < 1,
            "range_sigma": self.range_sigma >= 0,
            "transit_share": 0 <= self.transit_share < 1,
            "travel_h": self.travel_h[0] >= 0 and self.travel_h[1] > 0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise InvalidParameterError(f"datagen parameters out of range: {bad} ({self})")

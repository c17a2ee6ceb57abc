"""The value types several sections share: one home for each rule, and for its error message.

An `Annotated` type carries its check wherever it is used, so the rule (and the wording the
bad-input catalogue pins) cannot drift between sections. The checks that apply to a list or to
two fields at once are plain functions the sections call from their validators.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from udfs.budget import MAX_CONFIG_EPSILON, valid_epsilon


class Section(BaseModel):
    """A config section: unknown keys are refused (a misspelt key fails at start, naming it)
    and values are frozen (a stage cannot change what the next stage reads)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"must be finite, got {value}")
    return value


def check_epsilon(value: float) -> float:
    """An LDP epsilon the ledger can charge: finite, > 0 and at most MAX_CONFIG_EPSILON."""
    if not valid_epsilon(value, at_most=MAX_CONFIG_EPSILON):
        raise ValueError(f"each epsilon must be finite and in (0, {MAX_CONFIG_EPSILON:g}], "
                         f"got {value}")
    return value


Box = tuple[float, float, float, float]


def lat_lon_box(value: Box | None) -> Box | None:
    """[lat_min, lat_max, lon_min, lon_max] inside the globe, each min below its max."""
    if value is not None:
        lat0, lat1, lon0, lon1 = value
        if not (-90 <= lat0 < lat1 <= 90 and -180 <= lon0 < lon1 <= 180):
            raise ValueError("expected [lat_min, lat_max, lon_min, lon_max] with min < max")
    return value


def check_window(start: dt.date | None, end: dt.date | None) -> None:
    """An inclusive date window, either end open (None), must not end before it starts."""
    if start and end and end < start:
        raise ValueError(f"window_end {end} is before window_start {start}")


Finite = Annotated[float, AfterValidator(finite)]
Epsilon = Annotated[float, AfterValidator(check_epsilon)]
LatLonBox = Annotated[Box, AfterValidator(lat_lon_box)]
# Annotated outside the union: the field's annotation stays `Box | None` (what the config
# reference prints), the check runs on the value either way.
OptionalLatLonBox = Annotated[Box | None, AfterValidator(lat_lon_box)]

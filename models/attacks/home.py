"""Home re-identification on published data (docs/architecture.md section 7).

Question: from what is published under a pseudonym, can an attacker find where the person lives?
Figure: the share of users whose inferred home lies within `radius_km` (1 km) of their true home,
reported for raw data and UNIFORM output as the two ends of the scale.

Definitions (one rule for every input, so raw, perturbed and UNIFORM are comparable):
- Inputs are pandas frames with columns `who`, `lat`, `lon`, plus optionally a boolean `night`.
  Published LDP data (`trajpriv_pub.perturbed_points`) carries only a date and the order of points
  inside a trajectory whose key is a keyed hash: no time of day, and not even the order of a
  day's trajectories. "Night-time" therefore cannot be evaluated on it; the attacker's rule is
  the *density mode of all the pseudonym's points*: the published point with the most of the
  pseudonym's points within `bandwidth_km` (ties: the smaller summed distance to those
  neighbours, then the first row). On raw data this is (almost always) the most frequent
  location. A frame with a `night` column (synthetic days: slots 0-11 and 44-47, i.e.
  22:00-06:00) restricts the candidates to night rows when the pseudonym has any; the same rule
  is then applied to raw and to every published variant of that data.
- True home (the ground truth; the attacker never sees it): the same density mode over the raw
  points whose local time of day is at night (`night_hours`, default 20:00-07:00), falling back
  to all raw points for users without a night point. It uses the raw timestamps, which only the
  evaluator holds.
- The evaluator links a pseudonym to its user (the pipeline holds the pseudonym key); the caller
  passes both frames with the same `who` values.
Runtime: O(sum over users of n_u^2) distances (check-in data has a few to a few hundred points
per user).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from udfs.errors import InputDataError, InvalidParameterError
from udfs.geo import EARTH_RADIUS_KM, haversine_km

NIGHT_SLOTS = tuple(range(0, 12)) + tuple(range(44, 48))


def _need(df: pd.DataFrame, cols: list[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputDataError(f"{what} frame lacks columns {missing}; it needs {cols}")


def density_mode(lat: np.ndarray, lon: np.ndarray, bandwidth_km: float) -> int:
    """Index of the point with the most points within `bandwidth_km` (itself included)."""
    d = haversine_km(lat[:, None], lon[:, None], lat[None, :], lon[None, :])
    near = d <= bandwidth_km
    count = near.sum(1)
    spread = np.where(near, d, 0).sum(1)
    best = np.flatnonzero(count == count.max())
    return int(best[np.argmin(spread[best])])  # argmin keeps the first of equal spreads


def infer_homes(points: pd.DataFrame, *, bandwidth_km: float = 0.5) -> pd.DataFrame:
    """One home per `who`: (who, lat, lon) by the density-mode rule above (night rows only when
    a `night` column is present and the user has night rows)."""
    _need(points, ["who", "lat", "lon"], "points")
    if not bandwidth_km > 0:
        raise InvalidParameterError(f"bandwidth_km={bandwidth_km} must be > 0")
    rows = []
    for who, g in points.groupby("who", sort=True):
        if "night" in g.columns and g["night"].any():
            g = g[g["night"].astype(bool)]
        lat, lon = g["lat"].to_numpy(float), g["lon"].to_numpy(float)
        i = density_mode(lat, lon, bandwidth_km)
        rows.append((who, lat[i], lon[i]))
    return pd.DataFrame(rows, columns=["who", "lat", "lon"])


def night_mask(ts: pd.Series, night_hours: tuple[int, int] = (20, 7)) -> np.ndarray:
    """True where the local hour is in [start, 24) or [0, end)."""
    start, end = night_hours
    h = pd.to_datetime(ts).dt.hour.to_numpy()
    return (h >= start) | (h < end) if start > end else (h >= start) & (h < end)


def true_homes(raw_points: pd.DataFrame, *, night_hours: tuple[int, int] = (20, 7),
               bandwidth_km: float = 0.5) -> pd.DataFrame:
    """Ground-truth homes from raw points with local timestamps `ts` (or a ready `night`)."""
    df = raw_points
    if "night" not in df.columns:
        _need(df, ["who", "lat", "lon", "ts"], "raw points")
        df = df.assign(night=night_mask(df["ts"], night_hours))
    return infer_homes(df, bandwidth_km=bandwidth_km)


def home_reidentification(true_points: pd.DataFrame, published_points: pd.DataFrame, *,
                          radius_km: float = 1.0, bandwidth_km: float = 0.5,
                          night_hours: tuple[int, int] = (20, 7), n_boot: int = 1000,
                          seed: int = 0) -> dict:
    """Share of users whose home inferred from `published_points` lies within `radius_km` of
    the true home from `true_points` (columns who, lat, lon, ts local time, or a `night` flag).

    Users without published points count as not re-identified. Returns share, a bootstrap
    95% interval over users, the number of users and the median error in km."""
    truth = true_homes(true_points, night_hours=night_hours, bandwidth_km=bandwidth_km)
    guess = infer_homes(published_points, bandwidth_km=bandwidth_km)
    m = truth.merge(guess, on="who", how="left", suffixes=("_true", "_pub"))
    err = haversine_km(m["lat_true"], m["lon_true"], m["lat_pub"], m["lon_pub"])
    hit = np.nan_to_num(err, nan=np.inf) <= radius_km
    if hit.size == 0:
        raise InputDataError("no users in the true points")
    rng = np.random.default_rng(seed)
    boots = hit[rng.integers(0, hit.size, (n_boot, hit.size))].mean(1)
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return {"share_within_km": float(hit.mean()), "share_lo": float(lo), "share_hi": float(hi),
            "n_users": int(hit.size), "radius_km": radius_km,
            "median_error_km": float(np.nanmedian(err)) if np.isfinite(err).any() else np.nan,
            "covered_users": int(np.isfinite(err).sum())}


def home_coverage(true_home: pd.DataFrame, published_homes: pd.DataFrame,
                  radius_km: float = 1.0) -> float:
    """For unlinked output (synthetic days): share of true homes with at least one published
    home (e.g. `infer_homes` of synthetic days, one per day) within `radius_km`. Not a
    re-identification rate: compare it with the same figure for UNIFORM output of equal size."""
    _need(true_home, ["lat", "lon"], "true homes")
    _need(published_homes, ["lat", "lon"], "published homes")
    if published_homes.empty:
        return 0.0
    from sklearn.neighbors import BallTree

    tree = BallTree(np.radians(published_homes[["lat", "lon"]].to_numpy(float)),
                    metric="haversine")
    d, _ = tree.query(np.radians(true_home[["lat", "lon"]].to_numpy(float)), k=1)
    return float((d[:, 0] * EARTH_RADIUS_KM <= radius_km).mean())

"""Spark column expressions shared by the stages: the one home of each formula written in Spark SQL.

What it holds: `haversine_km_col(lat1, lon1, lat2, lon2)`, the haversine distance in km as a
Spark Column (double), the Spark twin of `udfs.geo.haversine_km`: the same radius
(`udfs.geo.EARTH_RADIUS_KM`, the `haversine` package's), the package's operation order, and the
same cap of the haversine term at 1 (so antipodal points give pi R, not NaN).

Why here: a stage's helper module (e.g. jobs/collect/metrics.py) that needs a Spark expression
takes it from jobs/spark/ (only jobs/spark/* and jobs/<stage>/stage.py import pyspark), and one
expression per formula keeps every stage's distances equal to the numpy reference. Callers that
compare with float32 tables (`udfs.space.LocationSpace.dist`) round the result themselves.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from udfs.geo import EARTH_RADIUS_KM


def haversine_km_col(lat1: Column, lon1: Column, lat2: Column, lon2: Column) -> Column:
    """Great-circle km between two points in degrees (double): R * 2 asin(sqrt(min(1, a))),
    a = sin^2(dphi / 2) + cos(phi1) cos(phi2) sin^2(dlambda / 2), as `udfs.geo.haversine_km`."""
    la1, lo1, la2, lo2 = (F.radians(c) for c in (lat1, lon1, lat2, lon2))
    a = F.pow(F.sin((la2 - la1) * 0.5), 2) + F.cos(la1) * F.cos(la2) * F.pow(
        F.sin((lo2 - lo1) * 0.5), 2
    )
    return F.lit(EARTH_RADIUS_KM) * (F.lit(2.0) * F.asin(F.sqrt(F.least(a, F.lit(1.0)))))

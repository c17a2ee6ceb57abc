"""The utility definitions of `udfs.metrics`, composed one by one: the oracle the production
figures (`udfs.metrics.utility`, `jobs.collect.metrics.ldp_metrics`) are checked against."""

from __future__ import annotations

from udfs import metrics as M


def reference_figures(true, pert, space, prq_km, top) -> dict[str, float]:
    """NE, PRQ@delta per delta, ACD and KendallTau of the pairs, each from its definition."""
    return {"NE": M.ne(true, pert, space),
            **{M.prq_name(d): M.prq(true, pert, space, d) for d in prq_km},
            "ACD": M.acd(true, pert, space, top),
            "KendallTau": M.kendall_tau(true, pert, space, top)}

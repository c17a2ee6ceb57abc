"""One config's ingestion on pandas, without Spark: a dataset built exactly as `trajpriv
ingest` builds it (the same plan, readers, location mapping and trajectory rules), for the
benches and tests that need the trajectories in memory (`bench/reproduce_ldp.py` rebuilds the
paper's CHI and CPS sets from `conf/chi_paper.yaml` / `conf/cps_paper.yaml` through this). No
pyspark; small inputs only (everything is held in memory).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from jobs.config import Config
from jobs.ingest.locmap import Grid, LocationSet
from jobs.ingest.readers.pipeline import ingest_local
from jobs.ingest.readers.plan import plan_inputs
from udfs.errors import InputDataError
from udfs.space import LocationSpace


def ingest_config_local(cfg: Config) -> tuple[dict[str, pd.DataFrame], LocationSet]:
    """The tables `trajpriv ingest` would write for `cfg` (see `ingest_local`) and P."""
    plan = plan_inputs(cfg)
    if plan.kind != "text":
        raise InputDataError(f"{plan.where}: the local ingestion reads text inputs only")
    tables, locations = ingest_local([Path(f) for f in plan.files], plan.opts, plan.locations)
    if isinstance(locations, Grid) and locations.bbox is not None:  # every cell of the box
        cells = locations.frame()
        ids = cells["loc_id"].to_numpy(np.int64)
        return tables, LocationSet(ids, cells["lat"].to_numpy(), cells["lon"].to_numpy(),
                                   ids.astype(str).astype(object))
    if not isinstance(locations, LocationSet):
        raise InputDataError(f"{plan.where}: the local ingestion needs a location set or a "
                             "grid with a box (ingest.grid_bbox)")
    return tables, locations


def trajectories_local(cfg: Config) -> tuple[LocationSpace, list[np.ndarray], pd.DataFrame]:
    """(P as the mechanisms index it, each trajectory's positions in P, the trajectory rows).

    Trajectories are ordered by (user_id, date, traj_id); a location's position is its rank
    among P's ids, as `trajpriv collect` indexes P."""
    tables, locations = ingest_config_local(cfg)
    order = np.argsort(locations.loc_id, kind="stable")
    ids = locations.loc_id[order]
    space = LocationSpace.from_latlon(locations.lat[order], locations.lon[order])
    rows = tables["trajectories"].sort_values(["user_id", "date", "traj_id"], kind="stable")
    rows = rows.reset_index(drop=True)
    trajectories = [np.searchsorted(ids, np.asarray(t, dtype=np.int64)) for t in rows["loc_ids"]]
    return space, trajectories, rows


CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
PAPER_SETS = {"chi": "chi_paper.yaml", "cps": "cps_paper.yaml"}  # the TP/ATP paper's datasets


def paper_dataset(name: str, data_dir: Path, overrides: list[str] | None = None,
                  ) -> tuple[LocationSpace, list[np.ndarray], pd.DataFrame]:
    """CHI or CPS as `conf/<name>_paper.yaml` builds them, read from `data_dir/ldp_checkins`
    (the configs' own paths are relative to the project root; benches and tests run anywhere).
    `overrides`: further `key=value` settings. Returns `trajectories_local`'s triple."""
    from jobs.config import load_config

    if name not in PAPER_SETS:
        raise InputDataError(f"unknown paper dataset {name!r}; use one of {sorted(PAPER_SETS)}")
    conf = CONF_DIR / PAPER_SETS[name]
    icfg = load_config(conf).ingest
    folder = Path(data_dir) / "ldp_checkins"
    paths = [f"ingest.path={folder / icfg.path.name}"]
    if icfg.locations_path is not None:
        paths.append(f"ingest.locations_path={folder / icfg.locations_path.name}")
    return trajectories_local(load_config(conf, paths + list(overrides or [])))

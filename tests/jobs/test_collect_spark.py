"""`trajpriv collect` on the shared SparkSession: ledger, idempotence, determinism, metrics, leaks.

One small dataset ("collect_test": 12 users, 2 weeks, 30 locations) is collected once per module
(ATP and EXP at epsilon 1 and 4); the other runs reuse or extend it. Spark starts are the cost
on this box, so every test shares the session fixture and the module's runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import stat
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from jobs import collect as C
from jobs.catalog import write_table
from jobs.config import config_from_mapping
from jobs.keys import pseudonym, pseudonym_key
from jobs.stage import execute
from udfs import collect_kernel as K
from udfs import metrics as M

pytestmark = pytest.mark.spark

DATASET = "collect_test"
N_LOC = 30
BUDGET = 45.0  # the main sweep costs 1 + 4 + 1 + 4 = 10 per trajectory: 4 fit in a week
SWEEP = {"mechanisms": ["atp", "exp"], "epsilons": [1.0, 4.0]}
START, END = dt.date(2014, 6, 2), dt.date(2014, 6, 15)  # Mon .. Sun: two budget weeks


def _raw_data(seed: int = 11):
    rng = np.random.default_rng(seed)
    lat = 31.20 + rng.random(N_LOC) * 0.08
    lon = 121.40 + rng.random(N_LOC) * 0.08
    locations = pd.DataFrame({"dataset": DATASET, "loc_id": np.arange(N_LOC, dtype=np.int32),
                              "lat": lat, "lon": lon})
    trajs, points = [], []
    for u in range(12):
        user = f"SECRET-USER-{u:04d}-x"
        for day in range((END - START).days + 2):  # one day past the window: must be left out
            date = START + dt.timedelta(days=day)
            for k in range(int(rng.choice([0, 1, 1, 2]))):
                n = int(rng.integers(1, 7))
                ids = rng.integers(0, N_LOC, n).astype(np.int32)
                secs = np.sort(rng.choice(86_400, n, replace=False)).astype(np.int64)
                ts = [dt.datetime.combine(date, dt.time()) + dt.timedelta(seconds=int(s))
                      for s in secs]
                trajs.append({"dataset": DATASET, "user_id": user, "traj_id": k, "date": date,
                              "loc_ids": ids.tolist(), "ts": ts, "n": n})
                for i, t in zip(ids, ts, strict=True):  # raw GPS fixes near their station
                    points.append({"dataset": DATASET, "user_id": user, "ts": t,
                                   "lat": lat[i] + rng.normal(0, 2e-4),
                                   "lon": lon[i] + rng.normal(0, 2e-4),
                                   "loc_id": int(i), "date": date})
    return locations, pd.DataFrame(trajs), pd.DataFrame(points)


def _config(spark_config, **collect):
    tree = spark_config.model_dump(mode="json")
    tree["dataset"] = DATASET
    tree["collect"] = {**SWEEP, "user_budget": BUDGET, "window_days": 7,
                       "window_start": START.isoformat(), "window_end": END.isoformat(),
                       "run_label": "t", "prq_km": [0.5, 2.0], "acd_top_fraction": 0.2,
                       **collect}
    return config_from_mapping(tree)


def _collect(spark, cfg, run_id, fresh=False):
    return execute("collect", C.run, cfg, argparse.Namespace(fresh=fresh), spark, run_id)


@pytest.fixture(scope="module")
def raw(spark):
    locations, trajs, points = _raw_data()
    write_table(spark.createDataFrame(locations), C.LOCATIONS, partition_by=["dataset"],
                replace={"dataset": DATASET})
    schema = ("dataset string, user_id string, traj_id int, date date, loc_ids array<int>, "
              "ts array<timestamp>, n int")
    # The layout ingest writes: partitioned by (dataset, date).
    write_table(spark.createDataFrame(trajs[schema_cols(schema)], schema), C.TRAJECTORIES,
                partition_by=["dataset", "date"], replace={"dataset": DATASET})
    # `points` (the raw GPS fixes) stays in pandas: the leak test's oracle of raw coordinates.
    return locations, trajs, points


def schema_cols(schema: str) -> list[str]:
    return [part.strip().split(" ")[0] for part in schema.split(",")]


@pytest.fixture(scope="module")
def first(spark, spark_config, raw):
    cfg = _config(spark_config)
    figures = _collect(spark, cfg, "collect-test-1")
    return cfg, figures


def _ledger(spark, run_id=None):
    df = spark.table(C.LEDGER)
    if run_id:
        df = df.where(df.run_id == run_id)
    return df.toPandas()


def _published(spark, run_label="t"):
    return spark.table(C.PUBLISHED).where(
        f"dataset = '{DATASET}' AND run_label = '{run_label}'").toPandas()


# ----------------------------------------------------------------------------- ledger
def test_budget_is_enforced_in_time_order_with_refusals_counted(spark, raw, first):
    cfg, figures = first
    _, trajs, _ = raw
    inside = trajs[(trajs["date"] >= START) & (trajs["date"] <= END)].copy()
    # Oracle: per user and calendar week (Mon-Sun), the first 4 trajectories in time order fit.
    inside["week"] = [d - dt.timedelta(days=d.weekday()) for d in inside["date"]]
    inside = inside.sort_values(["user_id", "date", "traj_id"])
    inside["rank"] = inside.groupby(["user_id", "week"]).cumcount()
    expect_released = inside[inside["rank"] < 4]
    assert figures["trajectories_in_window"] == len(inside)
    assert figures["trajectories_released"] == len(expect_released)
    assert figures["refused"] == {K.WINDOW_EXHAUSTED: int((inside["rank"] >= 4).sum())}
    assert figures["refused"][K.WINDOW_EXHAUSTED] > 0  # the data must exercise refusals

    ledger = _ledger(spark, "collect-test-1")
    assert len(ledger) == 4 * len(expect_released)  # one row per released trajectory x setting
    assert set(ledger["stage"]) == {"collect"} and (ledger["delta"] == 0).all()
    per_window = ledger.groupby(["user_id", "window_start"])["epsilon"].sum()
    assert (per_window <= BUDGET).all()
    got = Counter(zip(ledger["user_id"], ledger["window_start"], strict=True))
    want = Counter()
    for u, w in zip(expect_released["user_id"], expect_released["week"], strict=True):
        want[(u, w)] += 4
    assert got == want

    pub = _published(spark)
    assert len(pub) == 4 * len(expect_released)
    assert set(pub["run_id"]) == {"collect-test-1"}
    assert pub.groupby(["mechanism", "epsilon"]).size().to_dict() == {
        (m, e): len(expect_released) for m in SWEEP["mechanisms"] for e in SWEEP["epsilons"]}
    assert (pub["n"] == pub["loc_ids"].map(len)).all()
    explain = figures["explain"]
    assert "mechanism_steps" in Path(explain).read_text()


def test_a_sweep_over_the_user_budget_is_refused_before_any_spend(spark, spark_config, raw):
    from udfs.errors import BudgetExceededError

    cfg = _config(spark_config, run_label="over", user_budget=4.0)
    before = spark.table(C.LEDGER).count()
    with pytest.raises(BudgetExceededError, match=r"needs epsilon 10 per trajectory"):
        _collect(spark, cfg, "collect-test-over")
    assert spark.table(C.LEDGER).count() == before


# ----------------------------------------------------------------------------- idempotence
def test_rerun_reuses_and_fresh_spends_again(spark, spark_config, raw, first, monkeypatch,
                                             tmp_path, capsys):
    cfg, figures = first
    ledger_before = _ledger(spark)
    pub_before = _published(spark)

    # The same collection through the CLI: reused, nothing spent.
    import jobs.session

    monkeypatch.setattr(jobs.session, "stop_spark", lambda s: None)  # keep the shared session
    conf = tmp_path / "collect.yaml"
    conf.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    from jobs.cli import main as cli

    assert cli(["collect", "--config", str(conf), "--run-id", "collect-test-2"]) == 0
    ledger_after = _ledger(spark)
    assert len(ledger_after) == len(ledger_before)
    pd.testing.assert_frame_equal(
        _published(spark).sort_values(["mechanism", "epsilon", "traj_key"]).reset_index(drop=True),
        pub_before.sort_values(["mechanism", "epsilon", "traj_key"]).reset_index(drop=True))

    # `trajpriv sql` answers over the published view.
    capsys.readouterr()
    q = ("SELECT mechanism, epsilon, count(*) AS points FROM trajpriv_pub.perturbed_points "
         f"WHERE dataset = '{DATASET}' GROUP BY 1, 2 ORDER BY 1, 2")
    assert cli(["sql", q, "--config", str(conf)]) == 0
    shown = capsys.readouterr().out
    table = {
        (cells[0], float(cells[1])): int(cells[2])
        for line in shown.splitlines() if line.startswith("|")
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
        if cells[0] != "mechanism"
    }
    assert table == pub_before.groupby(["mechanism", "epsilon"])["n"].sum().to_dict()

    # --fresh: one setting again, a new release number, new spend on top of the old.
    fresh_cfg = _config(spark_config, mechanisms=["exp"], epsilons=[1.0])
    figures3 = _collect(spark, fresh_cfg, "collect-test-3", fresh=True)
    assert figures3["released_settings"] == ["exp@1#1"]
    led3 = _ledger(spark, "collect-test-3")
    assert len(led3) == figures3["trajectories_released"] > 0
    assert (led3["epsilon"] == 1.0).all()
    total = _ledger(spark).groupby(["user_id", "window_start"])["epsilon"].sum()
    assert (total <= BUDGET).all()  # the window budget holds across runs
    pub = _published(spark)
    exp1 = pub[(pub["mechanism"] == "exp") & (pub["epsilon"] == 1.0)]
    assert set(exp1["run_id"]) == {"collect-test-3"}
    assert len(exp1) == figures3["trajectories_released"]
    old = pub_before[(pub_before["mechanism"] == "exp") & (pub_before["epsilon"] == 1.0)]
    joined = exp1.merge(old, on="traj_key", suffixes=("_new", "_old"))
    changed = sum(a.tolist() != b.tolist()
                  for a, b in zip(joined["loc_ids_new"], joined["loc_ids_old"], strict=True))
    assert changed > 0  # fresh noise, not the old release again
    others = pub[~((pub["mechanism"] == "exp") & (pub["epsilon"] == 1.0))]
    assert set(others["run_id"]) == {"collect-test-1"}  # other settings untouched


# ----------------------------------------------------------------------------- determinism
def test_same_run_key_same_output_for_1_and_4_partitions(spark, spark_config, raw):
    from udfs.space import LocationSpace

    locations, trajs, _ = raw
    cfg = _config(spark_config)
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    settings = [K.Setting("atp", 2.0, 0, "determinism"), K.Setting("tp", 2.0, 0, "determinism")]
    kernel = C.release_kernel(cfg, settings)
    df = spark.createDataFrame(
        trajs[["user_id", "date", "traj_id", "loc_ids"]],
        "user_id string, date date, traj_id long, loc_ids array<int>")
    bc = spark.sparkContext.broadcast(space)
    outs = []
    keys = ["spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled"]
    saved = {k: spark.conf.get(k) for k in keys}
    try:
        for parts in (1, 4):
            spark.conf.set("spark.sql.shuffle.partitions", str(parts))
            spark.conf.set("spark.sql.adaptive.enabled", "false")
            out = C.perturb_released(df.repartition(parts), bc, kernel)
            assert out.rdd.getNumPartitions() == parts
            pdf = out.toPandas()
            pdf["loc_ids"] = pdf["loc_ids"].map(list)
            outs.append(pdf.sort_values(["mechanism", "traj_key"]).reset_index(drop=True))
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)
        bc.destroy()
    pd.testing.assert_frame_equal(outs[0], outs[1])
    # A retried task redraws the same noise: the kernel on plain pandas gives the same rows.
    user = trajs["user_id"].iloc[0]
    local = kernel(trajs[trajs["user_id"] == user][["user_id", "date", "traj_id", "loc_ids"]],
                   space)
    mine = outs[0][outs[0]["pseudonym"] == local["pseudonym"].iloc[0]]
    assert sorted(map(tuple, mine["loc_ids"])) == sorted(tuple(a) for a in local["loc_ids"])


# ----------------------------------------------------------------------------- utility
def test_spark_metrics_equal_udfs_metrics(spark, raw, first):
    from udfs.space import LocationSpace

    cfg, _ = first
    locations, trajs, _ = raw
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    pkey = pseudonym_key(cfg.storage.secrets)
    truth = {
        pseudonym(pkey, K.traj_message(DATASET, u, d.isoformat(), t)): np.asarray(ids)
        for u, d, t, ids in zip(trajs["user_id"], trajs["date"], trajs["traj_id"],
                                trajs["loc_ids"], strict=True)
    }
    pub = _published(spark)
    pub = pub[pub["run_id"] == "collect-test-1"]
    ev = spark.table("trajpriv_pub.evaluation").where("run_id = 'collect-test-1'").toPandas()
    assert set(ev["dataset"]) == {DATASET}
    got = {(r.method, r.setting, r.metric): r.value for r in ev.itertuples()}
    assert len(got) == 4 * 5  # NE, PRQ@0.5km, PRQ@2km, ACD, KendallTau per setting
    for (mech, eps), grp in pub.groupby(["mechanism", "epsilon"]):
        true = [truth[k] for k in grp["traj_key"]]
        pert = [np.asarray(a) for a in grp["loc_ids"]]
        want = {
            "NE": M.ne(true, pert, space),
            "PRQ@0.5km": M.prq(true, pert, space, 0.5),
            "PRQ@2km": M.prq(true, pert, space, 2.0),
            "ACD": M.acd(true, pert, space, 0.2),
            "KendallTau": M.kendall_tau(true, pert, space, 0.2),
        }
        for metric, value in want.items():
            g = got[(mech, eps, metric)]
            if math.isnan(value):
                assert math.isnan(g)
            else:
                assert g == pytest.approx(value, rel=1e-9, abs=1e-12), (mech, eps, metric)


# ----------------------------------------------------------------------------- leaks
def test_nothing_private_leaks_into_published_tables(spark, spark_config, raw, first):
    _, trajs, points = raw
    raw_users = set(trajs["user_id"])
    raw_ts = {t for ts in trajs["ts"] for t in ts} | set(points["ts"])
    raw_ts_text = {t.strftime("%Y-%m-%d %H:%M:%S") for t in raw_ts}
    raw_coords = set(points["lat"]) | set(points["lon"])
    tables = [t.name for t in spark.catalog.listTables("trajpriv_pub")]
    assert {"perturbed_trajectories", "perturbed_points", "evaluation"} <= set(tables)
    for name in tables:
        df = spark.table(f"trajpriv_pub.{name}")
        assert not {"user_id", "traj_id", "ts"} & set(df.columns), name
        pdf = df.toPandas()  # one job per table; every row and column is scanned below
        for field in df.schema.fields:
            kind = field.dataType.simpleString()
            col = pdf[field.name].dropna()
            if kind == "string":
                for value in set(col):
                    assert not any(u in value for u in raw_users), (name, field.name)
                    assert not any(t in value for t in raw_ts_text), (name, field.name)
            elif kind == "timestamp":
                assert not set(col) & raw_ts, (name, field.name)
            elif kind in ("double", "float"):
                assert not set(col) & raw_coords, (name, field.name)
    # Every published coordinate is the public location of a mechanism output.
    pts = spark.table("trajpriv_pub.perturbed_points").where(f"dataset = '{DATASET}'").toPandas()
    locs = spark.table("trajpriv_pub.locations").where(f"dataset = '{DATASET}'").toPandas()
    merged = pts.merge(locs, on="loc_id", suffixes=("", "_p"))
    assert len(merged) == len(pts) > 0
    assert (merged["lat"] == merged["lat_p"]).all() and (merged["lon"] == merged["lon_p"]).all()
    raw_dir = spark_config.storage.warehouse / "trajpriv_raw.db"
    assert stat.S_IMODE(os.stat(raw_dir).st_mode) == 0o700

"""`trajpriv collect` on the shared SparkSession: ledger, idempotence, determinism, metrics, leaks.

One small dataset ("collect_test": 12 users, 2 weeks, 30 locations) is collected once per module
(ATP and EXP at epsilon 1 and 4); the other runs reuse or extend it. Spark starts are the cost
on this box, so every test shares the session fixture and the module's runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from jobs.collect import stage as C
from jobs.config import config_from_mapping
from jobs.harness import execute
from jobs.spark import tables
from jobs.spark.catalog import write_table
from tests.metrics_oracle import reference_figures
from udfs import collect_kernel as K

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DATASET = "collect_test"
N_LOC = 30
BUDGET = 10.0  # epsilon 2.5 per trajectory: 4 fit in a week
EPS = 2.5
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


def _config(spark_config, dataset=DATASET, privacy=None, publish=None, **collect):
    tree = spark_config.model_dump(mode="json")
    tree["dataset"] = dataset
    tree["privacy"] = {"budget": BUDGET, "window_days": 7, **(privacy or {})}
    tree["publish"] = {"date": "day", "traj_key": "per_release", "pseudonym": "per_window",
                       **(publish or {})}
    tree["study"] = {"prq_km": [0.5, 2.0], "acd_top_fraction": 0.2}
    tree["collect"] = {"mechanism": "atp", "epsilon": EPS, "window_start": START.isoformat(),
                       "window_end": END.isoformat(), **collect}
    return config_from_mapping(tree)


def _collect(spark, cfg, run_id, fresh=False):
    return execute("collect", C.run, cfg, argparse.Namespace(fresh=fresh), spark, run_id)


def _write_raw(spark, dataset, locations, trajs):
    schema = ("dataset string, user_id string, traj_id int, date date, loc_ids array<int>, "
              "ts array<timestamp>, n int")
    write_table(spark.createDataFrame(locations.assign(dataset=dataset)), tables.LOCATIONS,
                partition_by=["dataset"], replace={"dataset": dataset})
    # The layout ingest writes: partitioned by (dataset, date).
    write_table(spark.createDataFrame(trajs.assign(dataset=dataset)[schema_cols(schema)], schema),
                tables.TRAJECTORIES, partition_by=["dataset", "date"], replace={"dataset": dataset})


@pytest.fixture(scope="module")
def raw(spark):
    locations, trajs, points = _raw_data()
    _write_raw(spark, DATASET, locations, trajs)
    # `points` (the raw GPS fixes) stays in pandas: the leak test's oracle of raw coordinates.
    return locations, trajs, points


def schema_cols(schema: str) -> list[str]:
    return [part.strip().split(" ")[0] for part in schema.split(",")]


@pytest.fixture(scope="module")
def first(spark, spark_config, raw):
    cfg = _config(spark_config)
    figures = _collect(spark, cfg, "collect-test-1")
    return cfg, figures


def _ledger(spark, dataset=DATASET, release_id=None, state="spent"):
    df = spark.table(tables.PRIVACY_LEDGER).where(f"dataset = '{dataset}'")
    if release_id:
        df = df.where(df.release_id == release_id)
    if state:
        df = df.where(df.state == state)
    return df.toPandas()


def _published(spark, dataset=DATASET):
    return spark.table(tables.PERTURBED_TRAJECTORIES).where(f"dataset = '{dataset}'").toPandas()


def _oracle_released(trajs, per_window=4, window_days=7, start=START, end=END):
    """The first `per_window` trajectories of each user and budget window, in time order."""
    inside = trajs[(trajs["date"] >= start) & (trajs["date"] <= end)].copy()
    inside["window"] = [K.window_start_of(d, window_days) for d in inside["date"]]
    inside = inside.sort_values(["user_id", "date", "traj_id"])
    inside["rank"] = inside.groupby(["user_id", "window"]).cumcount()
    return inside, inside[inside["rank"] < per_window]


def _user_window_spend(led, window_days=7):
    led = led.assign(window=[K.window_start_of(d, window_days) for d in led["date"]])
    return led.groupby(["user_id", "window"])["epsilon"].sum()


# ----------------------------------------------------------------------------- ledger
def test_budget_is_enforced_in_time_order_with_refusals_counted(spark, raw, first):
    cfg, figures = first
    _, trajs, _ = raw
    inside, expect_released = _oracle_released(trajs)
    assert figures["trajectories_in_window"] == len(inside)
    assert figures["trajectories_released"] == len(expect_released)
    assert figures["refused"] == {K.WINDOW_EXHAUSTED: int((inside["rank"] >= 4).sum())}
    assert figures["refused"][K.WINDOW_EXHAUSTED] > 0  # the data must exercise refusals
    assert figures["users"] == inside["user_id"].nunique()  # counted by first-row marks
    assert figures["users_released"] == expect_released["user_id"].nunique()
    release_id = figures["release_id"]
    assert release_id == "collect-test-1.r0"

    ledger = _ledger(spark)
    assert len(ledger) == len(expect_released)  # one charge per released trajectory
    assert set(ledger["release_id"]) == {release_id} and (ledger["epsilon"] == EPS).all()
    assert (ledger["delta"] == 0).all()
    assert (_user_window_spend(ledger) <= BUDGET).all()
    got = sorted(zip(ledger["user_id"], ledger["date"], ledger["traj_id"], strict=True))
    want = sorted(zip(expect_released["user_id"], expect_released["date"],
                      expect_released["traj_id"], strict=True))
    assert got == want
    markers = _ledger(spark, state=None).query("user_id != user_id")  # NaN: marker rows
    assert sorted(markers["state"]) == sorted(["planned", "published", "registered",
                                               "evaluated"])

    pub = _published(spark)
    assert len(pub) == len(expect_released)
    assert set(pub["release_id"]) == {release_id}
    assert set(zip(pub["mechanism"], pub["epsilon"], strict=True)) == {("atp", EPS)}
    assert (pub["n"] == pub["loc_ids"].map(len)).all()
    assert sorted(pub["traj_key"]) == sorted(ledger["traj_key"])  # each charge is one row
    releases = spark.table(tables.RELEASES).where(f"dataset = '{DATASET}'").toPandas()
    assert releases[["release_id", "trajectories"]].values.tolist() == [
        [release_id, len(expect_released)]]
    assert "mechanism_steps" in Path(figures["explain"]).read_text()


def test_epsilon_over_the_budget_is_refused_before_any_spend(spark, spark_config, raw, first):
    from udfs.errors import BudgetExceededError

    cfg = _config(spark_config, privacy={"budget": 2.0})
    before = spark.table(tables.PRIVACY_LEDGER).count()
    with pytest.raises(BudgetExceededError, match=r"collect.epsilon 2.5 per trajectory exceeds"):
        _collect(spark, cfg, "collect-test-over")
    assert spark.table(tables.PRIVACY_LEDGER).count() == before


# ----------------------------------------------------------------------------- release once
def test_rerun_releases_nothing_and_spends_nothing(spark, spark_config, raw, first, monkeypatch,
                                                   tmp_path, capsys):
    cfg, figures = first
    ledger_before = _ledger(spark, state=None)
    pub_before = _published(spark)

    # The same collection through the CLI, under a new run id: nothing new, nothing spent.
    import jobs.spark.session

    monkeypatch.setattr(jobs.spark.session, "stop_spark", lambda s: None)  # keep the shared session
    conf = tmp_path / "collect.yaml"
    conf.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    from jobs.cli import main as cli

    assert cli(["collect", "--config", str(conf), "--run-id", "collect-test-2"]) == 0
    assert len(_ledger(spark, state=None)) == len(ledger_before)
    key = ["traj_key"]
    pd.testing.assert_frame_equal(_published(spark).sort_values(key).reset_index(drop=True),
                                  pub_before.sort_values(key).reset_index(drop=True))

    # `trajpriv sql` answers over the published view ...
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
    # ... and refuses the raw zone unless --trusted.
    capsys.readouterr()
    assert cli(["sql", "SELECT * FROM trajpriv_raw.trajectories", "--config", str(conf)]) == 2
    assert "refused: it reads spark_catalog.trajpriv_raw.trajectories" in capsys.readouterr().err
    assert cli(["sql", "SELECT count(*) FROM trajpriv_raw.privacy_ledger", "--config",
                str(conf), "--trusted"]) == 0


def test_reusing_a_run_id_with_fresh_never_erases_spend(spark, spark_config, raw, first):
    """Defect: `--fresh --run-id X` after a run X rewrote X's ledger partition (spend lost)."""
    _, trajs = raw[0], raw[1]
    dataset = "collect_reuse"
    _write_raw(spark, dataset, raw[0], trajs)
    cfg = _config(spark_config, dataset=dataset, privacy={"budget": 20.0})
    one = _collect(spark, cfg, "collect-reuse")
    before = _ledger(spark, dataset)
    two = _collect(spark, cfg, "collect-reuse", fresh=True)  # same run id, released again
    after = _ledger(spark, dataset)
    assert one["release_id"] == "collect-reuse.r0" and two["release_id"] == "collect-reuse.r1"
    # every earlier charge is still there; the new release added its own
    merged = before.merge(after, how="left", on=list(before.columns), indicator=True)
    assert (merged["_merge"] == "both").all()
    assert len(after) == len(before) + two["trajectories_released"] > len(before)
    # the budget (20 per week: 8 trajectories) holds over both releases, from the ledger
    assert (_user_window_spend(after) <= 20.0).all()
    pub = _published(spark, dataset)
    assert pub.groupby("release_id").size().to_dict() == {
        "collect-reuse.r0": one["trajectories_released"],
        "collect-reuse.r1": two["trajectories_released"]}
    # a fresh release draws fresh noise and (per-release keys) does not link to the first
    assert not set(pub[pub.release_id.str.endswith("r0")]["traj_key"]) & set(
        pub[pub.release_id.str.endswith("r1")]["traj_key"])


def test_a_new_window_setting_maps_earlier_spend_by_trajectory_date(spark, spark_config, raw):
    """Defect: the ledger kept only the window start of the policy in force when it spent, so
    30-day windows then 7-day windows put earlier spend in the wrong week (200 in one week)."""
    dataset = "collect_windows"
    _write_raw(spark, dataset, raw[0], raw[1])
    first = _config(spark_config, dataset=dataset, privacy={"budget": 10.0, "window_days": 30})
    _collect(spark, first, "collect-windows-30")
    weekly = _config(spark_config, dataset=dataset, mechanism="exp",
                     privacy={"budget": 10.0, "window_days": 7})
    _collect(spark, weekly, "collect-windows-7")
    spend = _user_window_spend(_ledger(spark, dataset), window_days=7)
    assert spend.max() <= 10.0, spend[spend > 10.0]
    assert (spend == 10.0).any()  # the weekly budget was reached, so the check binds


def test_a_collection_window_collects_only_its_dates_once(spark, spark_config, raw):
    """What the DAG does: one data interval a run; a later interval re-releases nothing."""
    dataset = "collect_daily"
    _write_raw(spark, dataset, raw[0], raw[1])
    days = [START + dt.timedelta(days=k) for k in range(2)]
    for day in days:
        cfg = _config(spark_config, dataset=dataset, window_start=day.isoformat(),
                      window_end=day.isoformat())
        _collect(spark, cfg, f"collect-daily-{day:%Y%m%d}")
    cfg = _config(spark_config, dataset=dataset, window_start=days[-1].isoformat(),
                  window_end=days[-1].isoformat())
    again = _collect(spark, cfg, "collect-daily-again")
    assert again["trajectories_released"] == 0 and again["epsilon_spent"] == 0
    # Airflow's rerun of a logical date (a retry, a cleared task, a second `dags test`) starts
    # the same command again: the same window under the same run id.
    rerun = _collect(spark, cfg, f"collect-daily-{days[-1]:%Y%m%d}")
    assert rerun["trajectories_released"] == 0 and rerun["epsilon_spent"] == 0
    led = _ledger(spark, dataset)
    by_release = led.groupby("release_id")["date"].agg(lambda d: sorted(set(d)))
    assert [v for v in by_release.sort_index().tolist()] == [[d] for d in days]
    assert not led.duplicated(["user_id", "date", "traj_id"]).any()  # released once each


# ----------------------------------------------------------------------------- what is public
def test_published_metadata_follows_the_publish_settings(spark, spark_config, raw):
    dataset = "collect_publish"
    _write_raw(spark, dataset, raw[0], raw[1])
    cfg = _config(spark_config, dataset=dataset,
                  publish={"date": "week", "pseudonym": "per_window"})
    _collect(spark, cfg, "collect-publish")
    pub = _published(spark, dataset)
    led = _ledger(spark, dataset)
    rows = pub.merge(led[["traj_key", "user_id", "date"]], on="traj_key",
                     suffixes=("", "_raw"))
    assert len(rows) == len(pub)
    # week: every published date is the Monday of the trajectory's week
    assert (rows["date"] == [d - dt.timedelta(days=d.weekday()) for d in rows["date_raw"]]).all()
    # per_window: one pseudonym per (user, week), different across a user's weeks
    rows["week"] = [K.window_start_of(d, 7) for d in rows["date_raw"]]
    per = rows.groupby(["user_id", "week"])["pseudonym"].nunique()
    assert (per == 1).all()
    per_user = rows.groupby("user_id")["pseudonym"].nunique()
    two_weeks = rows.groupby("user_id")["week"].nunique()
    assert (per_user[two_weeks > 1] > 1).all() and (two_weeks > 1).any()
    none = _config(spark_config, dataset=dataset, mechanism="exp", privacy={"budget": 20.0},
                   publish={"date": "none", "pseudonym": "none"})
    _collect(spark, none, "collect-publish-none")
    pub = _published(spark, dataset)
    bare = pub[pub["mechanism"] == "exp"]
    assert len(bare) and bare["date"].isna().all() and bare["pseudonym"].isna().all()


# ----------------------------------------------------------------------------- determinism
def test_same_run_key_same_output_for_1_and_4_partitions(spark, spark_config, raw):
    from jobs.spark.per_user import Shared
    from udfs.space import LocationSpace

    locations, trajs, _ = raw
    cfg = _config(spark_config)
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    settings = [K.Setting("atp", 2.0, "determinism"), K.Setting("tp", 2.0, "determinism")]
    kernel = C.release_kernel(cfg, settings)
    df = spark.createDataFrame(
        trajs[["user_id", "date", "traj_id", "loc_ids"]],
        "user_id string, date date, traj_id long, loc_ids array<int>")
    outs = []
    keys = ["spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled"]
    saved = {k: spark.conf.get(k) for k in keys}
    try:
        for parts in (1, 4):
            spark.conf.set("spark.sql.shuffle.partitions", str(parts))
            spark.conf.set("spark.sql.adaptive.enabled", "false")
            with Shared(spark, space) as shared:
                out = C.perturb_users(df.repartition(parts), shared, kernel)
                assert out.rdd.getNumPartitions() == parts
                pdf = out.toPandas()
            pdf["loc_ids"] = pdf["loc_ids"].map(list)
            outs.append(pdf.sort_values(["mechanism", "traj_key"]).reset_index(drop=True))
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)
    pd.testing.assert_frame_equal(outs[0], outs[1])
    # A retried task redraws the same noise: the kernel on plain pandas gives the same rows.
    user = trajs["user_id"].iloc[0]
    local = kernel(trajs[trajs["user_id"] == user][["user_id", "date", "traj_id", "loc_ids"]],
                   space)
    mine = outs[0][outs[0]["traj_key"].isin(local["traj_key"])]
    assert sorted(map(tuple, mine["loc_ids"])) == sorted(tuple(a) for a in local["loc_ids"])


# ----------------------------------------------------------------------------- utility
def test_trusted_metrics_equal_udfs_metrics_and_none_is_published(spark, raw, first):
    from jobs.spark.tables import EVALUATION
    from udfs.space import LocationSpace

    cfg, figures = first
    locations, trajs, _ = raw
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    truth = {(u, d, t): np.asarray(ids) for u, d, t, ids in zip(
        trajs["user_id"], trajs["date"], trajs["traj_id"], trajs["loc_ids"], strict=True)}
    led = _ledger(spark, release_id=figures["release_id"])
    by_key = {k: truth[(u, d, t)] for k, u, d, t in zip(
        led["traj_key"], led["user_id"], led["date"], led["traj_id"], strict=True)}
    pub = _published(spark)
    assert EVALUATION.startswith("trajpriv_trusted.")
    assert not spark.catalog.tableExists("trajpriv_pub.evaluation")
    ev = spark.table(EVALUATION).where(f"run_id = '{figures['release_id']}'").toPandas()
    assert set(ev["dataset"]) == {DATASET}
    got = {(r.method, r.setting, r.metric): r.value for r in ev.itertuples()}
    assert len(got) == 5  # NE, PRQ@0.5km, PRQ@2km, ACD, KendallTau of the one setting
    true = [by_key[k] for k in pub["traj_key"]]
    pert = [np.asarray(a) for a in pub["loc_ids"]]
    want = reference_figures(true, pert, space, [0.5, 2.0], 0.2)
    for metric, value in want.items():
        g = got[("atp-release", EPS, metric)]
        if math.isnan(value):
            assert math.isnan(g)
        else:
            assert g == pytest.approx(value, rel=1e-9, abs=1e-12), metric
    # the published run log holds only the public figures of a collect run
    runs = spark.table("trajpriv_pub.runs").where("run_id = 'collect-test-1'").toPandas()
    published = json.loads(runs["figures"].iloc[0])
    assert set(published) <= set(C.PUBLIC_FIGURES) and "metrics" not in published
    assert "refused" not in published


def test_metrics_pairs_from_the_cached_release_equal_the_joined_back_ones(spark, raw, first):
    """The run that computes a release measures it from its cached rows (raw points kept
    beside them); a rerun that finds it published joins the published rows back to the raw
    table. Both must hand the metrics the same (traj_key, pert_ids, true_ids) pairs."""
    from jobs.spark import ledger as L
    from udfs.space import LocationSpace

    cfg, figures = first
    locations, _, _ = raw
    space = LocationSpace.from_latlon(locations["lat"], locations["lon"])
    (release,) = [r for r in L.collect_releases(spark, DATASET)
                  if r.release_id == figures["release_id"]]
    setting = K.Setting(release.mechanism, release.epsilon, release.release_id)
    todo = L.spent_rows(spark, release.release_id).select(
        "user_id", "date", "traj_id", "traj_key").join(
        C.raw_trajectories(spark, DATASET), ["user_id", "date", "traj_id"])
    shared = C.Shared(spark, space)
    computed = C.perturb_users(todo, shared, C.release_kernel(cfg, [setting], keep_true=True))
    assert "true_ids" not in _published(spark).columns

    def canon(df):
        pdf = df.toPandas()
        for col in ("pert_ids", "true_ids"):
            pdf[col] = pdf[col].map(lambda a: tuple(int(x) for x in a))
        return pdf.sort_values("traj_key").reset_index(drop=True)

    joined = canon(C.release_pairs(spark, cfg, release))
    cached = canon(C.release_pairs(spark, cfg, release, computed))
    shared.free()
    assert len(joined) == figures["trajectories_released"]
    pd.testing.assert_frame_equal(cached, joined)


def test_the_metrics_pass_gives_each_groups_reference_figures_on_any_partitioning(
        spark, raw, first):
    """`ldp_metrics` over pairs of three groups (the release relabelled) spread over 1 and 5
    partitions: each group's figures equal the numpy definitions of its pairs, and the group
    values come back as the columns' plain Python types."""
    from pyspark.sql import functions as F

    from jobs.collect import metrics as CM
    from jobs.spark import ledger as L

    cfg, figures = first
    space = C.load_space(spark, DATASET)
    (release,) = [r for r in L.collect_releases(spark, DATASET)
                  if r.release_id == figures["release_id"]]
    pairs = C.release_pairs(spark, cfg, release)
    # three groups: the release, its reversed trajectories, and every other row of it
    reversed_ = pairs.select(F.lit("rev").alias("mechanism"), F.lit(9.0).alias("epsilon"),
                             F.reverse("true_ids").alias("true_ids"),
                             F.reverse("pert_ids").alias("pert_ids"), "traj_key")
    half = pairs.where(F.xxhash64("traj_key") % 2 == 0).select(
        F.lit("half").alias("mechanism"), "epsilon", "true_ids", "pert_ids", "traj_key")
    three = pairs.select("mechanism", "epsilon", "true_ids", "pert_ids", "traj_key") \
        .unionByName(reversed_).unionByName(half).cache()
    local = three.toPandas()
    opts = {"prq_km": [0.5, 2.0], "top_fraction": 0.2}
    want = {}
    for (mech, eps), part in local.groupby(["mechanism", "epsilon"]):
        true = [np.asarray(a) for a in part["true_ids"]]
        pert = [np.asarray(a) for a in part["pert_ids"]]
        want.update({(mech, eps, m): v for m, v in
                     reference_figures(true, pert, space, [0.5, 2.0], 0.2).items()})
    assert len(want) == 15
    for parts in (1, 5):
        rows = CM.ldp_metrics(three.repartition(parts), space=space, **opts)
        got = {(r["mechanism"], r["epsilon"], r["metric"]): r["value"] for r in rows}
        assert set(got) == set(want), parts
        for name, value in want.items():
            assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12, nan_ok=True), name
        assert all(type(k[0]) is str and type(k[1]) is float for k in got)
    three.unpersist()


# ----------------------------------------------------------------------------- leaks
def test_nothing_private_leaks_into_published_tables(spark, spark_config, raw, first):
    _, trajs, points = raw
    raw_users = set(trajs["user_id"])
    raw_ts = {t for ts in trajs["ts"] for t in ts} | set(points["ts"])
    raw_ts_text = {t.strftime("%Y-%m-%d %H:%M:%S") for t in raw_ts}
    raw_coords = set(points["lat"]) | set(points["lon"])
    tables = [t.name for t in spark.catalog.listTables("trajpriv_pub")]
    assert {"perturbed_trajectories", "perturbed_points", "releases"} <= set(tables)
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
    for db in ("trajpriv_raw.db", "trajpriv_trusted.db"):
        folder = spark_config.storage.warehouse / db
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_published_tables_and_views_carry_the_catalogues_comments(spark, first):
    """Measured defect: DESCRIBE showed `comment NULL` on every column. Tables get them from
    write_table, the perturbed_points view from its column list (jobs/spark/tables.py)."""
    from jobs.spark.tables import ALL

    for name in ("perturbed_trajectories", "perturbed_points", "releases", "locations"):
        table = ALL[f"trajpriv_pub.{name}"]
        got = {c.name: c.description for c in spark.catalog.listColumns(table)}
        assert got == table.comments(), name

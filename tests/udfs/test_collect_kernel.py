"""The per-user collection kernels on plain pandas (no Spark): budget plan and release."""

from __future__ import annotations

import datetime as dt
import functools

import numpy as np
import pandas as pd
import pytest

from udfs import collect_kernel as K
from udfs.collect import perturb
from udfs.errors import InvalidParameterError
from udfs.space import LocationSpace

KEY = b"k" * 32
PKEY = b"p" * 32


def _seed(key: bytes, scope: str, user: str) -> np.random.SeedSequence:
    # An independent oracle of a keyed per-user seed (jobs.keys.user_seed is the product's).
    import hashlib
    import hmac

    digest = hmac.new(key, f"{scope}|{user}".encode(), hashlib.sha256).digest()
    return np.random.SeedSequence(int.from_bytes(digest, "big"))


def _hash(key: bytes, msg: str) -> str:
    import hashlib
    import hmac

    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()[:16]


@pytest.fixture(scope="module")
def space() -> LocationSpace:
    rng = np.random.default_rng(7)
    return LocationSpace.from_latlon(31.2 + rng.random(40) * 0.2, 121.4 + rng.random(40) * 0.2)


def _trajs(user: str, dates: list[str], n_loc: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i, d in enumerate(dates):
        n = int(rng.integers(1, 6))
        rows.append({"user_id": user, "date": dt.date.fromisoformat(d), "traj_id": i,
                     "loc_ids": rng.integers(0, n_loc, n).astype(np.int32), "n": n})
    return pd.DataFrame(rows)


NO_LEDGER = pd.DataFrame({"epsilon": pd.Series([], dtype=float),
                          "window_start": pd.Series([], dtype=object)})


# ----------------------------------------------------------------------------- windows
def test_windows_are_calendar_blocks_starting_on_monday():
    policy = K.BudgetPolicy(10.0, 7)
    days = [dt.date(2014, 6, 1) + dt.timedelta(days=i) for i in range(30)]
    got = [policy.window_start(d) for d in days]
    # Oracle: the Monday on or before each date (weekday() == 0 is Monday).
    assert got == [d - dt.timedelta(days=d.weekday()) for d in days]
    three = K.BudgetPolicy(10.0, 3)
    starts = {three.window_start(d) for d in days}
    assert all((s - K.EPOCH).days % 3 == 0 for s in starts)
    assert all(0 <= (d - three.window_start(d)).days < 3 for d in days)


def test_policy_rejects_bad_values():
    with pytest.raises(InvalidParameterError, match="user_budget"):
        K.BudgetPolicy(0.0, 7)
    with pytest.raises(InvalidParameterError, match="window_days"):
        K.BudgetPolicy(1.0, 0)


# ----------------------------------------------------------------------------- plan
def test_plan_spends_in_time_order_and_refuses_past_the_window_budget():
    policy = K.BudgetPolicy(10.0, 7)
    # Mon 2014-06-02 .. Sun 06-08 is one window; 06-09 starts the next.
    t = _trajs("u", ["2014-06-04", "2014-06-02", "2014-06-03", "2014-06-05", "2014-06-09"])
    plan = K.plan_user(t.sample(frac=1, random_state=3), NO_LEDGER, cost=4.0, policy=policy,
                       n_locations=40)
    assert [d.isoformat() for d in plan["date"]] == sorted(
        d.isoformat() for d in t["date"])
    assert plan["reason"].tolist() == [K.RELEASED, K.RELEASED, K.WINDOW_EXHAUSTED,
                                       K.WINDOW_EXHAUSTED, K.RELEASED]
    assert plan["remaining"].tolist() == [10.0, 6.0, 2.0, 2.0, 10.0]
    assert plan["released"].tolist() == [True, True, False, False, True]


def test_plan_counts_prior_ledger_spend_of_the_same_window_only():
    policy = K.BudgetPolicy(10.0, 7)
    t = _trajs("u", ["2014-06-02", "2014-06-03", "2014-06-10"])
    ledger = pd.DataFrame({"epsilon": [3.0, 2.5, 100.0],
                           "window_start": [dt.date(2014, 6, 2), dt.date(2014, 6, 2),
                                            dt.date(2014, 5, 26)]})
    plan = K.plan_user(t, ledger, cost=4.0, policy=policy, n_locations=40)
    # 5.5 spent already: one 4.0 release fits (9.5), the next does not; the next week is fresh.
    assert plan["reason"].tolist() == [K.RELEASED, K.WINDOW_EXHAUSTED, K.RELEASED]


def test_plan_sums_exactly_and_the_boundary_is_inclusive():
    policy = K.BudgetPolicy(1.0, 7)
    t = _trajs("u", ["2014-06-02"] * 5)
    t["traj_id"] = range(5)
    plan = K.plan_user(t, NO_LEDGER, cost=0.25, policy=policy, n_locations=40)
    assert plan["released"].sum() == 4  # 4 x 0.25 == 1.0 exactly
    # 0.1 as a float is slightly above 1/10: three of them exceed the float 0.3 budget.
    plan = K.plan_user(t, NO_LEDGER, cost=0.1, policy=K.BudgetPolicy(0.3, 7), n_locations=40)
    assert plan["released"].sum() == 2


def test_plan_refuses_invalid_trajectories_without_spending():
    t = _trajs("u", ["2014-06-02", "2014-06-02", "2014-06-02"])
    t["traj_id"] = [0, 1, 2]
    t.at[0, "loc_ids"] = np.array([3, 99], dtype=np.int32)  # 99 is not a location of P
    t.at[0, "n"] = 2
    t.at[1, "n"] = len(t.at[1, "loc_ids"]) + 1  # n disagrees with the array
    plan = K.plan_user(t, NO_LEDGER, cost=6.0, policy=K.BudgetPolicy(6.0, 7), n_locations=40)
    assert plan["reason"].tolist() == [K.INVALID, K.INVALID, K.RELEASED]


def test_plan_refuses_a_cost_over_the_whole_budget_and_handles_no_rows():
    t = _trajs("u", ["2014-06-02"])
    plan = K.plan_user(t, NO_LEDGER, cost=6.0, policy=K.BudgetPolicy(5.0, 7), n_locations=40)
    assert plan["reason"].tolist() == [K.COST_OVER_BUDGET]
    empty = K.plan_user(t.iloc[:0], NO_LEDGER, cost=1.0, policy=K.BudgetPolicy(5.0, 7),
                        n_locations=40)
    assert list(empty.columns) == list(K.PLAN_COLUMNS) and empty.empty


# ----------------------------------------------------------------------------- settings
def test_settings_validate_and_charge_the_mechanism_guarantee():
    with pytest.raises(InvalidParameterError, match="mechanism"):
        K.Setting("gauss", 1.0)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        K.Setting("atp", float("nan"))
    sweep = [K.Setting("atp", 4.0), K.Setting("exp", 1.0), K.Setting("uniform", 10.0)]
    assert K.sweep_cost(sweep) == 5.0  # UNIFORM ignores its input: it spends nothing
    assert K.Setting("atp", 4.0, "c.r0").scope != K.Setting("atp", 4.0, "c.r1").scope


# ----------------------------------------------------------------------------- release
def _kernel(settings, options=None) -> K.ReleaseKernel:
    return K.ReleaseKernel(
        dataset="ds",
        settings=tuple(settings),
        seed_for=functools.partial(_seed, KEY),
        pseudonym_of=functools.partial(_hash, PKEY),
        traj_key_of=functools.partial(_hash, PKEY),
        options=options or {},
        publish=K.PublishOptions(date="day", traj_key="stable", pseudonym="stable"),
    )


def test_release_matches_perturb_with_the_users_seed_in_time_order(space):
    settings = [K.Setting("atp", 4.0, "c"), K.Setting("exp", 1.0, "c")]
    t = _trajs("alice", ["2014-06-03", "2014-06-02", "2014-06-02", "2014-06-05"], seed=1)
    t["traj_id"] = [0, 1, 0, 0]
    out = _kernel(settings)(t, space)
    assert list(out.columns) == list(K.RELEASE_COLUMNS)
    ordered = t.sort_values(["date", "traj_id"]).reset_index(drop=True)
    trajs = [np.asarray(a, dtype=np.int64) for a in ordered["loc_ids"]]
    for s in settings:
        expect = perturb(trajs, space, s.epsilon, s.mechanism,
                         _seed(KEY, f"ds\x1f{s.scope}", "alice"))
        got = out[(out["mechanism"] == s.mechanism) & (out["epsilon"] == s.epsilon)]
        assert [a.tolist() for a in got["loc_ids"]] == [a.tolist() for a in expect]
        assert got["n"].tolist() == [a.size for a in trajs]
    assert set(out["pseudonym"]) == {_hash(PKEY, "alice")}
    keys = [_hash(PKEY, K.traj_message("ds", "alice", d.isoformat(), k))
            for d, k in zip(ordered["date"], ordered["traj_id"], strict=True)]
    assert out["traj_key"].tolist() == keys * 2


def test_release_ignores_row_order_and_new_release_ids_redraw(space):
    t = _trajs("bob", [f"2014-06-{d:02d}" for d in range(2, 22)], seed=2)
    kernel = _kernel([K.Setting("tp", 1.0, "c.r0")])
    a = kernel(t, space)
    b = kernel(t.sample(frac=1, random_state=1), space)
    pd.testing.assert_frame_equal(a, b)
    fresh = _kernel([K.Setting("tp", 1.0, "c.r1")])(t, space)
    assert [x.tolist() for x in fresh["loc_ids"]] != [x.tolist() for x in a["loc_ids"]]
    # No raw identifier or raw location column leaves the kernel.
    assert "user_id" not in a.columns and "traj_id" not in a.columns


def test_release_refuses_a_group_of_several_users(space):
    t = pd.concat([_trajs("a", ["2014-06-02"]), _trajs("b", ["2014-06-02"])])
    with pytest.raises(InvalidParameterError, match="group by user_id"):
        _kernel([K.Setting("exp", 1.0)])(t, space)


def test_explain_reports_each_steps_spend(space):
    report = K.explain_settings(space, [K.Setting("atp", 4.0), K.Setting("uniform", 2.0)],
                                [1, 3], {"granularity": "auto"})
    atp = report[0]["per_length"]
    for n in ("1", "3"):
        assert atp[n]["spent"] <= 4.0 and atp[n]["spent"] == pytest.approx(4.0, rel=1e-12)
        assert sum(atp[n]["by_kind"].values()) == pytest.approx(4.0, rel=1e-12)
    assert set(atp["3"]["by_kind"]) == {"anchor", "radius", "direction", "point"}
    assert report[1]["per_length"]["3"]["spent"] == 0.0


def test_publish_options_rotate_pseudonyms_per_window_and_keys_per_release(space):
    t = _trajs("carol", ["2014-06-02", "2014-06-03", "2014-06-10"], seed=3)
    t["traj_id"] = [0, 0, 0]
    rotated = K.ReleaseKernel(
        dataset="ds", settings=(K.Setting("exp", 1.0, "r1"),),
        seed_for=functools.partial(_seed, KEY), pseudonym_of=functools.partial(_hash, PKEY),
        traj_key_of=functools.partial(_hash, PKEY),
        publish=K.PublishOptions(date="week", traj_key="per_release", pseudonym="per_window"),
    )
    out = rotated(t, space)
    # the first two days share a week (one pseudonym), the third is a week later (another)
    assert out["pseudonym"].iloc[0] == out["pseudonym"].iloc[1] != out["pseudonym"].iloc[2]
    assert _hash(PKEY, "carol") not in set(out["pseudonym"])
    assert [d.isoformat() for d in out["date"]] == ["2014-06-02", "2014-06-02", "2014-06-09"]
    other = K.ReleaseKernel(**{**rotated.__dict__, "settings": (K.Setting("exp", 1.0, "r2"),)})
    assert not set(out["traj_key"]) & set(other(t, space)["traj_key"])
    with pytest.raises(InvalidParameterError, match="publish.date"):
        K.PublishOptions(date="month")

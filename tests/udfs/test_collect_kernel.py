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


_M64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    # SplitMix64's finaliser in plain Python ints (independent of udfs.streams' numpy one)
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _traj_key(seed: np.random.SeedSequence, date: dt.date, traj_id: int) -> int:
    """Oracle of the documented per-trajectory key: mix64(w0 ^ mix64(w1 ^ mix64(w2 ^ day) ^
    mix64(traj_id))), w = the 64-bit words of the user's seed, day = days since 1970-01-01."""
    e = int(seed.entropy)
    w = [(e >> (64 * i)) & _M64 for i in range(3)]
    day = (date - dt.date(1970, 1, 1)).days & _M64
    return _mix64(w[0] ^ _mix64(w[1] ^ _mix64(w[2] ^ day) ^ _mix64(traj_id & _M64)))


def test_release_matches_perturb_with_each_trajectorys_key_in_time_order(space):
    settings = [K.Setting("atp", 4.0, "c"), K.Setting("exp", 1.0, "c")]
    t = _trajs("alice", ["2014-06-03", "2014-06-02", "2014-06-02", "2014-06-05"], seed=1)
    t["traj_id"] = [0, 1, 0, 0]
    out = _kernel(settings)(t, space)
    assert list(out.columns) == list(K.RELEASE_COLUMNS)
    ordered = t.sort_values(["date", "traj_id"]).reset_index(drop=True)
    trajs = [np.asarray(a, dtype=np.int64) for a in ordered["loc_ids"]]
    for s in settings:
        seed = _seed(KEY, f"ds\x1f{s.scope}", "alice")
        keys = np.array([_traj_key(seed, d, k) for d, k in zip(ordered["date"],
                                                               ordered["traj_id"], strict=True)],
                        dtype=np.uint64)
        expect = perturb(trajs, space, s.epsilon, s.mechanism, keys)
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


def _many_users(n_users: int = 12) -> pd.DataFrame:
    days = [f"2014-06-{d:02d}" for d in range(2, 12)]
    return pd.concat([_trajs(f"u{i:02d}", days[: 3 + i % 7], seed=10 + i)
                      for i in range(n_users)], ignore_index=True)


@pytest.mark.parametrize("arrow", [False, True])
def test_given_traj_keys_are_published_and_change_no_noise(space, arrow):
    """collect passes the keys its plan derived (and the ledger charged): the rows carry them,
    in the kernel's time order, and the perturbed points are those of a derived-key run."""
    import pyarrow as pa

    t = _trajs("carol", ["2014-06-04", "2014-06-02", "2014-06-03"], seed=3)
    t["traj_key"] = ["k-0604", "k-0602", "k-0603"]
    derived = _kernel([K.Setting("atp", 4.0, "c")])(t.drop(columns=["traj_key", "n"]), space)
    frame = t.drop(columns="n")
    given = _kernel([K.Setting("atp", 4.0, "c")])(
        pa.Table.from_pandas(frame, preserve_index=False) if arrow else frame, space)
    given = given.to_pandas() if arrow else given
    assert given["traj_key"].tolist() == ["k-0602", "k-0603", "k-0604"]
    assert [list(a) for a in given["loc_ids"]] == [list(a) for a in derived["loc_ids"]]
    assert derived["traj_key"].tolist() != given["traj_key"].tolist()
    with pytest.raises(ValueError, match="one setting"):
        _kernel([K.Setting("atp", 4.0, "c"), K.Setting("exp", 1.0, "c")])(frame, space)
    t["traj_key"] = ["k-0604", None, "k-0603"]  # a charge without a key: all are derived
    again = _kernel([K.Setting("atp", 4.0, "c")])(t.drop(columns="n"), space)
    assert again["traj_key"].tolist() == derived["traj_key"].tolist()


def _canon(out: pd.DataFrame) -> pd.DataFrame:
    out = out.assign(loc_ids=out["loc_ids"].map(lambda a: tuple(int(x) for x in a)))
    return out.sort_values(["mechanism", "epsilon", "traj_key"]).reset_index(drop=True)


@pytest.mark.parametrize("mech", ["tp", "atp", "exp", "uniform"])
def test_a_batch_of_users_releases_what_each_user_alone_does(space, mech):
    """Batched over users, the release equals the per-user one bit for bit (each trajectory's
    noise comes from its own key, not from its neighbours in the call)."""
    t = _many_users()
    kernel = _kernel([K.Setting(mech, 2.0, "c"), K.Setting(mech, 50.0, "c")])
    whole = kernel(t.sample(frac=1, random_state=5), space)
    alone = pd.concat([kernel(g, space) for _, g in t.groupby("user_id")], ignore_index=True)
    pd.testing.assert_frame_equal(_canon(whole), _canon(alone))


def test_one_and_four_partitions_give_bit_identical_releases(space):
    """The release on the local backend of the per-user operator (jobs.spark.per_user), with
    users hashed into 1 or 4 partitions and Arrow batches cut at different sizes: identical
    rows. Before batching, one generator per call would have made these differ."""
    from jobs.spark.per_user import per_user_local

    t = _many_users(16)
    kernel = _kernel([K.Setting("atp", 4.0, "c"), K.Setting("tp", 1.0, "c")])
    outs = []
    for parts, batch in ((1, 1000), (4, 7), (4, 23)):
        part = t["user_id"].str[1:].astype(int) % parts
        got = [per_user_local(g, lambda f, sp: kernel(f, sp), shared=space,
                              order=("date", "traj_id"), batch_rows=batch)
               for _, g in t.groupby(part)]
        outs.append(_canon(pd.concat(got, ignore_index=True)))
    pd.testing.assert_frame_equal(outs[0], outs[1])
    pd.testing.assert_frame_equal(outs[0], outs[2])
    # and through Arrow tables (the Spark path's carrier): the same rows
    arrow = per_user_local(t, lambda f, sp: kernel(f, sp), shared=space,
                           order=("date", "traj_id"), arrow=True, batch_rows=11)
    pd.testing.assert_frame_equal(_canon(arrow), outs[0], check_dtype=False)


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


def test_study_rows_carry_the_release_noise_with_the_raw_identity(space):
    t = _many_users(5)
    kernel = _kernel([K.Setting("atp", 4.0, "s"), K.Setting("exp", 1.0, "s")])
    study = kernel.study_rows(t.sample(frac=1, random_state=2), space)
    release = kernel(t, space)
    ordered = t.sort_values(["user_id", "date", "traj_id"]).reset_index(drop=True)
    for s in kernel.settings:
        mine = study[(study["mechanism"] == s.mechanism) & (study["epsilon"] == s.epsilon)]
        assert mine["user_id"].tolist() == ordered["user_id"].tolist()
        assert mine["date"].tolist() == ordered["date"].tolist()
        assert mine["traj_id"].tolist() == ordered["traj_id"].tolist()
        got = release[(release["mechanism"] == s.mechanism) & (release["epsilon"] == s.epsilon)]
        assert [a.tolist() for a in mine["loc_ids"]] == [a.tolist() for a in got["loc_ids"]]
    assert kernel.study_rows(t.iloc[:0], space).empty

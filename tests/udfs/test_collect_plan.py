"""The vectorised budget planner against the per-trajectory Fraction loop it replaced.

The oracle below is the planner as it stood before vectorisation (a Python loop per trajectory,
exact Fraction sums), kept verbatim apart from names: the vectorised `plan_users` must take the
same decisions, give the same reasons and report the same `remaining` floats on random inputs
and on the edges (budget an exact multiple of the cost, 0.1-style costs that are not, prior
spend from earlier runs and other stages, several windows, zero-cost sweeps, invalid rows).
"""

from __future__ import annotations

import datetime as dt
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from udfs import collect_plan as P
from udfs.budget import round_down_exact


# ----------------------------------------------------------------------------- the oracle
def _oracle_valid(loc_ids, n, n_locations, max_len) -> bool:
    if loc_ids is None:
        return False
    a = np.asarray(loc_ids)
    if a.ndim != 1 or a.size == 0 or a.size != n:
        return False
    if max_len is not None and a.size > max_len:
        return False
    return bool(a.min() >= 0 and a.max() < n_locations)


def _oracle_round_down(x: Fraction) -> float:
    f = float(x)
    return float(np.nextafter(f, -np.inf)) if Fraction(f) > x else f


def oracle_plan_user(trajectories, ledger, *, cost, policy, n_locations, max_len=None):
    """The pre-vectorisation `plan_user` (one user; ledger columns epsilon, window_start)."""
    if trajectories.empty:
        return pd.DataFrame({c: [] for c in P.PLAN_COLUMNS})
    t = trajectories.sort_values(["date", "traj_id"], kind="stable").reset_index(drop=True)
    win = policy.window_starts(t["date"])
    spent = {}
    if not ledger.empty:
        prior_win = policy.window_starts(ledger["window_start"])
        for w, eps in zip(prior_win, ledger["epsilon"].to_numpy(dtype=np.float64), strict=True):
            spent[w] = spent.get(w, Fraction(0)) + Fraction(float(eps))
    budget = Fraction(float(policy.user_budget))
    c = Fraction(float(cost))
    exhausted = set()
    released = np.zeros(len(t), dtype=bool)
    reasons = np.empty(len(t), dtype=object)
    remaining = np.empty(len(t), dtype=np.float64)
    for i, (w, ids, n) in enumerate(zip(win, t["loc_ids"], t["n"], strict=True)):
        used = spent.get(w, Fraction(0))
        left = budget - used
        remaining[i] = _oracle_round_down(left)
        if not _oracle_valid(ids, n, n_locations, max_len):
            reasons[i] = P.INVALID
        elif c > budget:
            reasons[i] = P.COST_OVER_BUDGET
        elif w in exhausted or used + c > budget:
            exhausted.add(w)
            reasons[i] = P.WINDOW_EXHAUSTED
        else:
            spent[w] = used + c
            released[i] = True
            reasons[i] = P.RELEASED
    return pd.DataFrame(
        {
            "user_id": t["user_id"].astype(str),
            "date": t["date"],
            "traj_id": t["traj_id"],
            "loc_ids": t["loc_ids"],
            "n": t["n"],
            "window_start": win.astype(object),
            "cost": float(cost),
            "remaining": remaining,
            "released": released,
            "reason": reasons,
        }
    )


def oracle_plan(trajectories, ledger, **kw):
    frames = []
    for user, grp in sorted(trajectories.groupby("user_id"), key=lambda x: str(x[0])):
        mine = ledger[ledger["user_id"] == user][["epsilon", "window_start"]]
        frames.append(oracle_plan_user(grp, mine, **kw))
    return pd.concat(frames, ignore_index=True)


# ----------------------------------------------------------------------------- inputs
N_LOC = 25
START = dt.date(2014, 6, 1)


def _random_case(seed: int, *, users: int = 6, days: int = 40, invalid: float = 0.1):
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(users):
        for d in rng.choice(days, size=int(rng.integers(1, days)), replace=False):
            date = START + dt.timedelta(days=int(d))
            for k in rng.choice(5, size=int(rng.integers(1, 4)), replace=False):
                n = int(rng.integers(1, 9))
                ids = rng.integers(0, N_LOC, n).astype(np.int32)
                if rng.random() < invalid:  # one of the ways a row can be broken
                    kind = rng.integers(0, 5)
                    if kind == 0:
                        ids = np.array([], dtype=np.int32)
                        n = 0
                    elif kind == 1:
                        n += 1
                    elif kind == 2:
                        ids[0] = N_LOC
                    elif kind == 3:
                        ids[-1] = -1
                    else:
                        ids = None
                rows.append({"user_id": f"user{u:02d}", "date": date, "traj_id": int(k),
                             "loc_ids": ids, "n": n})
    t = pd.DataFrame(rows).sample(frac=1, random_state=seed).reset_index(drop=True)
    eps_pool = [0.1, 0.5, 1.0, 4.0, 1 / 3, 2.5, 0.3]
    led = []
    for u in range(users):
        for _ in range(int(rng.integers(0, 12))):
            day = START + dt.timedelta(days=int(rng.integers(-10, days + 10)))
            # Some rows were written under another window length (another stage or config):
            # the planner re-aligns them to its own windows.
            led.append({"user_id": f"user{u:02d}", "epsilon": float(rng.choice(eps_pool)),
                        "window_start": day})
    ledger = pd.DataFrame(led, columns=["user_id", "epsilon", "window_start"])
    return t, ledger


def _same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(P.PLAN_COLUMNS)
    def cells(col):  # repr, so that a NaN inside an array equals itself
        return [repr(None if a is None else np.asarray(a).tolist()) for a in col]

    assert cells(got["loc_ids"]) == cells(want["loc_ids"])
    pd.testing.assert_frame_equal(
        got.drop(columns="loc_ids").reset_index(drop=True),
        want.drop(columns="loc_ids").reset_index(drop=True),
        check_exact=True,
    )


# (budget, cost): exact multiples, 0.1-style costs whose float sum overshoots the budget,
# thirds, a cost over the budget, a zero-cost (UNIFORM-only) sweep, a large budget.
CASES = [(10.0, 4.0), (1.0, 0.25), (0.3, 0.1), (1.0, 0.1), (1.0, 1 / 3), (2.0, 2.0),
         (4.0, 5.0), (3.0, 0.0), (100000.0, 4.0), (7.5, 1.5), (45.0, 10.0), (0.7, 0.1 + 0.2)]


@pytest.mark.parametrize("budget,cost", CASES)
@pytest.mark.parametrize("window_days", [1, 7, 14])
@pytest.mark.parametrize("seed", range(3))
def test_vectorised_plan_equals_the_fraction_loop(budget, cost, window_days, seed):
    t, ledger = _random_case(seed * 101 + window_days)
    policy = P.BudgetPolicy(budget, window_days)
    kw = {"cost": cost, "policy": policy, "n_locations": N_LOC, "max_len": 7}
    want = oracle_plan(t, ledger, **kw)
    got = P.plan_users(t, ledger, **kw)
    _same(got, want)
    if budget == 10.0 and cost == 4.0:  # the data must exercise every reason
        assert {P.RELEASED, P.WINDOW_EXHAUSTED, P.INVALID} <= set(got["reason"])


def test_prior_spend_from_an_earlier_run_of_the_same_sweep():
    # A sweep that costs 1/10 + 1/5 + 0.7 (ATP 0.1, TP 0.2, EXP 0.7): its float sum is not 1.0.
    t, _ = _random_case(7, invalid=0.0)
    policy = P.BudgetPolicy(3.0, 7)
    cost = 0.1 + 0.2 + 0.7
    first = P.plan_users(t, None, cost=cost, policy=policy, n_locations=N_LOC)
    spent = first[first["released"]]
    ledger = pd.DataFrame({  # the ledger the first run wrote: one row per setting
        "user_id": np.repeat(spent["user_id"].to_numpy(), 3),
        "epsilon": np.tile([0.1, 0.2, 0.7], len(spent)),
        "window_start": np.repeat(spent["window_start"].to_numpy(), 3),
    })
    kw = {"cost": cost, "policy": policy, "n_locations": N_LOC}
    again = P.plan_users(t, ledger, **kw)
    _same(again, oracle_plan(t, ledger, **kw))
    # The Spark job sends the ledger counted per (user, window, epsilon): same plan.
    counted = ledger.groupby(["user_id", "window_start", "epsilon"]).size().rename("spends")
    _same(P.plan_users(t, counted.reset_index(), **kw), again)
    # What the first run spent plus what the second may spend never passes the budget.
    both = pd.concat([spent, again[again["released"]]])
    per_window = both.groupby(["user_id", "window_start"]).size()
    assert (per_window.map(lambda k: Fraction(cost) * k) <= Fraction(3.0)).all()


def test_one_user_entry_point_takes_a_ledger_without_user_ids():
    t, ledger = _random_case(3, users=1)
    mine = ledger[["epsilon", "window_start"]]
    kw = {"cost": 2.5, "policy": P.BudgetPolicy(6.0, 7), "n_locations": N_LOC}
    _same(P.plan_user(t, mine, **kw), oracle_plan_user(t, mine, **kw))


def test_rows_outside_the_fast_paths_take_the_exact_rule():
    # Python lists and float arrays (with a NaN) as loc_ids; n as floats with a missing value.
    t = pd.DataFrame({
        "user_id": ["a"] * 5,
        "date": [START] * 5,
        "traj_id": range(5),
        "loc_ids": [[1, 2], np.array([1.0, np.nan]), np.array([3.0, 4.0]), [[1, 2]], [5]],
        "n": [2.0, 2.0, 2.0, 1.0, np.nan],
    })
    kw = {"cost": 1.0, "policy": P.BudgetPolicy(10.0, 7), "n_locations": N_LOC}
    got = P.plan_users(t, None, **kw)
    assert got["reason"].tolist() == [P.RELEASED, P.INVALID, P.RELEASED, P.INVALID, P.INVALID]
    empty = pd.DataFrame(columns=["epsilon", "window_start"])
    _same(got, oracle_plan_user(t, empty, **kw))
    # All numpy arrays, but one 2-D, one 0-d or one of objects: the per-row rule again.
    for odd in (np.array([[1, 2]]), np.array(3), np.array([1, None], dtype=object)):
        cells = [np.array([1, 2]), odd, np.array([4, 5, 6])]
        t = pd.DataFrame({"user_id": "a", "date": [START] * 3, "traj_id": range(3),
                          "loc_ids": cells, "n": [2, 1, 3]})
        got = P.plan_users(t, None, **kw)
        assert got["reason"].tolist() == [P.RELEASED, P.INVALID, P.RELEASED], odd


def test_exact_remaining_takes_the_fraction_path_when_int64_cannot_hold_it():
    lefts = [Fraction(1.0), Fraction(2.0) - Fraction(1e-300)]  # scale 2^~1000+: beyond int64
    cost = Fraction(0.25)
    got = round_down_exact(lefts, [0, 0, 1, 1], cost, [0, 3, 0, 2])
    want = [_oracle_round_down(lefts[g] - cost * k)
            for g, k in zip([0, 0, 1, 1], [0, 3, 0, 2], strict=True)]
    assert got.tolist() == want
    assert got[2] < 2.0  # 2 - 1e-300 rounds down, never up to 2.0


def test_a_zero_cost_sweep_releases_everything_valid_unless_the_window_is_overspent():
    t, _ = _random_case(5, users=2, invalid=0.0)
    week = P.BudgetPolicy(1.0, 7).window_starts(t["date"])
    first = week.min().astype(object)
    ledger = pd.DataFrame({"user_id": ["user00"], "epsilon": [1.5], "window_start": [first]})
    got = P.plan_users(t, ledger, cost=0.0, policy=P.BudgetPolicy(1.0, 7), n_locations=N_LOC)
    over = (got["user_id"] == "user00") & (got["window_start"] == first)
    assert over.any() and not got.loc[over, "released"].any()
    assert got.loc[~over, "released"].all()


@pytest.mark.parametrize(("cost", "n"), [(2.5, 1678), (0.1, 3), (0.3, 7), (1 / 3, 10), (0.7, 0)])
def test_n_charges_add_up_exactly_and_round_toward_more_epsilon(cost, n):
    from udfs.budget import times_up, total_up

    got = times_up(cost, n)
    assert got == (total_up([cost] * n) if n else 0.0)
    assert Fraction(got) >= Fraction(cost) * n  # never the smaller epsilon
    assert times_up(0.1, 3) == 0.30000000000000004  # 3 x 0.1 exceeds 0.3 in binary

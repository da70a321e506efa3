"""KARMA's planner against brute force, the lower bound, and the strategy interface."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma import strategy
from karma.bound import lower_bound
from karma.errors import KarmaError
from karma.plan import Plan, from_policies
from karma.planner import Space, plan
from karma.simulate import simulate
from tests.chains import brute_force, chains

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
#: The plan space every strategy of the issue lives in, at one unit per group
#: (keep, swap, recompute in segments, with or without the checkpoint on the host).
FULL = Space()
#: A smaller space for longer chains, so that brute force stays seconds at 10 units.
KSR = Space(labels=("K", "S", "R"), depths=(1,), weights=("resident",))


def planned_time(profile, hw, capacity, space):
    try:
        p = plan(profile, hw, capacity, space=space, include_baselines=False)
    except KarmaError:
        return None
    return simulate(profile, p, hw, capacity).time


def assert_near_brute_force(case, space):
    profile, hw, capacity = case
    best = brute_force(profile, hw, capacity, space)
    found = planned_time(profile, hw, capacity, space)
    if best is None:
        assert found is None
    else:
        assert found is not None and found <= best * 1.01


@SETTINGS
@given(chains(min_units=1, max_units=10))
def test_planner_within_one_percent_of_brute_force_up_to_ten_units(case):
    assert_near_brute_force(case, KSR)


@SETTINGS
@given(chains(min_units=1, max_units=4))
def test_planner_within_one_percent_of_brute_force_in_the_full_space(case):
    assert_near_brute_force(case, FULL)


@SETTINGS
@given(chains(min_units=1, max_units=5))
def test_lower_bound_never_exceeds_the_brute_force_optimum(case):
    profile, hw, capacity = case
    best = brute_force(profile, hw, capacity, FULL)
    if best is not None:
        assert lower_bound(profile, hw, capacity) <= best * (1 + 1e-9)


@SETTINGS
@given(chains(min_units=1, max_units=8))
def test_karma_is_never_slower_than_any_baseline(case):
    profile, hw, capacity = case
    try:
        mine = strategy.run_strategy("karma", profile, hw, capacity)
    except KarmaError:
        mine = None
    for name in ["incore", "vdnn", "checkpoint", "superneurons", "zero-offload"]:
        other = strategy.run_strategy(name, profile, hw, capacity)
        if other.time is not None:
            assert mine is not None and mine.time <= other.time * (1 + 1e-9)


def test_too_small_capacity_names_the_minimum(tiny_profile):
    profile, hw = tiny_profile
    with pytest.raises(KarmaError, match=r"no plan fits in 0\.000 GB; the most frugal plan found needs") as err:
        plan(profile, hw, capacity=1.0)
    assert "\n" not in str(err.value)


def test_a_toy_strategy_registers_and_runs(tiny_profile):
    profile, hw = tiny_profile

    def every_other(profile, hw, capacity):
        labels = ["swap" if i % 2 else "keep" for i in range(len(profile.units))]
        return from_policies(profile.model, profile.batch, labels, strategy="toy")

    strategy.register("toy", every_other)
    assert "toy" in strategy.available()
    outcome = strategy.run_strategy("toy", profile, hw, capacity=math.inf)
    assert outcome.status == "ok" and outcome.plan.predicted_time == outcome.time


def test_baselines_are_found_by_file_name():
    assert {"karma", "incore", "vdnn", "checkpoint", "superneurons", "zero-offload"} <= set(strategy.available())
    with pytest.raises(KarmaError, match="unknown strategy 'vdnn2'; valid: .*checkpoint"):
        strategy.get("vdnn2")


def test_plan_json_round_trip(tmp_path, tiny_profile):
    profile, hw = tiny_profile
    outcome = strategy.run_strategy("karma", profile, hw, capacity=profile.in_core_peak_bytes() * 0.99)
    path = tmp_path / "plan.json"
    outcome.plan.to_json(path)
    again = Plan.from_json(path)
    assert again == outcome.plan and again.predicted_time == outcome.time


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.pop("version"), "'version'"),
    (lambda d: d["blocks"][0].update(policy="forget"), r"'blocks\[0\].policy'"),
    (lambda d: d["blocks"].pop(), "covers"),
    (lambda d: d.update(prefetch_depth=0), "'prefetch_depth'"),
    (lambda d: d.update(weights="cloud"), "'weights'"),
    (lambda d: d["blocks"][0].update(colour=1), r"'blocks\[0\].colour'"),
])
def test_malformed_plan_names_the_field(tmp_path, tiny_profile, mutate, match):
    profile, _ = tiny_profile
    data = from_policies(profile.model, profile.batch, ["keep"] * len(profile.units)).to_dict()
    mutate(data)
    with pytest.raises(KarmaError, match=match) as err:
        Plan.from_dict(data)
    assert "\n" not in str(err.value)


def test_plan_for_another_model_is_refused(tiny_profile):
    profile, hw = tiny_profile
    other = from_policies("other", 1, ["keep"] * (len(profile.units) + 1))
    with pytest.raises(KarmaError, match="plan is for"):
        simulate(profile, other, hw)


@settings(max_examples=40, deadline=None)
@given(chains(max_units=6), st.data())
def test_a_merged_group_keeps_its_largest_backward_transient(case, data):
    """The planner searches merged groups: a group's backward must hold what its worst unit holds
    (the first unit's input is the batch, the last ends in the loss: neither has that gradient)."""
    from karma.coarsen import merge
    from karma.profile import backward_transient

    profile, _, _ = case
    n = len(profile.units)
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    merged = merge(profile, start, stop)
    groups = list(profile.units[:start]) + [merged] + list(profile.units[stop:])
    assert backward_transient(groups, start) == max(backward_transient(profile.units, i) for i in range(start, stop))

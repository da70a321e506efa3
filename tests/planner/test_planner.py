"""KARMA's planner against the exhaustive optimum, every baseline, and the strategy interface."""

import math
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma import strategies as strategy
from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.plan.plan import Plan, from_policies
from karma.planner.planner import plan
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from karma.sim.bound import lower_bound
from karma.sim.simulate import in_core_peak_bytes, simulate
from models import build
from models.registry import PAPER_SIX
from tests.chains import V100, adversarial_units, chains, exhaustive_best, make_unit
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(5), deadline=None, suppress_health_check=list(HealthCheck), database=None)


def planned_time(profile, hw, capacity):
    try:
        p = plan(profile, hw, capacity)
    except KarmaError:
        return None
    return simulate(profile, p, hw, capacity, record=False).time


def prefix_rule(profile, hw, capacity, weights):
    """The one-knob rule a practitioner tries first (issue 12): recompute the first k units,
    one-unit segments, keep the rest; the smallest k that fits. Its time, or None."""
    n = len(profile.units)
    for k in range(n + 1):
        p = from_policies(profile.model, profile.batch, ["recompute"] * k + ["keep"] * (n - k),
                          segments=list(range(k)), weights=weights)
        result = simulate(profile, p, hw, capacity, record=False)
        if result.feasible:
            return result.time
    return None


def rivals(profile, hw, capacity) -> dict[str, float]:
    """Simulated time of every baseline that has a fitting plan, and of the prefix rule."""
    times = {}
    for name in strategy.available():
        if name == "karma":
            continue
        outcome = strategy.run_strategy(name, profile, hw, capacity)
        if outcome.time is not None:
            times[name] = outcome.time
    for weights in ("resident", "streamed"):
        time = prefix_rule(profile, hw, capacity, weights)
        if time is not None:
            times[f"prefix rule ({weights})"] = time
    return times


def assert_not_slower(profile, hw, capacity):
    mine = planned_time(profile, hw, capacity)
    for name, time in rivals(profile, hw, capacity).items():
        assert mine is not None, f"{name} fits ({time:.4f} s), KARMA found no plan"
        assert mine <= time * (1 + 1e-9), f"KARMA {mine:.4f} s, {name} {time:.4f} s"


@SETTINGS
@given(chains(min_units=1, max_units=5))
def test_planner_within_one_percent_of_the_exhaustive_optimum(case):
    """Every plan the Plan type can express (tests/chains.py `all_plans`), not only the planner's space."""
    profile, hw, capacity = case
    best, _ = exhaustive_best(profile, hw, capacity)
    found = planned_time(profile, hw, capacity)
    if best is None:
        assert found is None
    else:
        assert found is not None and found <= best * 1.01


def test_a_cheap_recompute_that_lets_a_deeper_prefetch_fit_is_found():
    """Drawn by the test above (2026-12-01): the optimum recomputes unit 1 (its recompute, the last of
    its segment, costs half its forward) so that depth 2 of the streamed layout fits; it is two moves
    from the streamed seed (all kept, depth 1), and the planner was 1.8% slower (0.3692 s vs 0.3628 s)."""
    MB = 1e6
    rows = [  # forward s, backward s, saved, input, output, params, workspace, backward workspace (MB), extras s
        (0.04074477018943054, 0.08148994782656298, 1573, 110, 32, 81, 242, 14, 0.0, 0.0),
        (0.006323046087138473, 0.011683238049541373, 179, 32, 212, 171, 229, 109, -0.0031615230435692366,
         0.001896913826141542),
        (0.012756190730424968, 0.017988518874635817, 1, 212, 356, 259, 299, 36, 0.012756190730424968,
         -0.002551238146084994),
        (0.03155673298885938, 0.0851334576496111, 698, 356, 400, 208, 271, 96, 0.009467019896657814,
         0.009467019896657814),
        (0.01, 0.021756462933165157, 887, 400, 75, 251, 49, 97, 0.0, -0.002),
    ]
    units = tuple(make_unit(f"u{i}", forward_time=f, backward_time=b, saved_bytes=sv * MB, input_bytes=i_ * MB,
                            output_bytes=o * MB, param_bytes=p * MB, optimizer_bytes=p * MB, workspace_bytes=w * MB,
                            backward_workspace_bytes=bw * MB, recompute_extra_time=last,
                            recompute_inner_extra_time=inner)
                  for i, (f, b, sv, i_, o, p, w, bw, last, inner) in enumerate(rows))
    profile = Profile("random", "tiny", 1, "analytic", "v100-abci", "adam", units)
    hw = replace(V100, h2d_bw=17.2e9, d2h_bw=9749578286.959036, host_update_bw=45e9, host_memory_bw=0.0)
    capacity = 4754000151.634216
    best, _ = exhaustive_best(profile, hw, capacity)
    assert best == pytest.approx(0.36280426560702433)
    assert planned_time(profile, hw, capacity) <= best * 1.01


@pytest.mark.slow
@settings(max_examples=examples(8), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(chains(min_units=1, max_units=8))
def test_karma_is_never_slower_than_any_baseline(case):
    """No baseline plan is a candidate inside the planner, so this can fail."""
    assert_not_slower(*case)


@cache
def paper_profile(name):
    return analytic_profile(build(name, "paper", device="meta"), load("v100-abci"))


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER_SIX)
def test_karma_is_never_slower_than_any_baseline_on_the_paper_models(name):
    hw = load("v100-abci")
    assert_not_slower(paper_profile(name), hw, hw.device_memory)


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
    outcome = strategy.run_strategy("karma", profile, hw, capacity=in_core_peak_bytes(profile) * 0.99)
    path = tmp_path / "plan.json"
    outcome.plan.to_json(path)
    again = Plan.from_json(path)
    assert again == outcome.plan and again.predicted_time == outcome.time


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.pop("version"), "'version'"),
    (lambda d: d["blocks"][0].update(policy="forget"), r"'blocks\[0\].policy'"),
    (lambda d: d["blocks"].pop(), "covers"),
    (lambda d: d.update(prefetch_depth=-1), "'prefetch_depth'"),
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


@st.composite
def long_chains(draw, min_units: int = 6, max_units: int = 40):
    """(profile, hardware, capacity) of chains too long for the exhaustive optimum, with shared and tied bytes
    (tests/chains.py adversarial_units) and the capacity at a random plan's own peak (that plan just fits) or
    a little over it: near the frugal limit, where the search has the fewest plans that fit."""
    n = draw(st.integers(min_units, max_units))
    profile = Profile("random", "tiny", 1, "analytic", "v100-abci", draw(st.sampled_from(["sgd", "adam"])),
                      draw(adversarial_units(n)))
    bw = st.one_of(st.floats(0.5e9, 5e9), st.floats(5e9, 200e9))
    hw = replace(V100, h2d_bw=draw(bw), d2h_bw=draw(bw), link_duplex=draw(st.sampled_from(["full", "half"])))
    labels = draw(st.lists(st.sampled_from(["keep", "swap", "recompute"]), min_size=n, max_size=n))
    chosen = from_policies("random", 1, labels, checkpoint=draw(st.sampled_from(["device", "host"])),
                           weights=draw(st.sampled_from(["resident", "streamed"])),
                           prefetch_depth=draw(st.integers(0, 4)))
    peak = simulate(profile, chosen, hw, capacity=float("inf"), record=False).peak_bytes
    return profile, hw, peak * draw(st.sampled_from([1.0, 1.01, 1.1, 1.5]))


@pytest.mark.slow
@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(long_chains())
def test_on_long_chains_near_the_frugal_limit_the_plan_fits_is_above_the_bound_and_beats_every_baseline(case):
    """Beyond the exhaustive optimum's reach the bound judges the plan from below (it is sound for every
    plan, karma/sim/bound.py) and every baseline from above; some plan fits by construction."""
    profile, hw, capacity = case
    found = plan(profile, hw, capacity)
    result = simulate(profile, found, hw, capacity, record=False)
    assert result.feasible
    assert result.time >= lower_bound(profile, hw, capacity, nodes=0)
    for name, time in rivals(profile, hw, capacity).items():
        assert result.time <= time * (1 + 1e-9), f"KARMA {result.time:.4f} s, {name} {time:.4f} s"

"""The exact window check of planner_cases' blame column (karma/experiments/window_check.py)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.experiments.planner_cases import blame
from karma.experiments.window_check import WindowCheck, check, joined, tilings, to_state
from karma.plan.space import to_plan
from karma.sim.simulate import simulate
from tests.chains import chains, plan_space
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(15), deadline=None, suppress_health_check=list(HealthCheck), database=None)


def test_a_window_holds_every_tiling_and_kind():
    for width in range(1, 6):
        shapes = tilings(width)
        assert len(shapes) == len(set(shapes)) == 4 * 5 ** (width - 1)
        assert all(s[0][0] == 0 and s[-1][1] == width and all(a[1] == b[0] for a, b in zip(s, s[1:], strict=False))
                   for s in shapes)


def test_a_block_crossing_a_window_edge_is_among_the_candidates():
    left, right = [(0, 2, "K")], [(5, 7, "S")]
    middle = ((2, 3, "K"), (3, 5, "S"))
    found = joined(left, middle, right)
    assert ((0, 3, "K"), (3, 7, "S")) in found and ((0, 2, "K"), (2, 3, "K"), (3, 5, "S"), (5, 7, "S")) in found


@SETTINGS
@given(chains(min_units=1, max_units=4), st.data())
def test_a_window_over_the_whole_chain_finds_the_optimum_at_the_plans_depth_and_layout(case, data):
    """With the window as wide as the chain, the check is the exhaustive search at the plan's prefetch depth
    and weight layout: its best is no slower than any plan of those, and it never reports a plan slower than
    the one it was given."""
    profile, hw, capacity = case
    n = len(profile.units)
    plans = plan_space(n, profile.model, profile.batch)
    plan = data.draw(st.sampled_from(plans))
    result = check(profile, hw, capacity, plan, width=n)
    given_s = simulate(profile, plan, hw, capacity, record=False)
    assert result.plan_s == (given_s.time if given_s.feasible else float("inf"))
    assert result.best_s <= result.plan_s
    same = [p for p in plans if (p.prefetch_depth, p.weights, p.optimizer) ==
            (plan.prefetch_depth, plan.weights, plan.optimizer)]
    times = [r.time for r in (simulate(profile, p, hw, capacity, record=False) for p in same) if r.feasible]
    if times:
        assert result.best_s <= min(times) * (1 + 1e-12)
        best = to_plan(profile, [(i, i + 1) for i in range(n)], result.best)
        assert simulate(profile, best, hw, capacity, record=False).time == result.best_s
    assert to_state(to_plan(profile, [(i, i + 1) for i in range(n)], to_state(plan))) == to_state(plan)


def test_the_blame_splits_the_gap_between_the_plan_and_the_bound():
    """planner_cases' blame column: what the better of the two checks found is the plan's, the rest the bound's."""
    state = (((0, 1, "K"),), 1, "resident")
    window = WindowCheck(6, 3, plan_s=1.10, best_s=1.05, window=(3, 9), best=state, simulated=1)
    assert blame(1.10, 1.00, 1.08, window) == ("plan, 4.8% (units 3-8 changed); "
                                               "bound or a change wider than 6 units, 5.0%")
    assert blame(1.10, 1.00, 1.02, window) == "plan, 7.8% (a ten-times-longer search)"
    none = WindowCheck(6, 3, plan_s=1.10, best_s=1.10, window=None, best=state, simulated=1)
    assert blame(1.10, 1.00, 1.10, none) == "bound or a change wider than 6 units, 10.0%"

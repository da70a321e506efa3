"""Path relinking between walk ends (karma/planner/relink.py): plans as labels and back, paths that only
ever return a faster plan that fits, deterministic."""


from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.plan.space import Space
from karma.planner.relink import from_labels, labels, relink, relink_ends
from karma.planner.search import INFEASIBLE, Search
from tests.chains import chains
from tests.fuzz import examples
from tests.planner.test_plan_dp import tilings

SPACE = Space()
SETTINGS = settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck), database=None)


@st.composite
def states(draw, n: int):
    """A random state of `n` units: any tiling and kinds, any depth and layout of the space."""
    return draw(tilings(n)), draw(st.sampled_from(SPACE.depths)), draw(st.sampled_from(SPACE.layouts))


@settings(max_examples=examples(300), deadline=None, database=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(states(n), states(n))), st.data())
def test_labels_round_trip_and_any_mix_of_two_plans_is_a_plan(pair, data):
    """A state's labels give it back (two adjacent blocks of one kind stay two); any mix of two states'
    labels, unit by unit, is a tiling of the chain (what every step of a path is)."""
    a, b = pair
    n = a[0][-1][1]
    assert from_labels(labels(a, n)) == a
    mask = data.draw(st.lists(st.booleans(), min_size=n + 2, max_size=n + 2))
    mixed = from_labels([x if m else y for x, y, m in zip(labels(a, n), labels(b, n), mask, strict=True)])
    blocks = mixed[0]
    assert [x for x, _, _ in blocks] == [0] + [y for _, y, _ in blocks[:-1]] and blocks[-1][1] == n
    assert from_labels(labels(mixed, n)) == mixed


@SETTINGS
@given(chains(min_units=2, max_units=7), st.data())
def test_a_path_returns_its_start_or_a_faster_plan_that_fits(case, data):
    """karma.planner.relink.relink: the start itself, or a plan the search ranks before it (faster, or less
    over the capacity: one that fits if the start does); the same again from a fresh memo; a path to
    itself goes nowhere."""
    profile, hw, capacity = case
    n = len(profile.units)
    start, guide = data.draw(states(n)), data.draw(states(n))
    search = Search(profile, hw, capacity, SPACE)
    found = relink(search, start, guide, 10_000)
    assert found == start or search.cost(found) < search.cost(start)
    assert search.cost(start) >= INFEASIBLE or search.cost(found) < INFEASIBLE
    assert relink(Search(profile, hw, capacity, SPACE), start, guide, 10_000) == found
    assert relink(search, start, start, 10_000) == start


@SETTINGS
@given(chains(min_units=2, max_units=7), st.data())
def test_relinked_ends_are_no_slower_than_the_fastest_end(case, data):
    """karma.planner.relink.relink_ends: never slower than the fastest of the ends it is given (a plan that
    fits where one of them does), whatever its budget."""
    profile, hw, capacity = case
    n = len(profile.units)
    ends = data.draw(st.lists(states(n), min_size=1, max_size=3))
    search = Search(profile, hw, capacity, SPACE)
    fastest = min(search.cost(e) for e in ends)
    budget = len(search.cache) + data.draw(st.integers(0, 400))
    found = relink_ends(search, ends, budget)
    assert search.cost(found) <= fastest
    assert fastest >= INFEASIBLE or search.cost(found) < INFEASIBLE

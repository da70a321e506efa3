"""The exact re-tiling around swap blocks (karma/planner/retile.py) and its program's limits
(karma/planner/recompute_dp.py):
bounded segments, host checkpoints only where their copy hides, swap blocks grown at the head of kept runs."""


import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.plan.space import Space
from karma.planner import recompute_dp
from karma.planner.recompute_dp import BUCKETS, Chain, solve, solve_reference
from karma.planner.recompute_dp import _front as front
from karma.planner.retile import cut_kept, grow_swaps, kept_runs, retile, with_swap
from karma.planner.search import INFEASIBLE, Search
from karma.profile.profile import Profile
from tests.chains import MB, chains, make_unit
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck), database=None)
KINDS = st.sampled_from("KRrS")


def tiles(blocks, n: int) -> bool:
    """The blocks cover units 0..n-1 in order, without gaps or overlaps."""
    return [a for a, _, _ in blocks] == [0] + [b for _, b, _ in blocks[:-1]] and blocks[-1][1] == n


@st.composite
def tilings(draw, n: int):
    """A random tiling of `n` units into blocks of random kinds."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    edges = [0] + cuts + [n]
    return tuple((a, b, draw(KINDS)) for a, b in zip(edges, edges[1:], strict=False))


@SETTINGS
@given(chains(min_units=2, max_units=9), st.integers(1, 4), st.data())
def test_bounded_segments_are_at_most_that_long_and_tile_the_chain(case, longest, data):
    """`longest` bounds every recompute segment (either checkpoint place), around pinned swap blocks too;
    a bound as long as the chain changes nothing."""
    profile, _, capacity = case
    n, chain = len(profile.units), Chain(profile)
    budget = data.draw(st.sampled_from([1e18, capacity]))
    a = data.draw(st.integers(0, n - 1))
    swaps = data.draw(st.sampled_from([(), ((a, data.draw(st.integers(a + 1, n))),)]))
    blocks = solve(chain, budget, swaps, host_checkpoints=True, longest=longest)
    if blocks is not None:
        assert tiles(blocks, n)
        assert all(b - a <= longest for a, b, k in blocks if k in "Rr")
        assert [(a, b) for a, b, k in blocks if k == "S"] == list(swaps)
    assert solve(chain, budget, swaps, True, longest=n) == solve(chain, budget, swaps, True)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(chains(min_units=1, max_units=40), st.booleans(), st.data())
def test_the_compiled_program_gives_the_reference_programs_blocks(case, host_gradients, data):
    """`solve` (compiled) and `solve_reference` (Python) return the same blocks, or both None, with and
    without pinned swaps, host checkpoints, a copy rate and a longest segment, at budgets from ample to
    too small; chains up to 40 units with budgets of a few buckets reach the bucketed fronts too."""
    profile, hw, capacity = case
    n, chain = len(profile.units), Chain(profile, host_gradients=host_gradients)
    budget = capacity * data.draw(st.sampled_from([1e9, 1.0, 0.5, 0.2, 0.0]))
    a = data.draw(st.integers(0, n - 1))
    swaps = data.draw(st.sampled_from([(), ((a, data.draw(st.integers(a + 1, n))),)]))
    host = data.draw(st.booleans())
    rate = data.draw(st.sampled_from([None, hw.d2h_bw, float("inf")]))
    longest = data.draw(st.sampled_from([None, 1, 3, n]))
    args = (chain, budget, swaps, host, rate, longest)
    assert solve(*args) == solve_reference(*args)


def test_the_compiled_program_matches_the_reference_past_the_exact_fronts(monkeypatch):
    """An 80-unit chain whose fronts outgrow `BUCKETS` candidates (the bucketed merge) plans the same."""
    rng = random.Random(0)
    units = tuple(make_unit(f"u{i}", forward_time=rng.uniform(1e-3, 5e-2), backward_time=rng.uniform(1e-3, 1e-1),
                            saved_bytes=rng.randint(1, 2000) * MB, input_bytes=rng.randint(1, 200) * MB,
                            output_bytes=rng.randint(1, 200) * MB, workspace_bytes=rng.randint(0, 300) * MB)
                  for i in range(80))
    profile = Profile("random", "tiny", 1, "analytic", "v100-abci", "sgd", units)
    chain = Chain(profile)
    budget = sum(u.saved_bytes for u in units) * 0.3
    merged = []
    monkeypatch.setattr(recompute_dp, "_front", lambda parts, width: merged.append(sum(p[3] for p in parts))
                        or front(parts, width))
    assert solve(chain, budget, host_checkpoints=True) == solve_reference(chain, budget, host_checkpoints=True)
    assert max(merged) > BUCKETS


@settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(chains(min_units=2, max_units=9), st.data())
def test_a_host_checkpoint_segment_hides_its_copy_behind_its_forward(case, data):
    """With a copy rate, every 'r' segment's checkpoint (its input, less what a kept block before holds)
    goes to the host in no longer than the segment's forward; an infinitely fast link changes nothing."""
    profile, hw, capacity = case
    chain, units = Chain(profile), profile.units
    budget = data.draw(st.sampled_from([1e18, capacity, capacity / 2]))
    blocks = solve(chain, budget, host_checkpoints=True, copy_rate=hw.d2h_bw)
    for i, (a, b, kind) in enumerate(blocks or ()):
        if kind == "r":
            shared = profile.shared_boundary_bytes(a - 1) if i and blocks[i - 1][2] == "K" else 0
            assert (units[a].input_bytes - shared) / hw.d2h_bw <= sum(u.forward_time for u in units[a:b]) + 1e-12
    assert solve(chain, budget, host_checkpoints=True, copy_rate=float("inf")) == solve(chain, budget, (), True)


@settings(max_examples=examples(200), deadline=None, database=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), tilings(n))), st.data())
def test_a_swap_block_set_into_a_plan_keeps_what_lies_clear_of_it(nb, data):
    """karma.planner.retile.with_swap: the result tiles the chain with [a, b) swapped, every block clear of it
    unchanged, and no cut that was not there or at a or b (re-tiling merges kept runs between cuts)."""
    n, blocks = nb
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    new = with_swap(blocks, a, b)
    assert tiles(new, n) and (a, b, "S") in new
    assert {x for x in blocks if x[1] <= a or x[0] >= b} <= set(new)
    assert {x for x, _, _ in new} <= {x for x, _, _ in blocks} | {a, b}


@settings(max_examples=examples(200), deadline=None, database=None)
@given(st.integers(1, 12).flatmap(tilings))
def test_kept_runs_are_the_maximal_runs_of_kept_units_longest_first(blocks):
    runs = kept_runs(blocks)
    kept = {i for a, b, k in blocks if k == "K" for i in range(a, b)}
    assert sorted(i for a, b in runs for i in range(a, b)) == sorted(kept)  # every kept unit, once
    assert all(a - 1 not in kept and b not in kept for a, b in runs)  # maximal
    assert [b - a for a, b in runs] == sorted((b - a for a, b in runs), reverse=True)


@settings(max_examples=examples(200), deadline=None, database=None)
@given(st.integers(1, 12).flatmap(tilings), st.integers(1, 5))
def test_kept_runs_cut_every_length_units_leave_the_other_blocks_alone(blocks, length):
    """karma.planner.retile.cut_kept: the chain tiled again, every block that is not kept unchanged, each maximal
    kept run cut into blocks of `length` units from its start (the last one shorter)."""
    n = blocks[-1][1]
    new = cut_kept(blocks, length)
    assert tiles(new, n)
    assert [x for x in new if x[2] != "K"] == [x for x in blocks if x[2] != "K"]
    for a, b in kept_runs(blocks):
        inside = [(x, y) for x, y, k in new if a <= x < b]
        assert inside == [(x, min(x + length, b)) for x in range(a, b, length)]


@SETTINGS
@given(chains(min_units=2, max_units=8))
def test_grown_swaps_fit_are_no_slower_and_need_swaps_in_the_space(case):
    """karma.planner.retile.grow_swaps: from a plan that fits, one that fits and is no slower; the same one again;
    nothing where the space has no swaps."""
    profile, hw, capacity = case
    n = len(profile.units)
    start = (tuple((i, i + 1, "K") for i in range(n)), 1, "resident")
    search = Search(profile, hw, capacity, Space())
    if search.cost(start) >= INFEASIBLE:
        start = (tuple((i, i + 1, "R") for i in range(n)), 1, "resident")
        if search.cost(start) >= INFEASIBLE:
            return
    found = grow_swaps(search, start, {}, None)
    assert search.cost(found) <= search.cost(start) and tiles(found[0], n)
    assert grow_swaps(Search(profile, hw, capacity, Space()), start, {}, None) == found
    no_swaps = Search(profile, hw, capacity, Space(kinds=("K", "R")))
    assert grow_swaps(no_swaps, start, {}, None) == start


@SETTINGS
@given(chains(min_units=3, max_units=8), st.data())
def test_bounded_retiled_plans_keep_their_swap_blocks_and_fit(case, data):
    """Re-tiling with bounded segments (PlannerConfig.retile_segment) keeps the swap
    blocks, bounds the segments and returns only plans that fit."""
    profile, hw, capacity = case
    n = len(profile.units)
    a = data.draw(st.integers(0, n - 1))
    swap = (a, data.draw(st.integers(a + 1, n)), "S")
    state = (with_swap(tuple((i, i + 1, "K") for i in range(n)), *swap[:2]), 2, "host-optimizer")
    search = Search(profile, hw, capacity, Space())
    for device in (True, False):
        for new in retile(search, state, {}, longest=2, device_checkpoints=device):
            assert [x for x in new[0] if x[2] == "S"] == [swap] and search.cost(new) < INFEASIBLE
            assert all(b - a <= 2 for a, b, k in new[0] if k in "Rr")
            assert device or new[2] == "host-optimizer"

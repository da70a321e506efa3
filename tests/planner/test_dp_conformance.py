"""The recompute program (karma/planner/recompute_dp.py) against the simulator on the plans it covers: every
tiling of a chain into kept units and recompute segments with device checkpoints, weights resident and the
optimizer on the device, nothing copied. There the program's memory model is the simulator's, so its answer
under a capacity is the fastest such plan the simulator lets fit (issue 36: a program whose value equals
`simulate()` on every plan of its class)."""

import itertools

from hypothesis import HealthCheck, given, settings

from karma.plan.space import Space
from karma.planner.recompute_dp import Chain, solve
from karma.planner.search import INFEASIBLE, Search
from tests.chains import chains
from tests.fuzz import examples


def recompute_tilings(n: int):
    """Every tiling of n units into kept units (one block each, as the program gives them) and recompute
    segments."""
    for labels in itertools.product("KR", repeat=n):
        runs = [(k, len(list(g))) for k, g in itertools.groupby(labels)]
        per_run = []
        start = 0
        for kind, length in runs:
            if kind == "K":
                per_run.append([tuple((i, i + 1, "K") for i in range(start, start + length))])
            else:  # every way to cut a run of recomputed units into segments
                ways = []
                for cuts in itertools.product((False, True), repeat=length - 1):
                    edges = [start] + [start + j + 1 for j, c in enumerate(cuts) if c] + [start + length]
                    ways.append(tuple((a, b, "R") for a, b in zip(edges, edges[1:], strict=False)))
                per_run.append(ways)
            start += length
        for parts in itertools.product(*per_run):
            yield tuple(block for part in parts for block in part)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(chains(min_units=1, max_units=6))
def test_the_recompute_program_finds_the_simulators_fastest_recompute_plan(case):
    profile, hw, capacity = case
    n = len(profile.units)
    search = Search(profile, hw, capacity, Space(layouts=("resident",)))
    depth = search.space.first_depth
    best = min(search.cost((blocks, depth, "resident")) for blocks in recompute_tilings(n))
    static = sum(u.buffer_bytes + u.param_bytes + u.optimizer_bytes for u in profile.units)
    found = solve(Chain(profile), capacity - static)
    if best >= INFEASIBLE:
        assert found is None or search.cost((tuple(found), depth, "resident")) >= INFEASIBLE
        return
    assert found is not None, "the program finds no plan where the simulator fits one"
    cost = search.cost((tuple(found), depth, "resident"))
    assert cost < INFEASIBLE, "the program's plan does not fit in the simulator"
    assert cost <= best * (1 + 1e-9), f"the program's plan {cost} is slower than the fastest that fits {best}"

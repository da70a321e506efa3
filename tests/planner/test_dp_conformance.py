"""The recompute program (karma/planner/recompute_dp.py) against the simulator on the plans it covers: every
tiling of a chain into kept units and recompute segments with device checkpoints, weights resident and the
optimizer on the device, nothing copied. There the program's memory model is the simulator's, so its answer
under a capacity is the fastest such plan the simulator lets fit (issue 36: a program whose value equals
`simulate()` on every plan of its class)."""

import itertools

from hypothesis import HealthCheck, given, settings

from karma.plan.space import Space
from karma.planner.recompute_dp import Chain, solve
from karma.planner.retile import static_bytes
from karma.planner.search import INFEASIBLE, Search
from tests.chains import chains, tilings
from tests.fuzz import examples


def recompute_tilings(n: int) -> set:
    """Every tiling of n units into kept units (one block each, as the program gives them) and recompute
    segments."""
    return {tuple(piece for (a, b), kind in zip(tiling, kinds, strict=True)
                  for piece in ([(i, i + 1, "K") for i in range(a, b)] if kind == "K" else [(a, b, "R")]))
            for tiling in tilings(n) for kinds in itertools.product("KR", repeat=len(tiling))}


@settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(chains(min_units=1, max_units=6))
def test_the_recompute_program_finds_the_simulators_fastest_recompute_plan(case):
    profile, hw, capacity = case
    n = len(profile.units)
    search = Search(profile, hw, capacity, Space(layouts=("resident",)))
    depth = search.space.first_depth
    best = min(search.cost((blocks, depth, "resident")) for blocks in recompute_tilings(n))
    found = solve(Chain(profile), capacity - static_bytes(search, "resident"))
    if best >= INFEASIBLE:
        assert found is None or search.cost((tuple(found), depth, "resident")) >= INFEASIBLE
        return
    assert found is not None, "the program finds no plan where the simulator fits one"
    cost = search.cost((tuple(found), depth, "resident"))
    assert cost < INFEASIBLE, "the program's plan does not fit in the simulator"
    assert cost <= best * (1 + 1e-9), f"the program's plan {cost} is slower than the fastest that fits {best}"

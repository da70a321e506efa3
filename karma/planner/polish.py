"""Step 5 of KARMA's planner (karma/planner/planner.py): the polish at one group per unit, and its starts.

Its starts are the exact recompute-only plans of least recompute time (karma/planner/recompute_dp.py) under each
weight layout's memory, the fastest plans of the search re-tiled exactly around their swap blocks
(karma/planner/retile.py) and the most frugal state of the space; it descends from the fastest of them and
keeps the fastest plan found. A coarse recompute group is one long segment, far more memory-hungry than
the unit-level segments of the same recompute time, so the coarse levels alone place recompute badly.
"""

from __future__ import annotations

from dataclasses import replace

from karma.plan.coarsen import balanced_groups, coarsen
from karma.plan.space import LAYOUTS, Space, State, refine_state
from karma.planner.recompute_dp import BUCKETS, Chain, solve
from karma.planner.retile import retile, swap_sets
from karma.planner.search import INFEASIBLE, Search
from karma.profile.profile import Profile

#: Tries per layout of the exact recompute-only seeds (each lowers the budget by the simulated excess).
SEED_TRIES = 4
#: Descents in the polish (from the fastest exact and re-tiled seeds).
POLISH_STARTS = 3
#: On a chain of up to this many units the polish descends from every start by steepest descent with
#: repair and combined moves (a kind change together with another depth or layout), a few hundred
#: simulations a step. Longer chains (the runtime's 8-unit Megatron small preset, every paper model) keep
#: the budgeted first-improvement descent from the fastest starts. A 5-unit chain's optimum, a cheap unit
#: recomputed so that depth 2 of the streamed layout fits, is two moves from the streamed seed, which the
#: first-improvement descent misses (tests/planner/test_planner.py, whose exhaustive checks go up to 5 units).
SHORT_CHAIN = 6
#: Re-tiled swap sets per search, at most, and the bound on their n^2 dynamic-program cost.
RETILE_STARTS = 5
RETILE_WORK = 5 * 128**2
#: On a chain too long for that bound, re-tiling considers recompute segments of at most `RETILE_SEGMENT`
#: units (the program's cost grows with the chain times the longest segment: on ResNet-1001's 335 units the
#: bounded program is several times faster), from `RETILE_LONG_STARTS` sources per search. ResNet-1001's
#: long search's plan is of host-checkpoint segments of 3-9 units; the unbounded program, indifferent
#: to the length of segments of equal recompute time, tiles them far longer, whose recompute the
#: prefetches beside it push over the capacity, and its re-tiled plans are slower (docs/measurements/README.md).
RETILE_SEGMENT = 10
RETILE_LONG_STARTS = 2
#: The exact recompute-only program runs over at most this many runs of units (its time grows with the
#: square of the chain: about a second at 512 units, over a minute at ResNet-1001's 3339 layer units);
#: above every paper model's block chain (ResNet-1001: 335 units), so those chains are never merged for it.
EXACT_UNITS = 384


def exact_seeds(search: Search, profile: Profile, capacity: float, space: Space) -> list[State]:
    """Per weight layout, the recompute-only plan of least recompute time that fits (karma/planner/recompute_dp.py),
    its budget lowered by the simulated excess until it fits (`SEED_TRIES` tries). On a chain of more
    than `EXACT_UNITS` units the program runs over that many runs of about equal compute (their merged
    memory is conservative, karma/plan/coarsen.py), its segments cut at run edges: exact for that chain, a
    seed for the descent on this one. A chain too long for re-tiling's n^2 bound but not coarsened
    (ResNet-1001's 335 block units) bounds the segments as re-tiling does (`retile_limits`): a faster
    program, and the same plan."""
    if not {"K", "R"} <= set(space.kinds):
        return []
    units, out = profile.units, []
    long_chain = len(units) > EXACT_UNITS
    cuts = balanced_groups(profile, EXACT_UNITS) if long_chain else [(i, i + 1) for i in range(len(units))]
    chain_profile = coarsen(profile, cuts) if long_chain else profile
    longest = None if long_chain else retile_limits(len(units))[1]
    # host-optimizer's chain is streamed's with less memory: the descent reaches it by a layout move
    for layout in [w for w in space.layouts if w != "host-optimizer" or "streamed" not in space.layouts]:
        weights, optimizer = LAYOUTS[layout]
        static = sum(u.buffer_bytes for u in units)
        if weights != "streamed":
            static += sum(u.param_bytes + (u.optimizer_bytes if optimizer == "device" else 0) for u in units)
        chain = Chain(chain_profile, host_gradients=layout != "resident")
        budget = capacity - static
        for _ in range(SEED_TRIES):
            blocks = solve(chain, budget, longest=longest)
            if blocks is None:
                break
            state = (unit_blocks(blocks, cuts), space.first_depth, layout)
            if search.cost(state) < INFEASIBLE:
                out.append(state)
                break
            budget -= max(search.peaks[state] - capacity, budget / BUCKETS)  # over for another reason: step down
    return out


def unit_blocks(blocks: list[tuple[int, int, str]], cuts: list[tuple[int, int]]) -> tuple:
    """Blocks over runs `cuts` as blocks over units: a kept run is one kept block per unit, as
    karma/planner/recompute_dp.py gives them on a unit chain (karma.plan.space.refine_state would keep the run
    one block)."""
    out = []
    for a, b, kind in blocks:
        start, stop = cuts[a][0], cuts[b - 1][1]
        out += [(i, i + 1, kind) for i in range(start, stop)] if kind == "K" else [(start, stop, kind)]
    return tuple(out)


def retiled(search: Search, coarse: Search, cuts: list[tuple[int, int]]) -> list[State]:
    """The fastest plans of the coarse and the unit-level search with distinct swap blocks, re-tiled
    exactly around them (karma/planner/retile.py); none on a chain so long that the program is slow."""
    n = len(search.profile.units)
    starts, longest = retile_limits(n)
    if not starts:
        return []
    units = [(i, i + 1) for i in range(n)]
    sources = [refine_state(s, cuts, units) for s in swap_sets(coarse, starts)] + swap_sets(search, starts)
    chains: dict = {}
    # a long chain's program runs once per source, with host checkpoints where the space has them (its plans
    # may checkpoint on the device too): on ResNet-1001 the same plan in less time than also without them
    return [new for state in dict.fromkeys(sources)
            for new in retile(search, state, chains, longest, device_checkpoints=longest is None)]


def retile_limits(n: int) -> tuple[int, int | None]:
    """Sources re-tiled per search on an `n`-unit chain, and the longest recompute segment re-tiling
    considers (None: any); no re-tiling beyond `EXACT_UNITS` units, where one program takes seconds."""
    if n**2 <= RETILE_WORK:
        return min(RETILE_STARTS, RETILE_WORK // n**2), None
    return (RETILE_LONG_STARTS if n <= EXACT_UNITS else 0), RETILE_SEGMENT


def frugal_state(n: int, space: Space) -> State:
    """Every one of `n` units swapped on its own, copied back on demand, weights streamed where the
    space has these: a plan of little device memory when no single layer's backward can share the
    device with another's (a recompute keeps a checkpoint and makes tensors again; not proven the least)."""
    kind = "S" if "S" in space.kinds else space.kinds[0]
    layout = "streamed" if "streamed" in space.layouts else space.layouts[-1]
    return tuple((i, i + 1, kind) for i in range(n)), min(space.depths), layout


def polish(state: State, search: Search, profile: Profile, capacity: float, space: Space, budget: int,
           more: list[State] | None = None) -> State:
    """At one group per unit: descend from the exact recompute-only seeds and `more` too, keep the fastest."""
    if len(search.profile.units) != len(profile.units):
        return state
    best = state
    starts = POLISH_STARTS
    if len(profile.units) <= SHORT_CHAIN:  # from every start, and the state found
        search, starts = replace(search, first=False, combos=True), None  # the same memo
        more = [state] + list(more or [])
    # (ordered: a set's order of equally fast starts changed with the process's string hashes, and so the plan)
    for seed_state in sorted(dict.fromkeys(exact_seeds(search, profile, capacity, space) + (more or [])),
                             key=search.cost)[:starts]:
        found = search.descend(seed_state, len(search.cache) + budget)
        if search.cost(found) < search.cost(best):
            best = found
    return best

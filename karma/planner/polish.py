"""Step 5 of KARMA's planner (karma/planner/planner.py): the polish at one group per unit, and its starts.

Its starts are the exact recompute-only plans of least recompute time (karma/planner/recompute_dp.py) under each
weight layout's memory, the fastest plan of the coarse and of the unit-level search re-tiled exactly around
their swap blocks (karma/planner/retile.py) and the most frugal state of the space; it descends from the
fastest of them and keeps the fastest plan found. A coarse recompute group is one long segment, far more
memory-hungry than the unit-level segments of the same recompute time, so the coarse levels alone place
recompute badly.
"""

from __future__ import annotations

from dataclasses import replace

from karma.plan.coarsen import balanced_groups, coarsen
from karma.plan.space import LAYOUTS, Space, State, refine_state
from karma.planner.recompute_dp import BUCKETS, Chain, solve
from karma.planner.retile import retile, swap_sets
from karma.planner.search import INFEASIBLE, Search
from karma.profile.profile import Profile


def exact_seeds(search: Search, profile: Profile, capacity: float, space: Space) -> list[State]:
    """Per weight layout, the recompute-only plan of least recompute time that fits (karma/planner/recompute_dp.py),
    segments of at most the config's `retile_segment` units, its budget lowered by the simulated excess
    until it fits (`seed_tries` tries). On a chain of more than `dp_runs` units the program runs over that
    many runs of about equal compute (their merged memory is conservative, karma/plan/coarsen.py), its
    segments cut at run edges: exact for that chain, a seed for the descent on this one."""
    if not {"K", "R"} <= set(space.kinds):
        return []
    config = search.config
    units, out = profile.units, []
    long_chain = len(units) > config.dp_runs
    cuts = balanced_groups(profile, config.dp_runs) if long_chain else [(i, i + 1) for i in range(len(units))]
    chain_profile = coarsen(profile, cuts) if long_chain else profile
    longest = config.retile_segment
    # host-optimizer's chain is streamed's with less memory: the descent reaches it by a layout move
    for layout in [w for w in space.layouts if w != "host-optimizer" or "streamed" not in space.layouts]:
        weights, optimizer = LAYOUTS[layout]
        static = sum(u.buffer_bytes for u in units)
        if weights != "streamed":
            static += sum(u.param_bytes + (u.optimizer_bytes if optimizer == "device" else 0) for u in units)
        chain = Chain(chain_profile, host_gradients=layout != "resident")
        budget = capacity - static
        for _ in range(config.seed_tries):
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
    exactly around them (karma/planner/retile.py); none on a chain longer than the program's `dp_runs`."""
    config = search.config
    n = len(search.profile.units)
    if n > config.dp_runs:
        return []
    units = [(i, i + 1) for i in range(n)]
    starts = config.retile_starts
    sources = [refine_state(s, cuts, units) for s in swap_sets(coarse, starts)] + swap_sets(search, starts)
    chains: dict = {}
    return [new for state in dict.fromkeys(sources)
            for new in retile(search, state, chains, config.retile_segment)]


def frugal_state(n: int, space: Space) -> State:
    """Every one of `n` units swapped on its own, copied back on demand, weights streamed where the
    space has these: a plan of little device memory when no single layer's backward can share the
    device with another's (a recompute keeps a checkpoint and makes tensors again; not proven the least)."""
    kind = "S" if "S" in space.kinds else space.kinds[0]
    layout = "streamed" if "streamed" in space.layouts else space.layouts[-1]
    return tuple((i, i + 1, kind) for i in range(n)), min(space.depths), layout


def polish(state: State, search: Search, profile: Profile, capacity: float, space: Space, budget: int,
           more: list[State] | None = None) -> State:
    """At one group per unit: a budgeted first-improvement descent from each of the `polish_starts`
    fastest of the exact recompute-only seeds and `more`; then a steepest descent with repairs
    and combined moves (a kind change together with another depth or layout) from the fastest plan found,
    within `budget` plans more. The combined moves reach plans two moves away that no single move
    improves towards (a cheap unit recomputed so that a deeper prefetch of the streamed layout fits)."""
    if len(search.profile.units) != len(profile.units):
        return state
    best = state
    # (ordered: a set's order of equally fast starts changed with the process's string hashes, and so the plan)
    starts = sorted(dict.fromkeys(exact_seeds(search, profile, capacity, space) + (more or [])), key=search.cost)
    for seed_state in starts[: search.config.polish_starts]:
        found = search.descend(seed_state, search.spent + budget)
        if search.cost(found) < search.cost(best):
            best = found
    steep = replace(search, first=False, combos=True)  # the same memo
    return steep.descend(best, search.spent + budget)

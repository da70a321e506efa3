"""KARMA's planner: the fastest plan the performance model can find under a capacity.

The paper (Sec. IV-V) groups units into capacity-based blocks and chooses,
per block, swap or recompute so that transfers hide behind compute, with
the performance model as the judge. We search that plan space directly
(karma/plan/space.py: any tiling into blocks, keep / swap / recompute with
the checkpoint on the device or the host, prefetch depth, and the three
weight layouts), coarse to fine, the same steps on every chain; every
setting is a field of `PlannerConfig` (karma/planner/config.py) and the
budgets count units simulated, so that a step costs the same at every level:

1. Coarsen: the chain is cut into at most `groups` runs of about equal
   compute (karma/plan/coarsen.py); a layer chain only between its residual
   blocks (where a boundary carries one tensor), into up to twice `groups`,
   so that its search starts from the block chain's plans. Where no plan of
   the merged groups fits (beyond their reach: a group's backward alone
   exceeds the capacity) the search runs again from `reach_groups` times
   `groups` time-balanced cuts, and the fastest plan wins.
2. Seed with the plan families KARMA's concurrency analysis suggests
   (`karma.plan.space.seeds`) under every weight layout, descend from the best
   few (karma/planner/search.py: steepest descent with repair moves), then
   `walks` walks of simulated annealing from the best, each its own seed: a
   walk crosses the ridges between plan families (another prefetch depth
   makes other blocks fit), which descents rarely do.
3. Refine: halve the groups (the coarse cuts stay cuts) and descend again
   near the block edges until one group is one unit. The merged chain's
   memory is conservative at block units and may under-count at layer units,
   so a refined plan over the capacity is repaired to its fastest neighbour
   that fits.
4. Walk unit by unit: `unit_walks` annealing walks over the whole unit-level
   neighbourhood, where the coarse groups were too coarse for the plan's
   structure, then path relinking between the plans they end in
   (karma/planner/relink.py): plans on the paths between two good plans are
   often faster than both.
5. Polish (karma/planner/polish.py): descend from the exact recompute-only
   plans of least recompute time (karma/planner/recompute_dp.py, a dynamic
   program over the chain) under each layout's memory, from the search's
   fastest swap set re-tiled exactly by the same program
   (karma/planner/retile.py) and from the most frugal state (every unit
   swapped on its own, on demand, weights streamed: the reach), then a
   steepest descent with combined moves. A coarse recompute group is one
   long segment, so the coarse levels alone place recompute badly.
6. Grow swaps (karma/planner/retile.py `grow_swaps`): swap the head of the
   longest kept runs, one unit, then two, four... bisected, then single
   recomputed units, each swap set re-tiled exactly, kept while faster. A
   swap that frees memory for kept units pays only once the recompute
   segments around it move too, which one-edge moves do not reach.

Every plan comes from this search; no other strategy's plan is a candidate.
If no plan fits, the error names the capacity the most frugal plan found
would need. A plan records the config that made it (`notes['planner']`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.plan.coarsen import balanced_groups, block_groups, clean_cuts, coarsen, halve
from karma.plan.plan import Plan
from karma.plan.space import Space, State, refine_state, seeds, to_plan
from karma.planner.config import PlannerConfig
from karma.planner.polish import frugal_state, polish, retiled
from karma.planner.relink import relink_ends
from karma.planner.retile import grow_swaps
from karma.planner.search import INFEASIBLE, Search
from karma.profile.profile import Profile
from karma.sim.simulate import simulate


def coarse_search(profile: Profile, hw: Hardware, capacity: float, space: Space, budget: int,
                  config: PlannerConfig) -> tuple[State, Search]:
    """Best state on `profile` (one group per unit): descend from the `coarse_starts` best seeds
    (distinct block sequences), then `walks` annealing walks from the best until `budget` plans."""
    search = Search(profile, hw, capacity, space, config=config)
    n = len(profile.units)
    depth = space.first_depth
    candidates = sorted(((blocks, depth, layout) for blocks in seeds(n, space) for layout in space.layouts),
                        key=search.cost)
    best, tried = None, set()
    for state in candidates:
        if state[0] in tried:
            continue
        tried.add(state[0])
        found = search.descend(state, budget)
        if best is None or search.cost(found) < search.cost(best):
            best = found
        if len(tried) >= config.coarse_starts:
            break
    start, found = search.spent, best
    depths = walk_depths(search, space, config.walks)
    for walk in range(config.walks):  # several shorter walks from the best descent, each its own seed
        walker, origin = search, best
        if walk < len(depths):  # the same memo, moves at one depth, from the fastest plan there
            walker = replace(search, space=replace(space, depths=(depths[walk],)))
            origin = min((s for s in search.cache if s[1] == depths[walk]), key=search.cost)
        state = walker.anneal(origin, start + (budget - start) * (walk + 1) // config.walks,
                              config.seed * config.walks + walk)
        if search.cost(state) < search.cost(found):
            found = state
    return found, search


def walk_depths(search: Search, space: Space, walks: int) -> list[int]:
    """Depths for the coarse walks: the overlapping depths but the seeds' own (`Space.first_depth`, which
    the descents explore), the deepest `walks` of them, each only where a plan of it fits already (at the
    reach deep prefetches fit nowhere: the walks stay free there); shallowest first. A depth is a family
    of plans (it changes which blocks fit), and a walk free to change it settles in the family it starts
    in; walks at fixed depths search a family each (WRN-28-10's fastest plan is at depth 2, its walks
    free to move settle at depth 4)."""
    fitting = {s[1] for s, cost in search.cache.items() if cost < INFEASIBLE}
    others = sorted(d for d in space.depths if d and d != space.first_depth and d in fitting)
    return others[-walks:]


def unit_walks(search: Search, state: State, budget: int, relinking: int, config: PlannerConfig) -> State:
    """`unit_walks` annealing walks over the whole unit-level neighbourhood (`search`'s memo, without its
    bound on split points or its first-improvement descent), each from the fastest plan found so far,
    sharing `budget` plans simulated; then `relinking` more plans simulated on the paths between the
    plans the walks end in (karma/planner/relink.py)."""
    walker = replace(search, near=None, first=False)
    ends = []
    for walk in range(config.unit_walks):
        found = walker.anneal(state, walker.spent + budget // config.unit_walks,
                              config.seed * config.unit_walks + walk)
        ends.append(found)
        if walker.cost(found) < walker.cost(state):
            state = found
    if not relinking:
        return state
    found = relink_ends(walker, ends, walker.spent + relinking)
    return found if walker.cost(found) < walker.cost(state) else state


def plan(profile: Profile, hw: Hardware, capacity: float, space: Space | None = None,
         config: PlannerConfig | None = None) -> Plan:
    """KARMA's plan for `profile` on `hw` under `capacity` bytes (see the module docstring).
    Where no plan of the coarse chain fits (beyond the reach of merged groups: a group's backward alone
    exceeds the capacity), the search runs again from `reach_groups` times the groups and the fastest
    plan found wins: which coarse cut refines into the best plan there is not monotone in the groups."""
    space = space or Space()
    config = config or PlannerConfig()
    n = len(profile.units)
    groups = config.groups
    # a layer chain's coarse groups are whole residual blocks (up to twice `groups` of them: ResNet-50's 37
    # at layer units are its 16 blocks, their last ReLUs and the stem's layers), whose plans are far faster
    # than those of time-balanced groups cut inside blocks; a block chain (every boundary one tensor) is cut
    # into `groups` time-balanced groups
    clean = clean_cuts(profile)
    count = groups if len(clean) == n else max(groups, min(len(clean), 2 * groups))
    searched = [_search(profile, hw, capacity, space, block_groups(profile, count), config)]
    if not searched[0].coarse_fits:
        for factor in config.reach_groups:
            cuts = balanced_groups(profile, min(factor * groups, n))
            if len(cuts) > len(searched[-1].coarse_cuts):
                searched.append(_search(profile, hw, capacity, space, cuts, config))
    fitting = [s for s in searched if s.fits]
    if not fitting:
        frugal = min(s.frugal for s in searched)
        raise KarmaError(f"no plan fits in {capacity / 1e9:.3f} GB; the most frugal plan found needs "
                         f"{frugal / 1e9:.3f} GB")
    best = min(fitting, key=lambda s: s.time)
    return replace(best.plan, notes={"groups": n, "coarse_groups": len(best.coarse_cuts),
                                     "evaluations": best.evaluations,
                                     "coarse_tried": [len(s.coarse_cuts) for s in searched],
                                     "planner": config.to_dict()})


@dataclass
class _Searched:
    """One coarse-to-fine search: its plan (None if it fits nowhere), what it simulated, how frugal."""

    plan: Plan | None
    time: float
    frugal: float
    coarse_cuts: list[tuple[int, int]]
    coarse_fits: bool
    evaluations: list[int]

    @property
    def fits(self) -> bool:
        return self.plan is not None


def _search(profile: Profile, hw: Hardware, capacity: float, space: Space, cuts: list[tuple[int, int]],
            config: PlannerConfig) -> _Searched:
    """Coarse search over the groups `cuts`, refined to units, walked, polished and grown (the module
    docstring)."""
    groups, n = len(cuts), len(profile.units)
    # a chain much longer than the groups spends more on its refinement levels and its polish
    coarse_work = config.coarse_work * min(1.0, 4 * groups / n)
    state, search = coarse_search(coarsen(profile, cuts), hw, capacity, space,
                                  budget=int(min(coarse_work / len(cuts), config.coarse_plans)), config=config)
    coarse, coarse_cuts = search, cuts
    coarse_fits = search.cost(state) < INFEASIBLE
    evaluations = [search.spent]
    frugal = search.frugal()
    if len(cuts) == n:
        search = replace(search, near=2, first=True)  # the same memo, unit-level moves near the edges
    while len(cuts) < n:
        finer = halve(profile, cuts)
        state = refine_state(state, cuts, finer)
        cuts = finer
        search = Search(coarsen(profile, cuts), hw, capacity, space, near=2, first=True, config=config)
        state = search.descend(state, int(config.fine_work / n))
        evaluations.append(search.spent)
        frugal = min(frugal, search.frugal())
    # the same share of plans on every chain, searched unit by unit or not: with it the walks end in the same
    # plan for more seeds (the variants compared: docs/measurements/README.md, "One planner for every chain")
    walk_budget = int(min(config.unit_walk_work / n, config.coarse_plans))
    state = unit_walks(search, state, walk_budget, int(config.relink_work / n), config)
    more = retiled(search, coarse, coarse_cuts) + [frugal_state(n, space)]
    state = polish(state, search, profile, capacity, space, budget=int(config.seed_work / n), more=more)
    if n <= config.dp_runs:
        state = grow_swaps(search, state, {}, config.retile_segment)
    frugal = min(frugal, search.frugal())
    best = to_plan(profile, cuts, state)
    result = simulate(profile, best, hw, capacity, record=False)
    fits = result.feasible and search.cost(state) < INFEASIBLE
    return _Searched(best if fits else None, result.time if fits else float("inf"),
                     min(frugal, result.peak_bytes), coarse_cuts, coarse_fits, evaluations)

"""KARMA's planner: the fastest plan the performance model can find under a capacity.

The paper (Sec. IV-V) groups units into capacity-based blocks and chooses,
per block, swap or recompute so that transfers hide behind compute, with
the performance model as the judge. We search that plan space directly
(karma/plan/space.py: any tiling into blocks, keep / swap / recompute with
the checkpoint on the device or the host, prefetch depth, and the three
weight layouts), coarse to fine (docs/planner.md; what each step gained:
docs/measurements/README.md):

1. Coarsen: the chain is cut into at most `groups` runs of about equal
   compute (karma/plan/coarsen.py); a short chain is searched unit by unit. A
   layer chain is cut only between its residual blocks (`block_groups`:
   where a boundary carries one tensor), into up to twice `groups`, so
   that its coarse search starts from the block chain's plans. Beyond the
   reach of the merged groups (no plan of them fits) the whole search runs
   again from `REACH_GROUPS` times `groups` time-balanced cuts, and the
   fastest wins.
2. Seed with the plan families KARMA's concurrency analysis suggests
   (`plan_space.seeds`) under every weight layout, descend from the best
   few (karma/planner/search.py: steepest descent with repair moves), then
   `WALKS` walks of simulated annealing from the best, each its own seed and
   its share of the `budget` plans simulated. A walk crosses the ridges between
   plan families (e.g. another prefetch depth that makes other blocks fit), which
   kicked descents rarely do. Several shorter walks beat one long one: a long walk
   settles in one family, and of several walks one often finds another. On a
   short chain searched unit by unit each walk keeps to one prefetch depth
   (`walk_depths`), so that each walk searches a depth family of its own.
3. Refine: halve the groups (the coarse cuts stay cuts), descend again with
   moves bounded to the neighbourhood of the block edges, until one group is
   one unit. The merged chain's memory is conservative at block units, so
   the fine levels also win back what coarsening cost; at layer units it
   can count less than the finer chain, so a refined plan over the capacity
   is repaired to its fastest neighbour that fits (`Search.descend`).
4. On a chain of more units than groups but at most `UNIT_WALK_UNITS`, walk
   unit by unit (`unit_walks`): annealing walks over the whole unit-level
   neighbourhood from the refined plan, where the coarse groups are too
   coarse for the plan's structure (Megatron-1.2B: swaps, kept runs and
   recompute placed layer by layer, two layers a group). Then path relinking
   between the plans the walks end in (karma/planner/relink.py): their ends lie
   a few percent apart, and plans on the paths between them are often faster
   than both. A walked plan that fits is final (steps 5 and 6 find nothing
   faster after the walks).
5. Polish at one group per unit (karma/planner/polish.py): the exact recompute-only plans of least
   recompute time (karma/planner/recompute_dp.py, a dynamic program over the chain,
   under the resident and the streamed layouts' memory) are simulated and
   descended from too (on a short chain by steepest descent with combined
   moves, SHORT_CHAIN); the fastest plan found wins. A coarse recompute group
   is one long segment, far more memory-hungry than the unit-level segments
   of the same recompute time, so the coarse levels alone place recompute badly.
   The most frugal state of the space (`frugal_state`: every unit its own swap block,
   copies back on demand, weights streamed) is a seed too: at the reach the merged
   chain fits nowhere, and the descent from an infeasible state need not find the
   few plans that fit.
6. Grow swaps (karma/planner/retile.py `grow_swaps`): swap the head of the two longest
   kept runs of the polished plan (the earlier run first), one unit, then two,
   four... and bisect between the last faster and the first not, then single
   recomputed units, each swap set re-tiled exactly (its kept runs also cut every
   16, 32 or 48 units: the prefetch depth counts blocks, so these cuts set when
   the copies back start), kept while faster. A swap that frees memory for kept
   units pays only once the recompute segments around it move too, which the
   descents' one-edge moves do not reach.

The budgets count simulated units, not plans, so that a step costs the same
time at every level. Every plan comes from this search; no other strategy's
plan is a candidate. If no plan fits, the error names the capacity the most
frugal plan found would need.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.plan.coarsen import balanced_groups, block_groups, clean_cuts, coarsen, halve
from karma.plan.plan import Plan
from karma.plan.space import Space, State, refine_state, seeds, to_plan
from karma.planner.polish import frugal_state, polish, retile_limits, retiled
from karma.planner.relink import relink_ends
from karma.planner.retile import grow_swaps
from karma.planner.search import INFEASIBLE, Search
from karma.profile.profile import Profile
from karma.sim.simulate import simulate

#: Units simulated by the coarse search and by each refinement level (the planning time that
#: karma.experiments.planner_gap reports follows them).
COARSE_WORK = 300_000
FINE_WORK = 50_000
#: Units simulated by the descents from the exact recompute-only seeds.
SEED_WORK = 50_000
#: At most this many plans in the coarse search.
COARSE_PLANS = 20_000
#: The coarse search's annealing walks, sharing its budget.
WALKS = 3
#: A chain of at most this many units, searched unit by unit, walks at one prefetch depth per walk
#: (`walk_depths`): its budget per unit is large. A longer chain searched unit by unit (Megatron-1.2B's 42
#: units) finds slower plans that way than with free walks (docs/measurements/README.md).
DEPTH_WALK_UNITS = 24
#: Where no plan of the coarse chain fits, the search runs again from these multiples of the groups
#: (4x as well finds no faster plan on the reach case, ResNet-50 b1440 at auto units, and costs far more time).
REACH_GROUPS = (2,)
#: A chain of more units than coarse groups but at most this many (Megatron-1.2B's 42; not ResNet-200's 68,
#: whose coarse search its walks would starve) ends its search in `UNIT_WALKS` annealing walks unit by unit,
#: from the refined plan, each from the best found so far, sharing `UNIT_WALK_WORK` units simulated; its
#: coarse search gets `UNIT_WALK_COARSE` of its budget. A coarse group of Megatron-1.2B is two identical
#: layers, and its best plans place swaps, kept runs and recompute layer by layer, which the coarse search
#: alone cannot; the walks, and relinking their ends, find faster plans there and on the reach case
#: (ResNet-50 at batch 1440, auto units: 61; `python -m karma.experiments.planner_gap`,
#: docs/measurements/README.md).
UNIT_WALK_UNITS = 64
UNIT_WALKS = 3
UNIT_WALK_WORK = 300_000
UNIT_WALK_COARSE = 0.2
#: Units simulated on the paths between the plans the unit walks end in (karma/planner/relink.py).
RELINK_WORK = 90_000


def coarse_search(profile: Profile, hw: Hardware, capacity: float, space: Space, budget: int,
                  starts: int = 3, seed: int = 0, by_depth: bool = False) -> tuple[State, Search]:
    """Best state on `profile` (one group per unit): descend from the `starts` best seeds
    (distinct block sequences), then anneal from the best until `budget` plans; `by_depth`: walks
    that keep to one prefetch depth each (`walk_depths`)."""
    search = Search(profile, hw, capacity, space)
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
        if len(tried) >= starts:
            break
    start, found = len(search.cache), best
    depths = walk_depths(search, space) if by_depth else []
    for walk in range(WALKS):  # several shorter walks from the best descent, each its own seed
        walker, origin = search, best
        if walk < len(depths):  # the same memo, moves at one depth, from the fastest plan there
            walker = replace(search, space=replace(space, depths=(depths[walk],)))
            origin = min((s for s in search.cache if s[1] == depths[walk]), key=search.cost)
        state = walker.anneal(origin, start + (budget - start) * (walk + 1) // WALKS, seed * WALKS + walk)
        if search.cost(state) < search.cost(found):
            found = state
    return found, search


def walk_depths(search: Search, space: Space) -> list[int]:
    """Depths for the walks on a chain searched unit by unit: the overlapping depths but the seeds' own
    (`Space.first_depth`, which the descents explore), the deepest `WALKS` of them, each only where a
    plan of it fits already (at the reach deep prefetches fit nowhere: the walks stay free there);
    shallowest first (walk k gets the annealing seed k, and so a reproducible plan per planner seed).
    A depth is a family of plans (it changes which blocks fit), and a walk free to change it settles
    in the family it starts in (WRN-28-10: often at depth 4, where walks at fixed depths find its faster
    depth-2 plan; docs/measurements/README.md). A coarsened or longer chain keeps free walks
    (`DEPTH_WALK_UNITS`): there walks at fixed depths find slower plans."""
    fitting = {s[1] for s, cost in search.cache.items() if cost < INFEASIBLE}
    others = sorted(d for d in space.depths if d and d != space.first_depth and d in fitting)
    return others[-WALKS:]


def unit_walks(search: Search, state: State, budget: int, seed: int, relinking: int = 0) -> State:
    """`UNIT_WALKS` annealing walks over the whole unit-level neighbourhood (`search`'s memo, without its
    bound on split points or its first-improvement descent), each from the fastest plan found so far,
    sharing `budget` plans simulated; then `relinking` more plans simulated on the paths between the
    plans the walks end in (karma/planner/relink.py)."""
    walker = replace(search, near=None, first=False)
    ends = []
    for walk in range(UNIT_WALKS):
        found = walker.anneal(state, len(walker.cache) + budget // UNIT_WALKS, seed * UNIT_WALKS + walk)
        ends.append(found)
        if walker.cost(found) < walker.cost(state):
            state = found
    if not relinking:
        return state
    found = relink_ends(walker, ends, len(walker.cache) + relinking)
    return found if walker.cost(found) < walker.cost(state) else state


def plan(profile: Profile, hw: Hardware, capacity: float, space: Space | None = None, groups: int = 24,
         work: float = 1.0, seed: int = 0) -> Plan:
    """KARMA's plan for `profile` on `hw` under `capacity` bytes (see the module docstring);
    `work` scales the search budgets (10: a long search, for comparison), `seed` the annealing walk.
    Where no plan of the coarse chain fits (beyond the reach of merged groups: a group's backward alone
    exceeds the capacity), the search runs again from REACH_GROUPS times the groups and the fastest plan
    found wins: which coarse cut refines into the best plan there is not monotone in the groups (ResNet-50
    at batch 1440, auto units, v100-abci; docs/measurements/README.md)."""
    space = space or Space()
    n = len(profile.units)
    # a layer chain's coarse groups are whole residual blocks (up to twice `groups` of them: ResNet-50's 37
    # at layer units are its 16 blocks, their last ReLUs and the stem's layers), whose plans are far faster
    # than those of time-balanced groups cut inside blocks; a block chain (every boundary one tensor) is cut
    # into `groups` time-balanced groups
    clean = clean_cuts(profile)
    count = groups if len(clean) == n else max(groups, min(len(clean), 2 * groups))
    searched = [_search(profile, hw, capacity, space, block_groups(profile, count), work, seed)]
    if not searched[0].coarse_fits:
        for factor in REACH_GROUPS:
            cuts = balanced_groups(profile, min(factor * groups, n))
            if len(cuts) > len(searched[-1].coarse_cuts):
                searched.append(_search(profile, hw, capacity, space, cuts, work, seed))
    fitting = [s for s in searched if s.fits]
    if not fitting:
        frugal = min(s.frugal for s in searched)
        raise KarmaError(f"no plan fits in {capacity / 1e9:.3f} GB; the most frugal plan found needs "
                         f"{frugal / 1e9:.3f} GB")
    best = min(fitting, key=lambda s: s.time)
    return replace(best.plan, notes={"groups": n, "coarse_groups": len(best.coarse_cuts),
                                     "evaluations": best.evaluations,
                                     "coarse_tried": [len(s.coarse_cuts) for s in searched]})


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
            work: float, seed: int) -> _Searched:
    """Coarse search over the groups `cuts`, refined to units and polished (the module docstring)."""
    groups, n = len(cuts), len(profile.units)
    walked = groups < n <= UNIT_WALK_UNITS
    # a chain much longer than the groups spends more on its refinement levels and its polish
    coarse_work = COARSE_WORK * min(1.0, 4 * groups / n) * (UNIT_WALK_COARSE if walked else 1.0)
    state, search = coarse_search(coarsen(profile, cuts), hw, capacity, space,
                                  budget=int(work * min(coarse_work / len(cuts), COARSE_PLANS)), seed=seed,
                                  by_depth=len(cuts) == len(profile.units) <= DEPTH_WALK_UNITS)
    coarse, coarse_cuts = search, cuts
    coarse_fits = search.cost(state) < INFEASIBLE
    evaluations = [len(search.cache)]
    frugal = search.frugal()
    while len(cuts) < n:
        finer = halve(profile, cuts)
        state = refine_state(state, cuts, finer)
        cuts = finer
        search = Search(coarsen(profile, cuts), hw, capacity, space, near=2, first=True)
        budget = int(work * FINE_WORK / n)
        state = search.descend(state, budget)
        evaluations.append(len(search.cache))
        frugal = min(frugal, search.frugal())
    if walked:
        state = unit_walks(search, state, int(work * UNIT_WALK_WORK / n), seed, int(work * RELINK_WORK / n))
    # a walked plan that fits is final: the walks search the unit-level neighbourhood the polish descends
    # in, and neither the polish (its exact seeds, the frugal state) nor the growth finds anything faster
    # there (Megatron-1.2B, the reach case at auto units: the same plans in less time)
    if len(search.profile.units) == n and not (walked and search.cost(state) < INFEASIBLE):
        more = ([] if walked else retiled(search, coarse, coarse_cuts)) + [frugal_state(n, space)]
        state = polish(state, search, profile, capacity, space, budget=int(work * SEED_WORK / n), more=more)
        starts, longest = retile_limits(n)
        state = grow_swaps(search, state, {}, longest) if starts else state
        frugal = min(frugal, search.frugal())
    best = to_plan(profile, cuts, state)
    result = simulate(profile, best, hw, capacity, record=False)
    fits = result.feasible and search.cost(state) < INFEASIBLE
    return _Searched(best if fits else None, result.time if fits else float("inf"),
                     min(frugal, result.peak_bytes), coarse_cuts, coarse_fits, evaluations)

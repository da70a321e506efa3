"""PlannerConfig: every setting of KARMA's planner in one object (karma/planner/planner.py).

Work is counted in units simulated, not plans or seconds, so that a step costs the same at every
level of the search and on every machine, and a plan is reproducible from its config. A plan records
the config that made it (`Plan.notes['planner']`). A longer search is a config (`PlannerConfig.longer`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class PlannerConfig:
    """Settings of KARMA's planner; the defaults are the suite's (docs/planner.md)."""

    #: Coarse groups the search starts from: runs of about equal compute (a layer chain: whole residual
    #: blocks, up to twice as many); a chain of at most this many units is searched unit by unit.
    groups: int = 24
    #: Where no plan of the coarse groups fits, the search runs again from these multiples of them.
    reach_groups: tuple[int, ...] = (2,)
    #: Units simulated by the coarse search (its share shrinks on a chain much longer than the groups).
    coarse_work: int = 300_000
    #: At most this many plans in the coarse search.
    coarse_plans: int = 20_000
    #: Seeds the coarse search descends from before it anneals (distinct block sequences).
    coarse_starts: int = 3
    #: Annealing walks of the coarse search, each its own random seed, sharing its budget.
    walks: int = 3
    #: Annealing temperature at a walk's start and end, as a fraction of the current time: hot enough
    #: to cross the 1-2% ridges between plan families, cold enough to settle.
    hot: float = 0.02
    cold: float = 0.0002
    #: Share of annealing moves that change the blocks, the prefetch depth and the layout at once.
    jump: float = 0.1
    #: Faster-but-over-capacity neighbours a descent tries to repair with a second move (an ejection chain).
    repairs: int = 2
    #: Units simulated per refinement level (groups halved until one group is one unit).
    fine_work: int = 50_000
    #: Annealing walks over the whole unit-level neighbourhood after the refinement, sharing
    #: `unit_walk_work` units simulated, then `relink_work` on the paths between their ends.
    unit_walks: int = 3
    unit_walk_work: int = 300_000
    relink_work: int = 90_000
    #: Units simulated by the polish's descents, from at most `polish_starts` starts.
    seed_work: int = 50_000
    polish_starts: int = 3
    #: Budget steps of the exact recompute-only seeds and of each re-tiling (each a dynamic program).
    seed_tries: int = 4
    #: The most runs of units the recompute program (karma/planner/recompute_dp.py) works over: a longer chain
    #: is merged into that many runs of about equal compute for it, and not re-tiled.
    dp_runs: int = 384
    #: Swap sets re-tiled exactly per search (the coarse and the unit-level one), and the longest recompute
    #: segment a re-tiling considers.
    retile_starts: int = 1
    retile_segment: int = 10
    #: Lengths the kept runs of a re-tiled plan are also cut into (the prefetch depth counts blocks,
    #: so where kept blocks end decides when the copies back of earlier blocks start).
    kept_lengths: tuple[int, ...] = (16, 32, 48)
    #: Swap growth: kept runs whose heads are swapped, re-tilings there at most, single recomputed units.
    grow_runs: int = 2
    grow_tries: int = 6
    grow_singles: int = 4
    #: Random seed of the annealing walks.
    seed: int = 0

    def longer(self, factor: float) -> PlannerConfig:
        """The same search with every work budget times `factor` (a reference for the default's quality)."""
        work = ("coarse_work", "coarse_plans", "fine_work", "unit_walk_work", "relink_work", "seed_work")
        return replace(self, **{name: int(getattr(self, name) * factor) for name in work})

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

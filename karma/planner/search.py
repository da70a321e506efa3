"""Local search over the plan space (karma/plan/space.py), judged by the simulator.

Moves on (blocks, depth, layout), all of them plans of the same space:

* change one block's kind;
* split a block in two, the right part of any kind (this also relabels a
  block's suffix, and cuts a recompute block into two segments), or into
  one block per group (one-group recompute segments: at one group per unit
  the checkpoint of every unit, which coarse groups cannot express);
* merge two adjacent blocks into one of either kind;
* shift the cut between two adjacent blocks by one or two groups, or halfway
  into either block;
* change the prefetch depth or the weight layout, alone or together with a
  kind change (a layout that frees memory makes room for a faster kind).

`near` bounds the split points to that many groups around existing cuts, so
that on a long chain (ResNet-1001 at one group per unit) a step costs a few
hundred simulations instead of thousands: the coarse search has placed the
blocks, the fine one moves their edges.

Infeasible plans are ranked by how far over capacity they are, so that the
search walks towards feasibility.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field

import numpy as np

from karma.core.hardware import Hardware
from karma.plan.space import LAYOUTS, Space, State
from karma.planner.config import PlannerConfig
from karma.planner.walk import LETTERS, walk
from karma.profile.profile import Profile
from karma.sim.compiled import KIND_CODES, block_arrays, blocks_cost, constants

INFEASIBLE = 1e9


@dataclass
class Tally:
    """States the compiled annealing walks of one search simulated outside its memo, and their least peak."""

    simulated: int = 0
    frugal: float = float("inf")


@dataclass
class Search:
    """Memoised evaluation of states on `profile`, whose units are the groups."""

    profile: Profile
    hw: Hardware
    capacity: float
    space: Space
    near: int | None = None
    cache: dict[State, float] = field(default_factory=dict)
    spans: dict[State, float] = field(default_factory=dict)
    peaks: dict[State, float] = field(default_factory=dict)
    config: PlannerConfig = field(default_factory=PlannerConfig)
    combos: bool = False
    first: bool = False
    #: what the compiled walks simulated, shared by the copies of this search (`dataclasses.replace`)
    tally: Tally = field(default_factory=Tally)

    def __post_init__(self):
        self._constants: dict[tuple[int, str], tuple] = {}  # karma.sim.compiled.constants per (depth, layout)
        self.overlapping = [d for d in self.space.depths if d] or list(self.space.depths)

    def cost(self, state: State) -> float:
        """Seconds if the plan fits; otherwise 1e9 + GB over capacity. One memo lookup per call: hashing a
        state hashes its block tuple, thousands of blocks on a layer chain, and tuples do not keep their hash."""
        cost = self.cache.get(state)
        if cost is None:
            blocks, depth, layout = state
            span, peak, fits = blocks_cost(self._fixed(depth, layout), blocks)
            self.spans[state] = span
            self.peaks[state] = peak
            cost = self.cache[state] = span if fits else INFEASIBLE + (peak - self.capacity) / 1e9
        return cost

    def _fixed(self, depth: int, layout: str) -> tuple:
        """The kernel's constants of a plan at `depth` and `layout` (karma.sim.compiled.constants), built once."""
        fixed = self._constants.get((depth, layout))
        if fixed is None:
            weights, optimizer = LAYOUTS[layout]
            fixed = self._constants[depth, layout] = constants(self.profile, self.hw, self.capacity,
                                                               weights == "streamed", optimizer == "host", depth)
        return fixed

    @property
    def spent(self) -> int:
        """States simulated so far: this memo's and the compiled walks' (what the budgets count)."""
        return len(self.cache) + self.tally.simulated

    def frugal(self) -> float:
        """The smallest peak of any plan simulated (what the error for no fit names)."""
        return min(min(self.peaks.values(), default=float("inf")), self.tally.frugal)

    def _split_points(self, blocks) -> range | set[int]:
        n = len(self.profile.units)
        if self.near is None:
            return range(1, n)  # every point (a range answers `in` without building a set per move)
        points = set()
        for a, _, _ in blocks:
            points.update(range(max(1, a - self.near), min(n, a + self.near + 1)))
        return points

    def block_moves(self, blocks):
        """Every block sequence one move away (kind change, split, merge, shift); `MoveSet` counts the
        same moves in the same order and builds one by its index."""
        kinds = self.space.kinds
        for kind in kinds:  # every block of one kind at once
            atoms = tuple(piece for a, b, k in blocks
                          for piece in ([(g, g + 1, k) for g in range(a, b)] if k == kind else [(a, b, k)]))
            if atoms != blocks:
                yield atoms
        for i in range(len(blocks) - 1):
            (a, m, k1), (_, b, k2) = blocks[i], blocks[i + 1]
            for d in _shifts(a, m, b):
                yield blocks[:i] + ((a, m + d, k1), (m + d, b, k2)) + blocks[i + 2:]
        for i, (a, b, k) in enumerate(blocks):
            for other in kinds:
                if other != k:
                    yield blocks[:i] + ((a, b, other),) + blocks[i + 1:]
        for i, (a, b, k) in enumerate(blocks):
            if b - a > 2:  # one group per block: recompute segments of one group, swaps copied sooner
                yield blocks[:i] + tuple((g, g + 1, k) for g in range(a, b)) + blocks[i + 1:]
        points = self._split_points(blocks)
        for i, (a, b, k) in enumerate(blocks):
            for p in range(a + 1, b):
                if p in points:
                    for other in kinds:
                        yield blocks[:i] + ((a, p, k), (p, b, other)) + blocks[i + 1:]
        for i in range(len(blocks) - 1):
            (a, m, k1), (_, b, k2) = blocks[i], blocks[i + 1]
            for kind in dict.fromkeys((k1, k2)):  # in order: a set's order changes between runs
                yield blocks[:i] + ((a, b, kind),) + blocks[i + 2:]

    def neighbours(self, state: State, moves: list | None = None):
        """Every state one move away; `moves`: the block moves of `state`'s blocks, if known."""
        blocks, depth, layout = state
        moves = self.block_moves(blocks) if moves is None else moves  # lazily: a scan may stop at the first
        others = [(d, w) for d in self.space.depths for w in self.space.layouts if (d, w) != (depth, layout)]
        yield from ((new, depth, layout) for new in moves)
        yield from ((blocks, d, w) for d, w in others)
        for i, (a, b, k) in enumerate(blocks if self.combos else ()):
            for other in self.space.kinds:
                if other != k:
                    new = blocks[:i] + ((a, b, other),) + blocks[i + 1:]
                    yield from ((new, d, w) for d, w in others)

    def repair(self, best: State, moves: list[State]) -> State | None:
        """An ejection chain: the neighbours that would be faster but do not fit, each
        followed by its best second move; the best of those that fit and are faster."""
        cost = self.cost(best)
        if cost >= INFEASIBLE:  # every neighbour over the capacity would count as "faster": the descent
            return None         # itself walks towards a fit (by how far over)
        over = sorted((m for m in moves if self.cache[m] >= INFEASIBLE and self.spans[m] < cost - 1e-12),
                      key=self.spans.__getitem__)
        found = None
        for first in over[: self.config.repairs]:
            second = min(self.neighbours(first), key=self.cost, default=None)
            if second is not None and self.cost(second) < min(cost, self.cost(found) if found else cost) - 1e-12:
                found = second
        return found

    def _repair_key(self, state: State) -> tuple[bool, float]:
        """Fitting before not, then by time (a plan that fits) or by how far over (one that does not)."""
        cost = self.cost(state)
        return cost >= INFEASIBLE, cost

    def descend(self, state: State, budget: int | None = None) -> State:
        """Steepest descent: move to the best neighbour while it is faster, else to the best
        repaired one (`repair`), until none is (or `budget` states have been simulated).
        With `first`, move to the first faster neighbour (cheap moves come first): on a
        long chain a full neighbourhood is hundreds of slow simulations."""
        best = state
        while budget is None or self.spent < budget:
            if self.first and self.cost(best) >= INFEASIBLE:
                # over the capacity (a refined plan the coarser chain under-counted): the fastest neighbour
                # that fits, else the least over; the first one less over can walk far from the plan. The
                # budget bounds the scan (a full neighbourhood of a layer chain is hundreds of simulations)
                move = min(self._within(self.neighbours(best), budget), key=self._repair_key, default=None)
                if move is None or self.cost(move) >= self.cost(best) - 1e-12:
                    break
                best = move
                continue
            if self.first:  # the budget also bounds the scan of one neighbourhood
                current = self.cost(best)
                move = next((m for m in self._within(self.neighbours(best), budget)
                             if self.cost(m) < current - 1e-12), None)
                if move is None:
                    break
                best = move
                continue
            # the budget also bounds the scan (a long chain's neighbourhood with combined moves is thousands)
            moves = []
            for m in self.neighbours(best):
                if budget is not None and m not in self.cache and self.spent >= budget:
                    break
                self.cost(m)
                moves.append(m)
            move = min(moves, key=self.cost, default=None)
            if move is None or self.cost(move) >= self.cost(best) - 1e-12:
                move = self.repair(best, moves) if self.config.repairs else None
                if move is None:
                    break
            best = move
        return best

    def _within(self, moves, budget: int | None):
        """`moves` until `budget` states are in the memo (then none: listing the rest of a long chain's
        neighbourhood, thousands of new tuples, cost more than the search itself)."""
        return moves if budget is None else itertools.takewhile(lambda _: self.spent < budget, moves)

    def anneal(self, best: State, budget: int, seed: int = 0) -> State:
        """Simulated annealing from `best`: a random neighbour, taken if it fits and is not
        slower, or slower by a fraction x of the current time with probability exp(-x / t),
        the temperature t falling geometrically from the config's `hot` to `cold` as the budget is spent
        (19/20 of `budget` states simulated, or three times as many moves); then steepest
        descent from the fastest state seen until `budget`. A walk crosses the ridges
        between plan families that a descent from a few kicked states rarely does. One
        move in the config's `jump` is a block move together with a random depth and layout: another
        prefetch depth makes a different set of blocks fit, and neither move alone may
        fit (WRN-28-10: depth 2 with a swap early, 1.6% faster than the best depth-4 plan).
        The walk itself is compiled (karma/planner/walk.py), with its own memo; the states it simulates
        count towards the budget (`spent`), its fastest state joins this memo."""
        space = self.space
        if self.combos or best[1] not in space.depths or best[2] not in space.layouts:
            raise ValueError("an annealing walk moves blocks, depth and layout one at a time, within its space")
        start = self.spent
        total = max(budget - start, 1)
        combos = [(d, w) for d in space.depths for w in space.layouts]
        fixed = [self._fixed(d, w) for d, w in combos]
        c = fixed[0][0]
        bounds, codes = block_arrays(best[0])
        overlapping = np.array([space.depths.index(d) for d in self.overlapping], dtype=np.int64)
        found_b, found_c, combo, simulated, frugal = walk(
            c.units, c.weight_prefix, c.size, c.index, np.stack([f[1] for f in fixed]),
            np.stack([f[2] for f in fixed]), len(space.layouts),
            np.array([KIND_CODES[k] for k in space.kinds], dtype=np.int64), overlapping,
            -1 if self.near is None else self.near, bounds, codes, combos.index(best[1:]), total,
            self.config.hot, self.config.cold, self.config.jump, seed)
        self.tally.simulated += simulated
        self.tally.frugal = min(self.tally.frugal, frugal)
        found = (tuple((int(found_b[i]), int(found_b[i + 1]), LETTERS[int(found_c[i])]) for i in range(len(found_c))),
                 *combos[combo])
        return self.descend(found if self.cost(found) < self.cost(best) else best, budget)


def _shifts(a: int, m: int, b: int) -> tuple[int, ...]:
    """Moves of the cut m between blocks [a, m) and [m, b): one or two groups, or halfway into either
    block (cuts travel far on a long chain)."""
    return _relative_shifts(m - a, b - m)


@functools.cache
def _relative_shifts(left: int, right: int) -> tuple[int, ...]:
    """`_shifts` of a cut with `left` groups before it and `right` after (they depend on nothing else)."""
    return tuple(d for d in sorted({-2, -1, 1, 2, -left // 2, right // 2}) if -left < d < right)

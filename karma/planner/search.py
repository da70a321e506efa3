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
import math
import random
from dataclasses import dataclass, field

from karma.core.hardware import Hardware
from karma.plan.space import LAYOUTS, Space, State
from karma.planner.config import PlannerConfig
from karma.profile.profile import Profile
from karma.sim.compiled import blocks_cost, constants

INFEASIBLE = 1e9


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

    def __post_init__(self):
        self._constants: dict[tuple[int, str], tuple] = {}  # karma.sim.compiled.constants per (depth, layout)
        self.overlapping = [d for d in self.space.depths if d] or list(self.space.depths)

    def cost(self, state: State) -> float:
        """Seconds if the plan fits; otherwise 1e9 + GB over capacity. One memo lookup per call: hashing a
        state hashes its block tuple, thousands of blocks on a layer chain, and tuples do not keep their hash."""
        cost = self.cache.get(state)
        if cost is None:
            blocks, depth, layout = state
            fixed = self._constants.get((depth, layout))
            if fixed is None:
                weights, optimizer = LAYOUTS[layout]
                fixed = self._constants[depth, layout] = constants(self.profile, self.hw, self.capacity,
                                                                   weights == "streamed", optimizer == "host", depth)
            span, peak, fits = blocks_cost(fixed, blocks)
            self.spans[state] = span
            self.peaks[state] = peak
            cost = self.cache[state] = span if fits else INFEASIBLE + (peak - self.capacity) / 1e9
        return cost

    def frugal(self) -> float:
        """The smallest peak of any plan simulated (what the error for no fit names)."""
        return min(self.peaks.values(), default=float("inf"))

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

    def _neighbour(self, state: State, blocks: MoveSet, others: list, index: int) -> State:
        """Neighbour `index` of `state` in `neighbours`' order (`blocks`: its MoveSet, `others`: the other
        depths and layouts)."""
        if index < len(blocks):
            return blocks[index], state[1], state[2]
        index -= len(blocks)
        if index < len(others):
            return (state[0], *others[index])
        index -= len(others)
        per_block = (len(self.space.kinds) - 1) * len(others)
        i, rest = divmod(index, per_block)
        a, b, k = state[0][i]
        kind = [other for other in self.space.kinds if other != k][rest // len(others)]
        return (state[0][:i] + ((a, b, kind),) + state[0][i + 1:], *others[rest % len(others)])

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
        while budget is None or len(self.cache) < budget:
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
                if budget is not None and m not in self.cache and len(self.cache) >= budget:
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
        return moves if budget is None else itertools.takewhile(lambda _: len(self.cache) < budget, moves)

    def anneal(self, best: State, budget: int, seed: int = 0) -> State:
        """Simulated annealing from `best`: a random neighbour, taken if it fits and is not
        slower, or slower by a fraction x of the current time with probability exp(-x / t),
        the temperature t falling geometrically from the config's `hot` to `cold` as the budget is spent
        (19/20 of `budget` states simulated, or three times as many moves); then steepest
        descent from the fastest state seen until `budget`. A walk crosses the ridges
        between plan families that a descent from a few kicked states rarely does. One
        move in the config's `jump` is a block move together with a random depth and layout: another
        prefetch depth makes a different set of blocks fit, and neither move alone may
        fit (WRN-28-10: depth 2 with a swap early, 1.6% faster than the best depth-4 plan)."""
        rng = random.Random(seed)
        hot, cold = self.config.hot, self.config.cold
        start = len(self.cache)
        total = max(budget - start, 1)
        current, cost = best, self.cost(best)
        moves, blocks, others, tries = None, None, [], 0
        walk = start + total * 19 // 20  # the last steps: a descent from the best
        while len(self.cache) < walk and tries < 3 * total:
            tries += 1
            if moves is None:  # a random neighbour of `neighbours`, without listing them all
                blocks = MoveSet(current[0], self.space.kinds, self._split_points(current[0]))
                others = [(d, w) for d in self.space.depths for w in self.space.layouts
                          if (d, w) != current[1:]]
                combos = len(current[0]) * (len(self.space.kinds) - 1) * len(others) if self.combos else 0
                moves = len(blocks) + len(others) + combos
                if not moves:
                    break
            if len(blocks) and rng.random() < self.config.jump:
                # jumps keep to overlapping depths (depth 0, on demand, is for reach: the descents try it)
                move = (blocks[rng.randrange(len(blocks))], rng.choice(self.overlapping),
                        rng.choice(self.space.layouts))
            else:
                move = self._neighbour(current, blocks, others, rng.randrange(moves))
            new = self.cost(move)
            spent = max((len(self.cache) - start) / total, tries / (3 * total))
            heat = hot * (cold / hot) ** min(spent, 1.0)
            # (a plan of zero time, all units' times zero, takes no slower move)
            if new <= cost or (new < INFEASIBLE and cost > 0
                               and rng.random() < math.exp(-(new - cost) / (cost * heat))):
                if move != current:
                    moves = None
                current, cost = move, new
                if new < self.cost(best) - 1e-12:
                    best = move
        return self.descend(best, budget)


def _shifts(a: int, m: int, b: int) -> tuple[int, ...]:
    """Moves of the cut m between blocks [a, m) and [m, b): one or two groups, or halfway into either
    block (cuts travel far on a long chain)."""
    return _relative_shifts(m - a, b - m)


@functools.cache
def _relative_shifts(left: int, right: int) -> tuple[int, ...]:
    """`_shifts` of a cut with `left` groups before it and `right` after (they depend on nothing else)."""
    return tuple(d for d in sorted({-2, -1, 1, 2, -left // 2, right // 2}) if -left < d < right)


class MoveSet:
    """The block moves `Search.block_moves` yields for `blocks`, in its order, counted in time linear in
    the chain and built one at a time by index: an annealing walk draws one random move per step, and
    listing every move of a long chain's plan (thousands, each a new tuple) cost more than simulating it."""

    def __init__(self, blocks, kinds: tuple[str, ...], points: range | set[int]):
        self.blocks, self.kinds, self.points = blocks, kinds, points
        multi = {k for a, b, k in blocks if b - a > 1}
        self.atoms = [kind for kind in kinds if kind in multi]
        # the families' sizes now, their moves listed when a draw first falls in them: a walk rebuilds the set
        # after every accepted move and draws from it a few times
        shifts = singles = splits = merges = 0
        span = isinstance(points, range)  # a range of points (step 1): count the overlap, not each point
        for i, (a, b, k) in enumerate(blocks):
            singles += b - a > 2
            splits += (len(range(max(a + 1, points.start), min(b, points.stop))) if span
                       else sum(p in points for p in range(a + 1, b)))
            if i + 1 < len(blocks):
                shifts += len(_relative_shifts(b - a, blocks[i + 1][1] - b))
                merges += 1 if k == blocks[i + 1][2] else 2
        self._lists: dict[int, list] = {}
        self.sizes = [len(self.atoms), shifts, len(blocks) * (len(kinds) - 1), singles, splits * len(kinds), merges]

    def _family(self, family: int) -> list:
        """The moves of one family (1 shifts, 3 singles, 4 splits, 5 merges), in `Search.block_moves`' order."""
        found = self._lists.get(family)
        if found is None:
            blocks = self.blocks
            if family == 1:
                found = [(i, d) for i in range(len(blocks) - 1)
                         for d in _shifts(blocks[i][0], blocks[i][1], blocks[i + 1][1])]
            elif family == 3:
                found = [i for i, (a, b, _) in enumerate(blocks) if b - a > 2]
            elif family == 4:
                found = [(i, p) for i, (a, b, _) in enumerate(blocks) for p in range(a + 1, b) if p in self.points]
            else:
                found = [(i, kind) for i in range(len(blocks) - 1)
                         for kind in dict.fromkeys((blocks[i][2], blocks[i + 1][2]))]
            self._lists[family] = found
        return found

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, index: int):
        blocks, kinds = self.blocks, self.kinds
        family = 0
        while index >= self.sizes[family]:
            index -= self.sizes[family]
            family += 1
        if family == 0:
            kind = self.atoms[index]
            return tuple(piece for a, b, k in blocks
                         for piece in ([(g, g + 1, k) for g in range(a, b)] if k == kind else [(a, b, k)]))
        if family == 1:
            i, d = self._family(1)[index]
            (a, m, k1), (_, b, k2) = blocks[i], blocks[i + 1]
            return blocks[:i] + ((a, m + d, k1), (m + d, b, k2)) + blocks[i + 2:]
        if family == 2:
            i, rest = divmod(index, len(kinds) - 1)
            a, b, k = blocks[i]
            return blocks[:i] + ((a, b, [other for other in kinds if other != k][rest]),) + blocks[i + 1:]
        if family == 3:
            i = self._family(3)[index]
            a, b, k = blocks[i]
            return blocks[:i] + tuple((g, g + 1, k) for g in range(a, b)) + blocks[i + 1:]
        if family == 4:
            (i, p), other = self._family(4)[index // len(kinds)], kinds[index % len(kinds)]
            a, b, k = blocks[i]
            return blocks[:i] + ((a, p, k), (p, b, other)) + blocks[i + 1:]
        i, kind = self._family(5)[index]
        return blocks[:i] + ((blocks[i][0], blocks[i + 1][1], kind),) + blocks[i + 2:]

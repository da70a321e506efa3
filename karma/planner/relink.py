"""Path relinking between the plans the planner's walks end in (Glover, Laguna & Marti 2000, "Fundamentals
of scatter search and path relinking", Control and Cybernetics 29(3)).

Each annealing walk ends in a local optimum of the unit-level neighbourhood; two of them usually share
much (depth, layout, most units' kinds) and differ in a few places. A path from one to the other,
adopting one difference at a time, the one whose plan the simulator finds fastest, crosses plans that
neither walk visits: combinations of the parts each got right. Megatron-1.2B's walks end a few percent
apart, and a plan on the path between two of them, descended from, is often faster than both
(docs/measurements/README.md): plans the walks themselves, moving one block edge or kind at a time, do
not reach.

A plan is relinked as a list of per-unit labels: its kind, and whether a block starts there (so that
two kept units, or two recompute units, in one block or in two are different labels), with the prefetch
depth and the weight layout as two labels more.
"""

from __future__ import annotations

from itertools import permutations

from karma.plan.space import State
from karma.planner.search import Search

Label = tuple  # (kind, a block starts here) per unit; ("depth", d) and ("layout", w) last


def labels(state: State, n: int) -> list[Label]:
    """`state` (on `n` units) as labels: (kind, block starts here) per unit, then depth and layout."""
    blocks, depth, layout = state
    out: list[Label] = [()] * n
    for a, b, kind in blocks:
        for i in range(a, b):
            out[i] = (kind, i == a)
    return out + [("depth", depth), ("layout", layout)]


def from_labels(labels_: list[Label]) -> State:
    """The state of `labels_` (see `labels`): a unit joins the block before unless one starts there or
    its kind differs."""
    blocks: list[tuple[int, int, str]] = []
    for i, (kind, starts) in enumerate(labels_[:-2]):
        if blocks and not starts and blocks[-1][2] == kind:
            blocks[-1] = (blocks[-1][0], i + 1, kind)
        else:
            blocks.append((i, i + 1, kind))
    return tuple(blocks), labels_[-2][1], labels_[-1][1]


def relink(search: Search, start: State, guide: State, budget: int) -> State:
    """The fastest plan on the greedy path from `start` to `guide` (both on `search`'s units): at each
    step the one remaining difference whose adoption is fastest (fits first, then by time; the lower
    index of equal ones), until one difference is left or `budget` plans are in the memo."""
    n = len(search.profile.units)
    here, there = labels(start, n), labels(guide, n)
    left = [i for i in range(len(here)) if here[i] != there[i]]
    best = start
    while len(left) > 1 and search.spent < budget:
        steps = []
        for i in left:
            step = list(here)
            step[i] = there[i]
            steps.append((search.cost(from_labels(step)), i, step))
        cost, i, here = min(steps, key=lambda s: s[:2])
        left.remove(i)
        if cost < search.cost(best) - 1e-12:
            best = from_labels(here)
    return best


def relink_ends(search: Search, ends: list[State], budget: int) -> State:
    """The fastest of `ends` and of the paths between every ordered pair of them (from the fastest end
    first), then a descent from it if a path found it, until `budget` plans are in the memo (three
    quarters of what is left for the paths)."""
    elite: list[State] = sorted(dict.fromkeys(ends), key=search.cost)
    best = elite[0]
    paths = search.spent + (budget - search.spent) * 3 // 4
    for start, guide in permutations(elite, 2):
        found = relink(search, start, guide, paths)
        if search.cost(found) < search.cost(best) - 1e-12:
            best = found
    return search.descend(best, budget) if best not in elite else best

"""Who is to blame where KARMA's plan is far above the lower bound: an exact check on windows of the chain.

plan / bound above target means that the planner missed a faster plan, or that the bound
(karma/sim/bound.py) is loose there, or both. A longer search of the same planner only tells whether
the search converged. This check is exhaustive instead, on a neighbourhood a reader can state: every
plan that agrees with KARMA's outside a window of `width` consecutive units (the same kind on every
unit outside it, the same block edges outside it; edges at the window's ends optional), at the plan's
prefetch depth and weight layout, for windows starting every `stride` units; and the plan's blocks at
every depth and layout. Each plan is simulated by the compiled simulator (karma/sim/compiled.py).

* A faster plan found: **the plan** is to blame, at least by that much, and the window says where.
* None found: the plan is optimal on every window, so what is left of the gap is **the bound**'s, or
  needs a change to more than `width` units at once, which no window of this width can tell apart.

Plans in a window: every tiling of its units into blocks (2^(width-1)) times a kind per block
(keep, swap, recompute with the checkpoint on the device or the host): 4 * 5^(width-1), 12,500 at
width 6.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from karma.core.hardware import Hardware
from karma.plan.plan import Plan
from karma.plan.space import KINDS, LAYOUTS, POLICY, Blocks, Space, State
from karma.profile.profile import Profile
from karma.sim.compiled import blocks_cost, constants

KIND_OF = {policy: kind for kind, policy in POLICY.items()}
LAYOUT_OF = {pair: name for name, pair in LAYOUTS.items()}


def to_state(plan: Plan) -> State:
    """`plan` as a unit-level state of the planner's space (karma/plan/space.py)."""
    blocks = tuple((b.start, b.stop, KIND_OF[b.policy, "device" if b.policy != "recompute" else b.checkpoint])
                   for b in plan.blocks)
    return blocks, plan.prefetch_depth, LAYOUT_OF[plan.weights, plan.optimizer]


def tilings(width: int, kinds: tuple[str, ...] = KINDS) -> list[Blocks]:
    """Every block sequence over units 0..width-1: each set of cuts, each kind per block."""
    out = []
    for cuts in itertools.product((False, True), repeat=width - 1):
        edges = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [width]
        spans = list(zip(edges, edges[1:], strict=False))
        for labels in itertools.product(kinds, repeat=len(spans)):
            out.append(tuple((a, b, k) for (a, b), k in zip(spans, labels, strict=True)))
    return out


def clip(blocks: Blocks, start: int, stop: int) -> list[tuple[int, int, str]]:
    """The blocks' parts inside units [start, stop), in order."""
    return [(max(a, start), min(b, stop), k) for a, b, k in blocks if a < stop and b > start]


def joined(left: list, middle: Blocks, right: list) -> list[Blocks]:
    """left + middle + right, and the same with the blocks at each seam merged where their kinds agree
    (so that a block of the plan crossing a window's end is among the candidates)."""
    out = []
    for merge_left in (False, True):
        if merge_left and not (left and left[-1][2] == middle[0][2]):
            continue
        for merge_right in (False, True):
            if merge_right and not (right and right[0][2] == middle[-1][2]):
                continue
            mid = list(middle)
            head, tail = list(left), list(right)
            if merge_left:
                mid[0] = (head.pop()[0], mid[0][1], mid[0][2])
            if merge_right:
                mid[-1] = (mid[-1][0], tail.pop(0)[1], mid[-1][2])
            out.append(tuple(head + mid + tail))
    return out


@dataclass(frozen=True)
class WindowCheck:
    """What the check found: the fastest plan of the neighbourhood and where it differs from KARMA's."""

    #: window width and stride, units
    width: int
    stride: int
    #: KARMA's plan and the fastest plan found, simulated seconds
    plan_s: float
    best_s: float
    #: units [start, stop) of the window the fastest plan was found in; None if it is KARMA's own plan
    #: or differs only in depth or layout
    window: tuple[int, int] | None
    best: State
    #: plans simulated
    simulated: int

    @property
    def plan_to_blame(self) -> bool:
        return self.best_s < self.plan_s * (1 - 1e-9)

    def verdict(self) -> str:
        """One phrase for a table's blame column."""
        if not self.plan_to_blame:
            return f"bound (plan optimal in every {self.width}-unit window)"
        where = f"units {self.window[0]}-{self.window[1] - 1}" if self.window else "depth or layout"
        return f"plan ({where}: {self.plan_s / self.best_s - 1:.1%} faster)"


def check(profile: Profile, hw: Hardware, capacity: float, plan: Plan, width: int = 6, stride: int | None = None,
          space: Space | None = None) -> WindowCheck:
    """The exhaustive check of the module docstring on `plan` (a plan of `profile`, unit by unit)."""
    space = space or Space()
    blocks, depth, layout = to_state(plan)
    n = len(profile.units)
    width = min(width, n)
    stride = stride or max(1, width // 2)
    # the compiled simulator's constants per (depth, layout), as karma.planner.search.Search.cost builds them;
    # not a Search: its memo would keep each of the millions of plans simulated here
    fixed: dict[tuple[int, str], tuple] = {}

    def cost(blocks: Blocks, depth: int, layout: str) -> float:
        key = depth, layout
        if key not in fixed:
            weights, optimizer = LAYOUTS[layout]
            fixed[key] = constants(profile, hw, capacity, weights == "streamed", optimizer == "host", depth)
        span, _, fits = blocks_cost(fixed[key], blocks)
        return span if fits else float("inf")

    plan_s = cost(blocks, depth, layout)
    best_s, best, window, simulated = plan_s, (blocks, depth, layout), None, 1
    for d, lay in itertools.product(space.depths, space.layouts):
        simulated += 1
        seconds = cost(blocks, d, lay)
        if seconds < best_s:
            best_s, best = seconds, (blocks, d, lay)
    shapes = tilings(width, space.kinds)
    starts = sorted(set(range(0, n - width + 1, stride)) | {n - width})
    for a in starts:
        left, right = clip(blocks, 0, a), clip(blocks, a + width, n)
        for shape in shapes:
            middle = tuple((a + s, a + t, k) for s, t, k in shape)
            for candidate in joined(left, middle, right):
                simulated += 1
                seconds = cost(candidate, depth, layout)
                if seconds < best_s:
                    best_s, best, window = seconds, (candidate, depth, layout), (a, a + width)
    return WindowCheck(width, stride, plan_s, best_s, window, best, simulated)

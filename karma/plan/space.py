"""The plan space KARMA's planner searches, over a chain of groups of units.

A state is (blocks, prefetch depth, weight layout). Blocks tile the groups
0..n-1 in order; each is (start, stop, kind) in group indices, kind one of

* ``K`` keep, ``S`` swap (a multi-group swap block copies its activations
  in one transfer after its last unit),
* ``R`` recompute with the checkpoint on the device, ``r`` with it on the host.

Layouts are the three weight layouts the Plan type has: ``resident`` (weights
and optimizer on the device), ``host-optimizer`` (ZeRO-Offload's: resident
weights, optimizer state and step on the host) and ``streamed``. So with
one group per unit every plan `karma.plan.plan.Plan` can express is a state.
Blocks are in group indices so that one search code serves every coarsening;
`to_plan` maps them to units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from karma.plan.plan import Block, Plan, unchecked
from karma.profile.profile import Profile

KINDS = ("K", "S", "R", "r")
POLICY = {"K": ("keep", "device"), "S": ("swap", "device"), "R": ("recompute", "device"),
          "r": ("recompute", "host")}
#: layout name -> (Plan.weights, Plan.optimizer)
LAYOUTS = {"resident": ("resident", "device"), "host-optimizer": ("resident", "host"),
           "streamed": ("streamed", "host")}

Blocks = tuple[tuple[int, int, str], ...]
State = tuple[Blocks, int, str]


@dataclass(frozen=True)
class Space:
    """Block kinds, prefetch depths and weight layouts the search may use (depth 0: on demand, the
    reach of chains whose single layers nearly fill the device, karma/plan/plan.py)."""

    kinds: tuple[str, ...] = KINDS
    depths: tuple[int, ...] = (0, 1, 2, 3, 4)

    @property
    def first_depth(self) -> int:
        """The depth seeds start from: the shallowest that still overlaps copies with compute."""
        return min((d for d in self.depths if d), default=min(self.depths))
    layouts: tuple[str, ...] = tuple(LAYOUTS)


def blocks_from_runs(runs: list[tuple[str, int]]) -> Blocks:
    """Blocks from (kind, length) runs, in order; empty runs are skipped."""
    out, at = [], 0
    for kind, length in runs:
        if length > 0:
            out.append((at, at + length, kind))
            at += length
    return tuple(out)


def to_plan(profile: Profile, groups: list[tuple[int, int]], state: State, strategy: str = "karma") -> Plan:
    """The Plan of `state` on the units of `profile`, group g being units groups[g]."""
    blocks, depth, layout = state
    weights, optimizer = LAYOUTS[layout]
    plan_blocks = tuple(Block(groups[a][0], groups[b - 1][1], *POLICY[kind]) for a, b, kind in blocks)
    return unchecked(model=profile.model, batch=profile.batch, units=len(profile.units), blocks=plan_blocks,
                     weights=weights, prefetch_depth=depth, optimizer=optimizer, strategy=strategy)


def refine_state(state: State, coarse: list[tuple[int, int]], fine: list[tuple[int, int]]) -> State:
    """The same plan in the indices of a finer grouping (every coarse cut is a fine cut)."""
    first = {start: g for g, (start, _) in enumerate(fine)}
    last = {stop: g + 1 for g, (_, stop) in enumerate(fine)}
    blocks, depth, layout = state
    return tuple((first[coarse[a][0]], last[coarse[b - 1][1]], k) for a, b, k in blocks), depth, layout


def seeds(n: int, space: Space, grid: int = 24) -> list[Blocks]:
    """Block sequences of the families KARMA's concurrency analysis suggests: early units
    hold their activations longest, so they are the ones to swap (while the link can hide
    the copy behind later compute) or to recompute (when it cannot); later ones are kept.
    Swap a prefix, recompute the next stretch (one segment or one-group segments), keep
    the rest; interleave swap and recompute over a prefix (every j-th group swapped, so
    that its copy hides behind the recomputed groups' compute); and the uniform plans.
    Prefix lengths are taken on a grid of at most `grid` + 1 points."""
    allowed = set(space.kinds)
    out: set[Blocks] = set()

    def add(runs):
        blocks = blocks_from_runs(runs)
        if {k for _, _, k in blocks} <= allowed:
            out.add(blocks)

    def recompute(kind, m, size):
        return [(kind, min(size, m - i)) for i in range(0, m, max(size, 1))]

    points = sorted({round(i * n / grid) for i in range(grid + 1)}) if n > grid else list(range(n + 1))
    step = max(1, math.isqrt(n))
    for kind in ("K", "S"):
        add([(kind, n)])
    for kind in ("R", "r"):
        add(recompute(kind, n, 1))
        add(recompute(kind, n, step))
    for k in points:
        for m in (p - k for p in points if p >= k):
            for size in {1, m}:
                add([("S", 1)] * k + recompute("R", m, size) + [("K", n - k - m)])
        for j in (2, 3, 4):
            add([("S" if i % j == 0 else "R", 1) for i in range(k)] + [("K", n - k)])
    return sorted(out)

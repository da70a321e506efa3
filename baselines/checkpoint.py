"""Gradient checkpointing under a memory budget (Chen, Xu, Zhang, Guestrin,
"Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174, 2016).

Rule (Sec. 4.3, Algorithm 3 "memory planning with budget"): walk the chain in
order adding each node's memory to a running total; when the total exceeds the
budget B at a node that may split the graph, that node's output becomes a
checkpoint and a new segment starts. Every segment's intermediate results are
dropped in the forward pass and recomputed from its checkpoint before its
backward, once (no recursion). The paper chooses B by a grid search (a first
pass gives x = checkpoint bytes and y = largest segment, and B = sqrt(x y) is
the centre of the search); we search a geometric grid of budgets from the
smallest unit to the whole chain plus sqrt(x y), simulate every resulting plan
and take the fastest one that fits the capacity.

The last segment: torch.utils.checkpoint.checkpoint_sequential (the
implementation of this rule practitioners use) runs the last segment without
checkpointing, since its backward comes right after its forward. We try both
(last segment kept, or recomputed like the others); which one fits decides.

Unit granularity: a node of Chen's graph is a unit (a residual block, a VGG
layer, a transformer layer), so every unit boundary is a split point and
segments are whole units; Chen's in-segment "mirror" of cheap operators
(Sec. 4.1: drop the results of cheap operators like BN and ReLU even in
checkpointed form) is inside a unit and does not exist here. A unit's memory
is its saved bytes. Weights stay resident; nothing goes to the host.
"""

from __future__ import annotations

import math

from baselines._choose import fastest, named
from karma.plan.plan import from_policies

#: budgets tried, geometrically spaced, besides sqrt(x y) (their grid search)
GRID = 48


def segments(sizes: list[float], budget: float) -> list[int]:
    """Algorithm 3: the units that start a segment (0 first) for budget B."""
    starts, temp = [0], 0.0
    for i, size in enumerate(sizes):
        temp += size
        if temp > budget and i + 1 < len(sizes):
            starts.append(i + 1)
            temp = 0.0
    return starts


def budgets(sizes: list[float]) -> list[float]:
    """Their sqrt(x y) heuristic plus a geometric grid from the smallest unit to the whole chain."""
    positive = [s for s in sizes if s > 0] or [1.0]
    first = segments(sizes, 0.0)
    x = sum(sizes[i - 1] for i in first[1:])
    y = max(sum(sizes[a:b]) for a, b in zip(first, [*first[1:], len(sizes)], strict=True))
    low, high = min(positive), sum(positive)
    grid = [low * (high / low) ** (k / (GRID - 1)) for k in range(GRID)] if high > low else [low]
    return sorted({0.0, math.sqrt(x * y), *grid})


def configurations(profile):
    sizes = [float(u.saved_bytes) for u in profile.units]
    n = len(sizes)
    seen = set()
    for budget in budgets(sizes):
        starts = segments(sizes, budget)
        for keep_last in (True, False):
            labels = ["recompute"] * n
            if keep_last:
                labels[starts[-1]:] = ["keep"] * (n - starts[-1])
            key = (tuple(starts), keep_last)
            if key in seen:
                continue
            seen.add(key)
            plan = from_policies(profile.model, profile.batch, labels, segments=starts, strategy="checkpoint")
            yield named(plan, "checkpoint", budget_bytes=budget, last_segment="kept" if keep_last else "recomputed")


def plan(profile, hw, capacity):
    return fastest(profile, hw, capacity, configurations(profile))

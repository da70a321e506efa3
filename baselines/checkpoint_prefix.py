"""The one-knob checkpointing rule a practitioner tries first: checkpoint the
first k layers, keep the rest, with the smallest k that fits. Megatron-LM ships
it as ``--recompute-method block --recompute-num-layers k`` (Korthikanti et
al., "Reducing Activation Recomputation in Large Transformer Models", 2022,
Sec. 5); the first layers are the ones whose activations wait longest for
their backward. Issue 12 sets it as the bar KARMA must never be slower than.

Configurations: the number k of checkpointed units; the segment length s (each
of the first k units its own segment, s = 1, as the rule is usually stated; or
consecutive runs of s units sharing one checkpoint, Megatron's ``uniform``
chunking, s = 2, 4, 8, 16: one checkpoint per s units, so fewer units recompute);
the weight layout, resident or, for models whose weights do not fit, streamed
(karma/plan/plan.py; prefetch one or two blocks ahead). Per (s, layout) the
smallest k that fits (found by bisection, then stepped down while k - 1 still
fits: the peak falls with k except at a few boundaries), then the fastest of
those. Taking the best over s makes the bar stronger, never weaker, than the
one-unit rule alone (``configurations(..., lengths=(1,))``).

Unit granularity: a layer is a unit; a segment keeps its input on the device and
is recomputed once before its backward.
"""

from __future__ import annotations

from baselines._choose import fastest, judge, named
from karma.plan.plan import from_policies

LAYOUTS = (("resident", 1), ("streamed", 1), ("streamed", 2))
LENGTHS = (1, 2, 4, 8, 16)
#: chains up to this many units are scanned for every k when the bisection's premise fails
SCAN_UNITS = 64


def prefix(profile, k: int, length: int = 1, weights: str = "resident", depth: int = 1):
    n = len(profile.units)
    labels = ["recompute"] * k + ["keep"] * (n - k)
    plan = from_policies(profile.model, profile.batch, labels, segments=list(range(0, n, length)), weights=weights,
                         prefetch_depth=depth, strategy="checkpoint-prefix")
    return named(plan, "checkpoint-prefix", k=k, segment_length=length, weights=weights)


def smallest_fitting(profile, hw, capacity, length: int, weights: str, depth: int):
    """The plan with the smallest k that fits, or the k = n one (this layout's most frugal) if none does."""
    def ok(k):
        return judge(profile, prefix(profile, k, length, weights, depth), hw, capacity).feasible

    n = len(profile.units)
    if ok(0):  # in-core fits: nothing to checkpoint
        return prefix(profile, 0, length, weights, depth)
    if not ok(n):
        # fitting need not grow with k (a recomputed unit's checkpoint can outweigh what it frees):
        # on short chains try every k, on long ones k = n stays the most frugal guess
        fits = next((k for k in range(1, n) if ok(k)), None) if n <= SCAN_UNITS else None
        return prefix(profile, n if fits is None else fits, length, weights, depth)
    low, high = -1, n  # ok(high); low is below every fitting k found so far
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            high = mid
        else:
            low = mid
    while high > 0 and ok(high - 1):
        high -= 1
    return prefix(profile, high, length, weights, depth)


def configurations(profile, hw, capacity, lengths=LENGTHS, layouts=LAYOUTS):
    for length in lengths:
        for weights, depth in layouts:
            yield smallest_fitting(profile, hw, capacity, length, weights, depth)


def plan(profile, hw, capacity):
    return fastest(profile, hw, capacity, configurations(profile, hw, capacity))

"""SuperNeurons (Wang, Ye, Zhao, Wu, Song, Xu, Li, Kraska, "SuperNeurons:
Dynamic GPU Memory Management for Training Deep Neural Networks", PPoPP'18).

Rule, by layer type, not by link speed:

* cost-aware recomputation (Sec. 3.4): the outputs of cheap layers (pooling,
  activation, batch norm, LRN) are dropped and recomputed; convolution and
  fully connected outputs are the checkpoints;
* the Unified Tensor Pool (Sec. 3.3) offloads convolution outputs to the host
  (they are expensive to recompute and their long compute hides the copy) and
  prefetches them one layer ahead in the backward;
* the tensor cache (Sec. 3.3, LRU) keeps tensors on the device as long as there
  is room; only what does not fit is actually offloaded. The most recently
  used tensors, the last layers', are the ones needed first in the backward.

Unit granularity forces a choice. A residual block mixes convolutions with
the cheap layers SuperNeurons would recompute, and a plan acts on a unit's
saved tensors as a whole. Two readings bracket the method, and we take the
faster that fits (the generous reading):

* ``swap``: an offloaded convolution-like unit (baselines/_layers.py) is a
  swap block: it moves the cheap layers' outputs too, which SuperNeurons would
  recompute (more bytes on the link than SuperNeurons);
* ``host-checkpoint``: it keeps only its input, offloaded to the host, and is
  recomputed before its backward (fewer bytes than SuperNeurons, but its
  convolutions are recomputed, which SuperNeurons never does).

Cheap units (baselines/_layers.py: no weights, or a batch norm of a layer
chain) are recomputed; other units that are not convolution-like (classifier
heads, embeddings) are checkpoints kept on the device. In the swap reading each
cheap unit is its own segment; in the host-checkpoint reading a segment runs
from after one convolution-like unit through the next, so that, in a layer
chain, a convolution's output is the offloaded checkpoint and the batch norm
and ReLU after it are what is recomputed, as SuperNeurons does (the
convolution closing the segment saves its input before its kernel runs, so the
recompute stops before it, karma/sim/boundary_memory.py). The tensor cache then keeps on
the device the offloaded units of the longest suffix of the chain that fits
(LRU: the last units' tensors are the most recently used), found by bisection.
Weights stay resident; copies overlap one unit's compute (prefetch depth 2,
as for vDNN: see baselines/vdnn.py). When nothing fits, the configuration with
every convolution-like unit offloaded is returned (the most frugal).
"""

from __future__ import annotations

from dataclasses import replace

from baselines._choose import fastest, fits, named
from baselines._layers import cheap, conv_like
from karma.plan.plan import from_policies

DEPTH = 2
READINGS = ("swap", "host-checkpoint")


def configuration(profile, reading: str, cached: int):
    """The plan of one reading with the offloaded units among the last `cached` units kept instead."""
    n = len(profile.units)
    labels = []
    for i, u in enumerate(profile.units):
        if cheap(u):
            labels.append("recompute")
        elif conv_like(u, profile.batch) and i < n - cached:
            labels.append("swap" if reading == "swap" else "recompute")
        else:
            labels.append("keep")
    if reading == "host-checkpoint":  # a segment: the cheap units after a checkpoint and the next conv-like unit
        starts = [i for i in range(n) if i == 0 or conv_like(profile.units[i - 1], profile.batch)]
        plan = from_policies(profile.model, profile.batch, labels, segments=starts, checkpoint="host",
                             prefetch_depth=DEPTH)
        # in the cached suffix nothing is offloaded: its cheap segments keep their checkpoint on the device
        plan = replace(plan, blocks=tuple(replace(b, checkpoint="device") if b.start >= n - cached else b
                                          for b in plan.blocks))
    else:
        plan = from_policies(profile.model, profile.batch, labels, segments=list(range(n)), prefetch_depth=DEPTH)
    return named(plan, "superneurons", reading=reading, cached_units=cached)


def cache(profile, hw, capacity, reading: str):
    """The reading with the tensor cache filled: the longest fitting suffix kept (bisection)."""
    n = len(profile.units)
    if not fits(profile, configuration(profile, reading, 0), hw, capacity):
        return configuration(profile, reading, 0)
    low, high = 0, n + 1  # fits(low); high does not (or is past the end)
    while high - low > 1:
        mid = (low + high) // 2
        if mid <= n and fits(profile, configuration(profile, reading, mid), hw, capacity):
            low = mid
        else:
            high = mid
    return configuration(profile, reading, low)


def plan(profile, hw, capacity):
    return fastest(profile, hw, capacity, [cache(profile, hw, capacity, r) for r in READINGS])

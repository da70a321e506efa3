"""ZeRO-Infinity (Rajbhandari, Ruwase, Rasley, Smith, He, "ZeRO-Infinity:
Breaking the GPU Memory Wall for Extreme Scale Deep Learning", SC'21), on one
device: weights streamed.

Rule (Sec. 5-6): parameters live on the host (CPU memory; NVMe is out of our
scope) and are fetched layer by layer before their forward and again before
their backward, with prefetch of the next layers overlapping compute
(Sec. 6.2, "overlap-centric design"); gradients are offloaded as they are
produced and the optimizer step runs on the CPU. Activation checkpointing per
layer is always on (Sec. 5.1.2: "activation checkpointing" is part of the
design), and the checkpoints themselves are offloaded to host memory when
the device cannot hold them (Sec. 5.1.2, DeepSpeed's ``cpu_checkpointing``).
Configurations, in order: checkpoints on the device, then on the host; each
with prefetch one and two layers ahead, the faster that fits.

Unit granularity: a layer is a unit; its weights are uploaded as one block and
every unit is its own checkpointed segment.
"""

from __future__ import annotations

from baselines._choose import fastest, fits, named
from karma.plan.plan import from_policies

DEPTHS = (1, 2)


def configurations(profile, place: str):
    n = len(profile.units)
    for depth in DEPTHS:
        plan = from_policies(profile.model, profile.batch, ["recompute"] * n, segments=list(range(n)),
                             checkpoint=place, weights="streamed", prefetch_depth=depth, strategy="zero-infinity")
        yield named(plan, "zero-infinity", checkpoints=place, prefetch_depth=depth)


def plan(profile, hw, capacity):
    on_device = fastest(profile, hw, capacity, configurations(profile, "device"))
    if fits(profile, on_device, hw, capacity):
        return on_device
    return fastest(profile, hw, capacity, configurations(profile, "host"))

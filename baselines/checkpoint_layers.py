"""Per-layer activation checkpointing as practitioners run it: Hugging Face
transformers' ``gradient_checkpointing_enable()`` (and Megatron-LM's
``--checkpoint-activations`` with one layer per chunk) wrap every layer in
torch.utils.checkpoint: each layer keeps only its input and re-runs its forward
before its backward. The rule of Chen et al. 2016 (arXiv:1604.06174, Sec. 4.3)
with one layer per segment, the setting those libraries ship.

Configurations, in the order a practitioner tries them: checkpointing off
(in-core) when it fits; every layer checkpointed but the embedding/stem and
the head (transformers wraps only the layers of its loop; the first and last
units are outside it); then every unit checkpointed, the first and last too.
The first that fits is taken.

Unit granularity: a layer is a unit (a transformer layer, a residual block: what
practitioners wrap for ResNets too). Weights stay resident.
"""

from __future__ import annotations

from baselines._choose import first_fit, named
from karma.plan.plan import from_policies


def configurations(profile):
    n = len(profile.units)
    every = list(range(n))
    yield named(from_policies(profile.model, profile.batch, ["keep"] * n), "checkpoint-layers", layers="none")
    if n > 2:
        inner = ["keep"] + ["recompute"] * (n - 2) + ["keep"]
        yield named(from_policies(profile.model, profile.batch, inner, segments=every), "checkpoint-layers",
                    layers="all but the first and last")
    yield named(from_policies(profile.model, profile.batch, ["recompute"] * n, segments=every), "checkpoint-layers",
                layers="all")


def plan(profile, hw, capacity):
    return first_fit(profile, hw, capacity, configurations(profile))

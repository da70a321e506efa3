"""ZeRO-Offload style (Ren et al., "ZeRO-Offload: Democratizing Billion-Scale
Model Training", USENIX ATC'21) for models whose weights do not fit.

Weights and optimizer state live on the host: each block's weights are
uploaded before its forward and backward, gradients are downloaded as soon as
its backward ends, and the optimizer step runs on the host CPU. Activations
are checkpointed per unit (each unit recomputed from its input kept on the
device), as ZeRO-Offload is used with activation checkpointing. (ZeRO-Offload proper
keeps fp16 weights on the GPU; streaming them as well is ZeRO-Infinity's step, our
baseline for models whose weights do not fit at all.)
"""

from karma.plan import from_policies


def plan(profile, hw, capacity):
    n = len(profile.units)
    return from_policies(profile.model, profile.batch, ["recompute"] * n, segments=list(range(n)),
                         weights="streamed", prefetch_depth=1, strategy="zero-offload")

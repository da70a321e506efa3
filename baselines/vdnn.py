"""vDNN (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable,
Memory-Efficient Neural Network Design", MICRO'16), policy vDNN_all.

Every layer's activations are offloaded to the host during the forward pass
and prefetched one layer ahead of the backward pass; nothing is recomputed
and weights stay on the device. Our layer is a unit of the chain.
"""

from karma.plan import from_policies


def plan(profile, hw, capacity):
    n = len(profile.units)
    return from_policies(profile.model, profile.batch, ["swap"] * n, prefetch_depth=1, strategy="vdnn")

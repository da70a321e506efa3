"""Gradient checkpointing (Chen et al., "Training Deep Nets with Sublinear
Memory Cost", arXiv:1604.06174, 2016), the sqrt(n) strategy.

The chain of n units is cut into ceil(sqrt(n)) segments of about equal
length; only each segment's input stays on the device and every segment is
recomputed before its backward (recompute only, no transfers). This costs
about one extra forward pass, so no plan beats it by more than
(F + B + F) / (F + B), about 1.33x when B = 2F, whenever it fits.
"""

import math

from karma.plan import from_policies


def plan(profile, hw, capacity):
    n = len(profile.units)
    segments = math.ceil(math.sqrt(n))
    size = math.ceil(n / segments)
    return from_policies(profile.model, profile.batch, ["recompute"] * n, segments=list(range(0, n, size)),
                         strategy="checkpoint")

"""SuperNeurons (Wang et al., "SuperNeurons: Dynamic GPU Memory Management for
Training Deep Neural Networks", PPoPP'18): cost-aware recomputation plus
offloading.

SuperNeurons recomputes the cheap layers (pooling, BN, activation: little
compute per byte) and offloads the expensive ones (convolutions), prefetching
one layer ahead. At our unit granularity: a unit is recomputed (its own
segment, input kept on the device) when re-running its forward costs less
than fetching its activations back over the link, and swapped otherwise.
"""

from karma.plan import from_policies


def plan(profile, hw, capacity):
    labels = []
    for u in profile.units:
        fetch = u.saved_bytes / hw.h2d_bw
        labels.append("recompute" if u.forward_time <= fetch else "swap")
    segments = list(range(len(labels)))
    return from_policies(profile.model, profile.batch, labels, segments=segments, prefetch_depth=1,
                         strategy="superneurons")

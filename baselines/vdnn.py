"""vDNN (Rhu et al., "vDNN: Virtualized Deep Neural Networks for Scalable,
Memory-Efficient Neural Network Design", MICRO'16), policy vDNN_dyn.

Rule (Sec. III-C): three static policies and a dynamic one.

* ``vDNN_all``: every layer's input feature map is offloaded to the host during
  the forward pass and prefetched back during the backward pass;
* ``vDNN_conv``: only the inputs of convolution layers are offloaded (they hide
  the copy behind their long compute);
* ``vDNN_dyn`` (the paper's recommendation and our ``vdnn``): at the start of
  training vDNN profiles the network and runs in-core (``vDNN_none``) if that
  fits, otherwise the first of vDNN_conv, vDNN_all that fits (it then also
  degrades convolution algorithms to memory-optimal ones, which our profiles do
  not model: there is one workspace per unit). We take in-core if it fits,
  else the faster of vDNN_conv and vDNN_all among those that fit (vDNN_conv
  moves a subset of vDNN_all's bytes, so it is the first one tried anyway).

Weights stay resident, nothing is recomputed (Sec. III-A). Overlap (Sec. III-B):
layer n's input is offloaded on a copy stream concurrently with layer n's own
forward, and layer n+1 starts only when both are done. Our copy of a swap
block starts after the block's forward (its saved tensors exist only then), so
the same one-layer overlap is "block b's copy overlaps block b+1's forward and
block b+2 waits for it": prefetch depth 2 in karma/sim/simulate.py's semantics
(depth 1 would serialise every copy with the compute, which vDNN does not). In
the backward our depth 2 prefetches two blocks ahead where vDNN prefetches
one; the simulator has one depth for both directions. Our prefetch takes its
device memory when it is issued (karma/sim/simulate.py), so two blocks ahead holds
one more prefetched block than vDNN's one-layer-ahead prefetch; where depth 2
does not fit, vDNN_dyn also tries depth 1 (vDNN's own backward: one layer
ahead), which serialises the forward's copies too: slower, never more memory.

Unit granularity: our layer is a unit (a residual block, a VGG layer, a
transformer layer). Offloading all of a unit's saved tensors as one swap
block is offloading the input of every layer inside it; vDNN_conv's
"convolution layer" is a convolution-like unit (baselines/_layers.py:
residual blocks and transformer layers are, classifier heads and embeddings
are not).
"""

from __future__ import annotations

from baselines._choose import fastest, fits, named
from baselines._layers import conv_like
from karma.plan.plan import from_policies

#: vDNN overlaps each layer's offload with the next layer's compute (see the docstring)
DEPTH = 2
#: where that does not fit: vDNN's own one-layer-ahead prefetch in the backward (see the docstring)
FALLBACK_DEPTH = 1


def policy(profile, variant: str, depth: int = DEPTH):
    """The plan of one static vDNN policy: 'none' (in-core), 'conv' or 'all'."""
    if variant == "none":
        labels = ["keep"] * len(profile.units)
    elif variant == "conv":
        labels = ["swap" if conv_like(u, profile.batch) else "keep" for u in profile.units]
    elif variant == "all":
        labels = ["swap"] * len(profile.units)
    else:
        raise ValueError(f"vDNN policy must be none, conv or all, got {variant!r}")
    plan = from_policies(profile.model, profile.batch, labels, prefetch_depth=depth, strategy=f"vdnn-{variant}")
    return named(plan, f"vdnn-{variant}", variant=f"vDNN_{variant}")


def plan(profile, hw, capacity):
    """vDNN_dyn: in-core if it fits, else the faster of vDNN_conv and vDNN_all that fits, overlapped as
    vDNN overlaps (depth 2), else at depth 1."""
    incore = policy(profile, "none")
    if fits(profile, incore, hw, capacity):
        return named(incore, "vdnn")
    overlapped = [policy(profile, "conv"), policy(profile, "all")]
    chosen = fastest(profile, hw, capacity, overlapped)
    if not fits(profile, chosen, hw, capacity):
        chosen = fastest(profile, hw, capacity, overlapped + [policy(profile, v, FALLBACK_DEPTH)
                                                              for v in ("conv", "all")])
    return named(chosen, "vdnn")

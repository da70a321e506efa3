"""Layer types at unit granularity, for baselines whose rule is stated per layer type.

vDNN_conv (Rhu et al. MICRO'16, Sec. III-C) offloads only the inputs of
convolution layers, and SuperNeurons (Wang et al. PPoPP'18, Sec. 3.3-3.4)
offloads convolution outputs and recomputes the cheap layers (pooling,
activation, batch norm). Our unit is a residual block, a VGG layer or a
transformer layer, and a profile records costs, not layer types, so the type is
read from the costs:

* **convolution-like**: the unit reuses each weight at many positions, i.e. it
  does more than ``REUSE`` x 2 x batch FLOPs per weight in its forward (a fully
  connected layer does exactly 2 x batch; a 3x3 convolution 2 x batch x H x W;
  a transformer layer 2 x batch x sequence, which is a 1x1 convolution over
  positions: GPT-2's own code calls it Conv1D). Residual blocks, VGG's conv
  layers, WRN groups, transformer layers are convolution-like; classifier heads,
  VGG's fc layers and embedding tables are not.
* **cheap**: no weights at all (pooling, activation, normalisation alone), or a
  cost in memory traffic with few FLOPs per output element (below ``INTENSITY``;
  the analytic profile counts a batch norm's as 0) and weights far smaller than its
  output (an embedding table is neither). That is a batch norm with its affine
  weights, a unit of a layer chain (models/layer_units.py), which the reuse rule
  alone takes for a convolution, since it applies its two weights per channel at
  every position. No block unit of our paper models is cheap; layer units and
  random chains have them.

Convolution-like units are not cheap: they do at least ``INTENSITY`` FLOPs per
output element (the lightest convolution of the zoo, ResNet-50's first 1x1 over
64 channels, does 128, or 64 counted over its layer unit's whole boundary, the
skip included).
"""

from __future__ import annotations

#: positions a weight must be used at, per sample, for its unit to count as convolution-like
REUSE = 4
#: forward FLOPs per output element below which a unit is a cheap layer (a batch norm does a few)
INTENSITY = 32


def weight_elements(unit, dtype_bytes: int = 4) -> float:
    return (unit.param_bytes + unit.tied_param_bytes) / dtype_bytes


def flops_per_output(unit, dtype_bytes: int = 4) -> float:
    """Forward FLOPs per element of the unit's output (every tensor of a layer chain's boundary)."""
    return unit.forward_flops / max(unit.output_bytes / dtype_bytes, 1.0)


def conv_like(unit, batch: int) -> bool:
    """The unit reuses its weights across positions (convolutions, transformer layers), and is no cheap layer."""
    elements = weight_elements(unit)
    return elements > 0 and unit.forward_flops > REUSE * 2 * batch * elements and not cheap(unit)


def cheap(unit) -> bool:
    """A unit with no weights (pooling, activations), or with few FLOPs per output element and weights far
    smaller than its output (a batch norm)."""
    few = unit.forward_bytes > 0 and flops_per_output(unit) < INTENSITY
    return unit.param_bytes == 0 or (few and unit.param_bytes * REUSE < unit.output_bytes)

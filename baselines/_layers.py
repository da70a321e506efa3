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
* **cheap**: no weights at all (pooling, activation, normalisation alone); no
  unit of our paper models is one, but random chains have them.
"""

from __future__ import annotations

#: positions a weight must be used at, per sample, for its unit to count as convolution-like
REUSE = 4


def weight_elements(unit, dtype_bytes: int = 4) -> float:
    return (unit.param_bytes + unit.tied_param_bytes) / dtype_bytes


def conv_like(unit, batch: int) -> bool:
    """The unit reuses its weights across positions (convolutions, transformer layers)."""
    elements = weight_elements(unit)
    return elements > 0 and unit.forward_flops > REUSE * 2 * batch * elements


def cheap(unit) -> bool:
    """A unit with no weights: pooling, activations, normalisation without affine weights."""
    return unit.param_bytes == 0

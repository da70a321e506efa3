"""Units finer than a residual block: one per layer, with boundaries that carry several tensors.

At block granularity a residual block is one unit, so during its backward all of its saved
tensors are on the device at once; at ResNet-50 batch 1440 one bottleneck block alone holds
more than 16 GB (docs/profiles.md, *Granularity*). Layer-level methods (vDNN, Rhu et al. MICRO'16; SuperNeurons,
Wang et al. PPoPP'18; KARMA's own layers, Wahib et al. SC'20 Sec. III) cut at every layer
instead. Inside a residual block the skip connection is alive beside the running activation,
so a boundary there is a tuple ``(h, skip)`` (models/boundary.py): the layers of the main
path map ``(h, skip) -> (f(h), skip)``, the projection shortcut maps ``(h, skip) -> (h, g(skip))``
and the join adds them. Every unit holds the original block's own modules, so training the
layer chain trains the original model (tests/models/test_layer_units.py).

A ReLU is its own unit and out of place: an in-place ReLU would overwrite its input, which
may be a recomputed block's checkpoint. A "layer" is one module, as in vDNN: merging a
batch norm with its ReLU makes the merged backward hold the norm's input, the ReLU's output
and two gradients at once (ResNet-50's stem at batch 1440: 18.5 GB).
"""

from __future__ import annotations

import torch
from torch import nn

from models.boundary import Boundary
from models.lean_layers import conv_input_grad_last, relu_saving_mask, splittable


class _Layer(nn.Module):
    """One layer `f` of a residual block; a convolution makes its input gradient last
    (models/lean_layers.py), which the profile records (`UnitProfile.input_grad_last`)."""

    def __init__(self, f: nn.Module):
        super().__init__()
        self.f = f

    @property
    def input_grad_last(self) -> bool:
        return splittable(self.f)

    def layer(self, x: torch.Tensor) -> torch.Tensor:
        return conv_input_grad_last(self.f, x)


class Fork(_Layer):
    """``x -> (f(x), x)``: the first layer of a residual block; the block input rides along as the skip."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.layer(x), x


class Along(_Layer):
    """``(h, skip) -> (f(h), skip)``: a layer of the main path inside a residual block."""

    def forward(self, b: Boundary) -> tuple[torch.Tensor, torch.Tensor]:
        h, skip = b
        return self.layer(h), skip


class Shortcut(_Layer):
    """``(h, skip) -> (h, f(skip))``: the projection shortcut of a block whose shape changes."""

    def forward(self, b: Boundary) -> tuple[torch.Tensor, torch.Tensor]:
        h, skip = b
        return h, self.layer(skip)


class PreShortcut(_Layer):
    """``(pre, x) -> (pre, f(pre))``: a pre-activation block's projection reads the activated input
    (He et al. ECCV'16, Fig. 4e); the raw input is not needed after it."""

    def forward(self, b: Boundary) -> tuple[torch.Tensor, torch.Tensor]:
        pre, _ = b
        return pre, self.layer(pre)


class Join(nn.Module):
    """``(h, skip) -> h + skip``: the end of a residual block."""

    def forward(self, b: Boundary) -> torch.Tensor:
        h, skip = b
        return h + skip


class Relu(nn.Module):
    """An out-of-place ReLU (the module docstring says why not in place) that saves a 1-byte mask of
    where its output is positive, not the output (models/lean_layers.py says why)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_saving_mask(x)


def bottleneck_layers(name: str, block) -> list[tuple[str, nn.Module]]:
    """torchvision's Bottleneck (or BasicBlock) as layers: conv-bn-relu per stage of the main
    path, the downsample projection, the join and the final ReLU, in the original's order of
    operations (torchvision.models.resnet.Bottleneck.forward)."""
    convs = [getattr(block, f"conv{i}") for i in (1, 2, 3) if hasattr(block, f"conv{i}")]
    norms = [getattr(block, f"bn{i}") for i in (1, 2, 3) if hasattr(block, f"bn{i}")]
    out: list[tuple[str, nn.Module]] = [(f"{name}_conv1", Fork(convs[0]))]
    for i, (conv, norm) in enumerate(zip(convs, norms, strict=True)):
        if i:
            out.append((f"{name}_conv{i + 1}", Along(conv)))
        out.append((f"{name}_bn{i + 1}", Along(norm)))
        if i < len(convs) - 1:
            out.append((f"{name}_relu{i + 1}", Along(Relu())))
    if block.downsample is not None:  # torchvision's projection: a conv and a batch norm, a layer each
        out += [(f"{name}_downsample{j}", Shortcut(layer)) for j, layer in enumerate(block.downsample)]
    out += [(f"{name}_add", Join()), (f"{name}_relu", Relu())]
    return out


def preact_layers(name: str, block) -> list[tuple[str, nn.Module]]:
    """A pre-activation bottleneck (models/preact_resnet.py, or WRN's basic block) as layers:
    bn-relu-conv per stage, the shortcut projection (of the activated input) where the shape
    changes, and the join (PreActBottleneck.forward)."""
    stages = [i for i in (1, 2, 3) if hasattr(block, f"conv{i}")]
    out: list[tuple[str, nn.Module]] = [(f"{name}_bn1", Fork(block.bn1)), (f"{name}_relu1", Along(Relu()))]
    if block.shortcut is not None:
        out.append((f"{name}_shortcut", PreShortcut(block.shortcut)))
    for i in stages:
        if i > 1:
            out += [(f"{name}_bn{i}", Along(getattr(block, f"bn{i}"))), (f"{name}_relu{i}", Along(Relu()))]
        out.append((f"{name}_conv{i}", Along(getattr(block, f"conv{i}"))))
        if i == 1 and isinstance(getattr(block, "dropout", None), nn.Dropout):
            out.append((f"{name}_dropout", Along(block.dropout)))
    out.append((f"{name}_add", Join()))
    return out


def preact_chain(stem: nn.Module, stages: nn.Sequential, prefix: str, head: nn.Module) -> list[tuple[str, nn.Module]]:
    """A pre-activation ResNet (ResNet-1001, WRN) as layers: the stem, each block's layers named
    `<prefix><stage>_<block>_<layer>` with the skip riding along, and the head's layers."""
    chain: list[tuple[str, nn.Module]] = [("stem", stem)]
    for s, stage in enumerate(stages):
        for b, block in enumerate(stage):
            chain += preact_layers(f"{prefix}{s + 1}_{b}", block)
    return chain + layers_of(head, "head")


def layers_of(module: nn.Module, name: str) -> list[tuple[str, nn.Module]]:
    """A plain sequence of layers (a stem or a head) as one unit per child module, ReLUs out of place."""
    out = []
    for child_name, child in module.named_children():
        child = Relu() if isinstance(child, nn.ReLU) else child
        out.append((f"{name}_{child_name}", child))
    return out

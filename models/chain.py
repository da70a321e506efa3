"""The nouns of the model zoo: a ModelSpec (how to build one model family) and a
ChainModel (one built model as an ordered chain of units).

KARMA (Wahib et al., SC'20, Sec. III) plans over a *chain*: the model is a
sequence of units (stem, residual blocks or transformer layers, head) and
consecutive units are grouped into blocks that are kept, swapped or
recomputed. Every model here is first built as its original module
(torchvision's ResNet, our Megatron-shaped GPT, ...) and then split into units
that share the original's parameters, so training the chain is training the
original model.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from karma.core.precision import autocast

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model family at any of its size presets.

    `sizes` maps a preset name to the keyword arguments of `build`; `batch`
    maps it to the default batch size (for `paper`, the batch chosen so that
    the in-core footprint needs 2x-4x a 16 GB V100, see docs/models.md).
    `published_params` is the parameter count the literature gives for the
    `paper` preset, with its source in `source`.
    """

    name: str
    description: str
    source: str
    sizes: Mapping[str, Mapping]
    batch: Mapping[str, int]
    build: Callable[..., nn.Module]
    units: Callable[[nn.Module], list[tuple[str, nn.Module]]]
    make_batch: Callable[..., Batch]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: str
    published_params: float | None = None
    #: the chain at layer granularity (`--granularity layer`): units finer than a residual block or
    #: transformer layer, whose boundaries may carry several tensors (models/boundary.py); None if
    #: the family has none
    layer_units: Callable[[nn.Module], list[tuple[str, nn.Module]]] | None = None


#: How finely a zoo model is cut into units: `block` (a residual block or transformer layer per
#: unit, the paper's tables) or `layer` (KARMA's layers, finer than a block: reach beyond one block).
GRANULARITIES = ("block", "layer")


@dataclass
class ChainModel:
    """One built model: units in order, a synthetic batch maker and the loss.

    `units` is an nn.Sequential whose children are the units, so
    `loss(units(x), y)` is one training step's loss. `optimizer` names the
    optimizer the paper's setting uses ('sgd' with momentum for the CNNs,
    'adam' for the GPT models); it fixes the optimizer-state bytes per
    parameter (1x for momentum, 2x for Adam's two moments).
    """

    name: str
    size: str
    batch: int
    units: nn.Sequential
    make_batch_fn: Callable[..., Batch]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    optimizer: str
    config: Mapping = field(default_factory=dict)
    precision: str = "fp32"
    granularity: str = "block"

    @property
    def unit_names(self) -> list[str]:
        return [name for name, _ in self.units.named_children()]

    def __len__(self) -> int:
        return len(self.units)

    def make_batch(self, seed: int = 0, device: str | torch.device = "cpu") -> Batch:
        """A synthetic (inputs, targets) batch; on `meta` only shapes are made."""
        return self.make_batch_fn(self.config, self.batch, torch.device(device), seed)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.units(inputs)

    def autocast(self):
        """The forward's precision context (torch.autocast for mixed precision; on meta its
        emulation, karma.core.precision.MetaAutocast). The backward runs outside it."""
        return autocast(next(self.units.parameters()).device, self.precision)

    def step_loss(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            return self.loss(self.units(inputs), targets)

    def parameter_count(self) -> int:
        """Unique parameters (a tied weight counts once)."""
        return sum(p.numel() for p in self.units.parameters())


def sequential(units: list[tuple[str, nn.Module]]) -> nn.Sequential:
    return nn.Sequential(OrderedDict(units))


def random_images(shape: tuple[int, ...], classes: int, batch: int, device: torch.device, seed: int) -> Batch:
    """Synthetic images and labels (timing does not depend on the data, docs/paper.md)."""
    if device.type == "meta":
        return (torch.empty((batch, *shape), device=device),
                torch.empty((batch,), dtype=torch.long, device=device))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((batch, *shape), generator=gen)
    y = torch.randint(0, classes, (batch,), generator=gen)
    return x.to(device), y.to(device)


def staged_units(stem: nn.Module, stages: nn.Sequential, prefix: str, head: nn.Module) -> list[tuple[str, nn.Module]]:
    """Stem, every block of every stage (named `<prefix><stage>_<block>`), head."""
    chain: list[tuple[str, nn.Module]] = [("stem", stem)]
    for s, stage in enumerate(stages):
        chain += [(f"{prefix}{s + 1}_{b}", block) for b, block in enumerate(stage)]
    chain.append(("head", head))
    return chain


def cifar_batch(config, batch, device, seed) -> Batch:
    """Synthetic CIFAR-sized images (3x32x32)."""
    return random_images((3, 32, 32), config["num_classes"], batch, device, seed)

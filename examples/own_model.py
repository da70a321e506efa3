"""Your own model for KARMA (docs/models.md "Your own model"): `karma profile examples.own_model:mlp`.

The contract of a `package.module:function` spec (models/specs.py): the function takes the
`--set key=value` overrides as keyword arguments and returns `(module, make_batch, loss)` or
`(module, make_batch, loss, optimizer)`:

* `module` maps one tensor to one tensor; KARMA builds it inside `torch.device(...)` (the meta
  device for an analytic profile) after `torch.manual_seed(seed)`, traces it and cuts it into
  units (models/auto_chain.py), where one tensor carries everything forward or, inside a long
  skip, where the fewest bytes do;
* `make_batch(batch, device, seed) -> (inputs, targets)`; on the meta device only the shapes
  matter (`torch.empty`);
* `loss(outputs, targets)` is a scalar; `optimizer` is "sgd" (SGD with momentum, the default)
  or "adam".
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Residual(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def mlp(width: int = 1024, depth: int = 24, features: int = 256, classes: int = 1000):
    """A residual MLP classifier: `depth` blocks of `width`, one unit each."""
    module = nn.Sequential(nn.Linear(features, width), *[Residual(width) for _ in range(depth)],
                           nn.LayerNorm(width), nn.Linear(width, classes))

    def make_batch(batch, device, seed):
        if device.type == "meta":
            return torch.empty(batch, features, device=device), torch.empty(batch, dtype=torch.long, device=device)
        gen = torch.Generator().manual_seed(seed)
        x, y = torch.randn(batch, features, generator=gen), torch.randint(0, classes, (batch,), generator=gen)
        return x.to(device), y.to(device)

    return module, make_batch, F.cross_entropy, "adam"


class LongSkip(nn.Module):
    """An encoder-decoder in miniature: the output reads the input of the first layer again, so every
    boundary between its layers carries the input beside the running activation."""

    def __init__(self, width: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(4))

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = torch.relu(layer(h))
        return h + x


def long_skip(width: int = 64, features: int = 64):
    def make_batch(batch, device, seed):
        if device.type == "meta":
            return torch.empty(batch, features, device=device), torch.empty(batch, width, device=device)
        gen = torch.Generator().manual_seed(seed)
        x, y = torch.randn(batch, features, generator=gen), torch.randn(batch, width, generator=gen)
        return x.to(device), y.to(device)

    return LongSkip(width), make_batch, F.mse_loss

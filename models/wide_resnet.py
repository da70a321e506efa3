"""Wide ResNet WRN-28-10 for CIFAR (Zagoruyko & Komodakis, BMVC'16: 36.5M parameters).

Depth 28 = 6n+4 with n = 4 pre-activation basic blocks per group, group widths
16k, 32k, 64k with k = 10. Dropout between the convolutions is optional in the
paper; we use 0.3 as its best CIFAR-10 result (Table 6) so that recompute has to
preserve the RNG state.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from models.chain import ModelSpec, cifar_batch, staged_units
from models.layer_units import preact_chain


class WideBasic(nn.Module):
    def __init__(self, inplanes: int, planes: int, stride: int, dropout: float):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.conv1 = nn.Conv2d(inplanes, planes, 3, padding=1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or inplanes != planes:
            self.shortcut = nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        identity = x if self.shortcut is None else self.shortcut(pre)
        out = self.dropout(self.conv1(pre))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + identity


class WideResNet(nn.Module):
    def __init__(self, depth: int, width: int, num_classes: int = 10, dropout: float = 0.3):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError("WRN depth must be 6n+4")
        n = (depth - 4) // 6
        widths = (16 * width, 32 * width, 64 * width)
        self.stem = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        inplanes = 16
        groups = []
        for g, planes in enumerate(widths):
            blocks = []
            for b in range(n):
                blocks.append(WideBasic(inplanes, planes, 2 if (g > 0 and b == 0) else 1, dropout))
                inplanes = planes
            groups.append(nn.Sequential(*blocks))
        self.groups = nn.Sequential(*groups)
        self.head = nn.Sequential(
            nn.BatchNorm2d(inplanes), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
            nn.Linear(inplanes, num_classes),
        )

    def forward(self, x):
        return self.head(self.groups(self.stem(x)))


def build(depth: int, width: int, num_classes: int = 10, dropout: float = 0.3, **_) -> nn.Module:
    return WideResNet(depth, width, num_classes, dropout)


def units(model) -> list[tuple[str, nn.Module]]:
    return staged_units(model.stem, model.groups, "group", model.head)


def layer_units(model) -> list[tuple[str, nn.Module]]:
    """One unit per layer (models/layer_units.py): bn / ReLU / conv, the skip riding along."""
    return preact_chain(model.stem, model.groups, "group", model.head)


WRN_28_10 = ModelSpec(
    name="wrn28-10",
    description="Wide ResNet 28-10 (pre-activation basic blocks, dropout 0.3), CIFAR-10 32x32",
    source="Zagoruyko & Komodakis BMVC'16, Table 5: 36.5M parameters",
    sizes={
        "paper": {"depth": 28, "width": 10, "num_classes": 10},
        "small": {"depth": 28, "width": 4, "num_classes": 10},
        "tiny": {"depth": 10, "width": 1, "num_classes": 10},
    },
    batch={"paper": 1280, "small": 4, "tiny": 2},
    build=build,
    units=units,
    layer_units=layer_units,
    make_batch=cifar_batch,
    loss=F.cross_entropy,
    optimizer="sgd",
    published_params=36.5e6,
)

"""Pre-activation ResNet-1001 for CIFAR (He et al., "Identity Mappings in Deep
Residual Networks", ECCV'16: 1001 layers, 10.2M parameters).

Depth 9n+2 with n = 111 bottleneck blocks per stage, three stages of output
width 64, 128, 256 (bottleneck width 16, 32, 64); each block is
BN-ReLU-conv1x1-BN-ReLU-conv3x3-BN-ReLU-conv1x1 plus the identity (a 1x1
projection where the shape changes). Written here because torchvision has no
pre-activation ResNet.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from models.chain import ModelSpec, cifar_batch, staged_units
from models.layer_units import preact_chain


class PreActBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        out = planes * self.expansion
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.shortcut = None
        if stride != 1 or inplanes != out:
            self.shortcut = nn.Conv2d(inplanes, out, 1, stride=stride, bias=False)

    def forward(self, x):
        pre = F.relu(self.bn1(x))
        identity = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(F.relu(self.bn2(out)))
        out = self.conv3(F.relu(self.bn3(out)))
        return out + identity


class PreActResNet(nn.Module):
    def __init__(self, blocks_per_stage: int, num_classes: int = 10, base: int = 16):
        super().__init__()
        self.stem = nn.Conv2d(3, base, 3, padding=1, bias=False)
        stages = []
        inplanes = base
        for s, planes in enumerate((base, base * 2, base * 4)):
            blocks = []
            for b in range(blocks_per_stage):
                stride = 2 if (s > 0 and b == 0) else 1
                blocks.append(PreActBottleneck(inplanes, planes, stride))
                inplanes = planes * PreActBottleneck.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(
            nn.BatchNorm2d(inplanes), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(1),
            nn.Linear(inplanes, num_classes),
        )

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def build(blocks_per_stage: int, num_classes: int = 10, **_) -> nn.Module:
    return PreActResNet(blocks_per_stage, num_classes)


def units(model) -> list[tuple[str, nn.Module]]:
    return staged_units(model.stem, model.stages, "stage", model.head)


def layer_units(model) -> list[tuple[str, nn.Module]]:
    """One unit per layer (models/layer_units.py): bn / ReLU / conv, the skip riding along."""
    return preact_chain(model.stem, model.stages, "stage", model.head)


RESNET1001 = ModelSpec(
    name="resnet1001",
    description="pre-activation ResNet-1001 (bottleneck, 111 blocks per stage), CIFAR-10 32x32",
    source="He et al. ECCV'16 (Identity Mappings), Table 2: 10.2M parameters",
    sizes={
        "paper": {"blocks_per_stage": 111, "num_classes": 10},
        "small": {"blocks_per_stage": 111, "num_classes": 10},
        "tiny": {"blocks_per_stage": 2, "num_classes": 10},
    },
    batch={"paper": 256, "small": 2, "tiny": 2},
    build=build,
    units=units,
    layer_units=layer_units,
    make_batch=cifar_batch,
    loss=F.cross_entropy,
    optimizer="sgd",
    published_params=10.2e6,
)

"""ResNet-50 and ResNet-200 (He et al., CVPR'16), torchvision's implementation.

ResNet-200 is torchvision's ResNet with bottleneck blocks 3-24-36-3 (He et al.,
ECCV'16, Table 4 lists it at 64.7M parameters). The chain is the stem, one unit
per bottleneck block, and the head (pool, flatten, fc).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from models.chain import ModelSpec, random_images
from models.layer_units import bottleneck_layers, layers_of

# torchvision is imported where its model is built: it takes seconds to import.

LAYERS = {"resnet50": (3, 4, 6, 3), "resnet200": (3, 24, 36, 3)}


def build(layers, width_per_group: int = 64, num_classes: int = 1000, **_) -> nn.Module:
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, list(layers), num_classes=num_classes, width_per_group=width_per_group)


def units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    chain = [("stem", nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool))]
    for stage in (1, 2, 3, 4):
        for i, block in enumerate(getattr(model, f"layer{stage}")):
            chain.append((f"layer{stage}_{i}", block))
    chain.append(("head", nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)))
    return chain


def layer_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """One unit per layer (models/layer_units.py): the stem's conv, bn, ReLU and pool, each
    block's layers with the skip riding along, and the head."""
    stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    chain = layers_of(stem, "stem")
    for stage in (1, 2, 3, 4):
        for i, block in enumerate(getattr(model, f"layer{stage}")):
            chain += bottleneck_layers(f"layer{stage}_{i}", block)
    chain.append(("head", nn.Sequential(model.avgpool, nn.Flatten(1), model.fc)))
    return chain


def make_batch(config, batch, device, seed):
    res = config["resolution"]
    return random_images((3, res, res), config["num_classes"], batch, device, seed)


def _spec(name: str, params: float, batch: int, small_batch: int) -> ModelSpec:
    layers = LAYERS[name]
    return ModelSpec(
        name=name,
        description=f"ResNet bottleneck {'-'.join(map(str, layers))}, ImageNet 224x224",
        source="He et al. CVPR'16 / ECCV'16; torchvision.models.resnet",
        sizes={
            "paper": {"layers": layers, "resolution": 224, "num_classes": 1000},
            "small": {"layers": layers, "resolution": 64, "num_classes": 100, "width_per_group": 32},
            "tiny": {"layers": (1, 1, 1, 1), "resolution": 32, "num_classes": 10, "width_per_group": 8},
        },
        batch={"paper": batch, "small": small_batch, "tiny": 2},
        build=build,
        units=units,
        layer_units=layer_units,
        make_batch=make_batch,
        loss=F.cross_entropy,
        optimizer="sgd",
        published_params=params,
    )


RESNET50 = _spec("resnet50", 25.6e6, batch=384, small_batch=4)
RESNET200 = _spec("resnet200", 64.7e6, batch=128, small_batch=2)

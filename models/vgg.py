"""VGG-16 (Simonyan & Zisserman, ICLR'15; 138.4M parameters), torchvision's implementation.

Units: each conv+ReLU (with the max-pool that follows it), then the pool and
flatten, then the three classifier layers (with their ReLU/dropout). The
`tiny` preset narrows the convolutions and the classifier for unit tests.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from models.chain import ModelSpec, random_images
from models.layer_units import layers_of

# torchvision is imported where its model is built: it takes seconds to import.

VGG16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
TINY = [8, "M", 16, "M", 16, 16, "M"]


def build(cfg, num_classes: int = 1000, hidden: int = 4096, **_) -> nn.Module:
    from torchvision.models.vgg import VGG, make_layers

    model = VGG(make_layers(list(cfg)), num_classes=num_classes)
    if hidden != 4096 or cfg[-2] != 512:
        flat = cfg[-2] * 7 * 7
        model.classifier = nn.Sequential(
            nn.Linear(flat, hidden), nn.ReLU(True), nn.Dropout(),
            nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(),
            nn.Linear(hidden, num_classes),
        )
    return model


def units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    chain: list[tuple[str, nn.Module]] = []
    layers = list(model.features)
    i = conv = 0
    while i < len(layers):
        group = [layers[i], layers[i + 1]]
        i += 2
        if i < len(layers) and isinstance(layers[i], nn.MaxPool2d):
            group.append(layers[i])
            i += 1
        conv += 1
        chain.append((f"conv{conv}", nn.Sequential(*group)))
    cls = list(model.classifier)
    chain.append(("fc1", nn.Sequential(model.avgpool, nn.Flatten(1), *cls[0:3])))
    chain.append(("fc2", nn.Sequential(*cls[3:6])))
    chain.append(("fc3", cls[6]))
    return chain


def layer_units(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """One unit per layer (conv, ReLU, pool; the classifier's linear, ReLU and dropout layers): VGG has no
    skip connections, so every boundary is one tensor."""
    return (layers_of(model.features, "features") + [("pool", nn.Sequential(model.avgpool, nn.Flatten(1)))]
            + layers_of(model.classifier, "classifier"))


def make_batch(config, batch, device, seed):
    res = config["resolution"]
    return random_images((3, res, res), config["num_classes"], batch, device, seed)


VGG16_SPEC = ModelSpec(
    name="vgg16",
    description="VGG-16 (configuration D), ImageNet 224x224",
    source="Simonyan & Zisserman ICLR'15; torchvision.models.vgg16",
    sizes={
        "paper": {"cfg": VGG16, "resolution": 224, "num_classes": 1000},
        "small": {"cfg": VGG16, "resolution": 32, "num_classes": 100},
        "tiny": {"cfg": TINY, "resolution": 32, "num_classes": 10, "hidden": 32},
    },
    batch={"paper": 208, "small": 2, "tiny": 2},
    build=build,
    units=units,
    layer_units=layer_units,
    make_batch=make_batch,
    loss=F.cross_entropy,
    optimizer="sgd",
    published_params=138.4e6,
)

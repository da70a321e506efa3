"""Model name + size preset + batch -> ChainModel.

`build('resnet50', 'paper', 256, device='meta')` builds the real dimensions
without allocating memory (the meta device), which is how paper-size models
are profiled on a laptop. Bad names or batches raise KarmaError naming the
valid choices.
"""

from __future__ import annotations

import torch
from torch import nn

from karma.core.errors import KarmaError, choose
from karma.core.precision import to_precision
from karma.core.precision_bytes import check as check_precision
from models.chain import GRANULARITIES, ChainModel, ModelSpec, sequential
from models.gpt import GPT_SPECS
from models.preact_resnet import RESNET1001
from models.resnet import RESNET50, RESNET200
from models.specs import build as build_spec
from models.specs import is_spec
from models.vgg import VGG16_SPEC
from models.wide_resnet import WRN_28_10

MODELS: dict[str, ModelSpec] = {
    spec.name: spec for spec in [RESNET50, VGG16_SPEC, RESNET200, RESNET1001, WRN_28_10, *GPT_SPECS]
}

#: The six single-GPU models of the paper's speedup experiment (Sec. VI-A);
#: megatron-1.2b is our stated choice for its unnamed Megatron configuration.
PAPER_SIX = ["resnet50", "vgg16", "resnet200", "resnet1001", "wrn28-10", "megatron-1.2b"]
#: The large NLP models of the data parallel vs model parallel comparison.
LARGE_NLP = ["megatron-2.5b", "megatron-8.3b", "turing-nlg-17b"]


def model_names() -> list[str]:
    return list(MODELS)


def size_names(model: str) -> list[str]:
    return list(spec(model).sizes)


def spec(model: str) -> ModelSpec:
    choose("model", model, MODELS)
    return MODELS[model]


def _check(model: str, size: str, batch: int | None) -> ModelSpec:
    s = spec(model)
    choose("size", size, s.sizes, f" for {model}")
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0):
        raise KarmaError(f"batch must be a positive integer, got {batch!r}")
    return s


def build_original(model: str, size: str, device: str | torch.device = "cpu", seed: int = 0,
                   overrides: dict | None = None) -> nn.Module:
    """The original (unsplit) module, initialised from `seed` (no init on meta).

    `overrides` changes builder arguments of the preset (e.g. {"dropout": 0.0}).
    """
    s = _check(model, size, None)
    torch.manual_seed(seed)
    with torch.device(device):
        return s.build(**{**s.sizes[size], **(overrides or {})})


def units_of(s: ModelSpec, granularity: str):
    """The spec's unit splitter at `granularity` (models.chain.GRANULARITIES)."""
    choose("granularity", granularity, GRANULARITIES)
    if granularity == "block":
        return s.units
    if s.layer_units is None:
        raise KarmaError(f"{s.name} has no layer granularity (block only)")
    return s.layer_units


def block_of_layers(blocks: list[tuple[str, nn.Module]], layers: list[tuple[str, nn.Module]]) -> list[int]:
    """Per layer unit, the index of the block unit it is a part of: the last block holding one of its
    modules (a head that reads a tied embedding is the head's), a layer without modules (a join) the
    previous layer's. The splitters wrap the original model's modules, so this needs no naming rule."""
    where = {}
    for k, (_, block) in enumerate(blocks):
        for m in block.modules():
            where.setdefault(id(m), k)
    owners, last = [], 0
    for name, layer in layers:
        held = [where[id(m)] for m in layer.modules() if id(m) in where]
        k = max(held, default=last)
        if k < last:
            raise KarmaError(f"layer unit {name} is of block unit {blocks[k][0]}, before the previous layer's")
        owners.append(k)
        last = k
    return owners


def mixed_units(s: ModelSpec, split: frozenset[str]):
    """The spec's block units with those named in `split` cut into their layer units: a chain coarse
    where a block fits and fine where it does not (`karma profile --granularity auto`, docs/profiles.md). Both
    splitters wrap the same modules, and a boundary between blocks is one tensor, so the chain computes
    the original model (tests/profile/test_granularity.py)."""
    layer_units = units_of(s, "layer")

    def units(original: nn.Module) -> list[tuple[str, nn.Module]]:
        layers, blocks = layer_units(original), s.units(original)
        unknown = split - {name for name, _ in blocks}
        if unknown:
            raise KarmaError(f"{s.name} has no block units named {sorted(unknown)}")
        owners = block_of_layers(blocks, layers)
        out = []
        for k, (name, block) in enumerate(blocks):
            out += [layer for layer, owner in zip(layers, owners, strict=True) if owner == k] if name in split \
                else [(name, block)]
        return out

    return units


def chain_of(model: str, size: str, original: nn.Module, batch: int | None = None, precision: str = "fp32",
             granularity: str = "block", split: frozenset[str] = frozenset()) -> ChainModel:
    """Split an already-built original module into a ChainModel sharing its parameters; in mixed
    precision its weights become 16-bit (karma.core.precision.to_precision, in place). `split`: block units
    cut into their layers in a block chain (`mixed_units`)."""
    s = _check(model, size, batch)
    if split and granularity != "block":
        raise KarmaError("split names block units to cut into layers: it needs granularity 'block'")
    splitter = mixed_units(s, frozenset(split)) if split else units_of(s, granularity)
    to_precision(original, precision)
    return ChainModel(
        name=model,
        size=size,
        batch=s.batch[size] if batch is None else batch,
        units=sequential(splitter(original)),
        make_batch_fn=s.make_batch,
        loss=s.loss,
        optimizer=s.optimizer,
        config=dict(s.sizes[size]),
        precision=precision,
        granularity="mixed" if split else granularity,
    )


def build(model: str, size: str = "paper", batch: int | None = None,
          device: str | torch.device = "cpu", seed: int = 0, overrides: dict | None = None,
          precision: str = "fp32", granularity: str = "block", split: frozenset[str] = frozenset()) -> ChainModel:
    """Build `model` at `size` as a chain; `batch` defaults to the preset's batch; `precision`
    'fp32', 'fp16' or 'bf16' (mixed precision, karma/core/precision.py); `granularity` 'block' or
    'layer' (models.chain.GRANULARITIES), `split` the block units cut into layers in a block chain
    (`mixed_units`). A model spec (`torchvision:NAME`,
    `hf:MODEL_TYPE`, `package.module:function`, models/specs.py) is built and cut into a chain
    automatically, `size` ignored, `overrides` its options (set, seq, input, units)."""
    if is_spec(model):
        return build_spec(model, batch, device, seed, overrides, precision)
    units_of(_check(model, size, batch), granularity)
    check_precision(precision)
    return chain_of(model, size, build_original(model, size, device, seed, overrides), batch, precision,
                    granularity, split)

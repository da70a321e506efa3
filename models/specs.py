"""Model specs beside the zoo's names: any torchvision or transformers model, or the user's own.

* ``torchvision:NAME`` - ``torchvision.models.get_model(NAME, weights=None)``, images of
  ``input`` (default ``3x224x224``), cross-entropy, SGD with momentum; a segmentation model
  (FCN, DeepLabV3, LR-ASPP) with per-pixel targets, its auxiliary head on as torchvision's
  reference recipe trains it (`SegmentationLogits`);
* ``hf:MODEL_TYPE`` or ``hf:path/to/config.json`` - a transformers model built from
  ``AutoConfig.for_model(MODEL_TYPE, **set)`` (no hub access), sequences of ``seq`` tokens:
  decoder-only models with a causal-LM loss (next token), encoder-only ones with a masked-LM
  loss (15% of positions), a sequence-classification loss where there is no LM head, and
  encoder-decoders (T5, BART) reproducing their input through the decoder (`Seq2SeqLogits`);
  Adam;
* ``package.module:function`` - the user's code (the contract, docs/models.md "Your own model"):
  ``function(**set)`` returns ``(module, make_batch, loss)`` or ``(module, make_batch, loss,
  optimizer)``, where ``make_batch(batch, device, seed) -> (inputs, targets)`` (on the meta
  device only shapes: ``torch.empty``), ``loss(outputs, targets)`` is a scalar, the module
  maps one tensor to one tensor and ``optimizer`` is ``"sgd"`` (default) or ``"adam"``. The
  module is built inside ``torch.device(device)`` after ``torch.manual_seed(seed)``.

Each becomes a ChainModel automatically (models/auto_chain.py). Options (`options`): ``set``
(a dict of builder or config overrides), ``seq``, ``input`` ("3x224x224"), ``units`` (merge
into N units balanced in forward time and saved bytes; models/auto_chain.py).
"""

from __future__ import annotations

import difflib
import importlib
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
import yaml
from torch import nn

from karma.core.errors import KarmaError
from karma.core.precision import to_precision
from karma.core.precision_bytes import check as check_precision
from models.auto_chain import auto_units
from models.chain import ChainModel, random_images, sequential

# transformers and torchvision are imported where an hf: or torchvision: spec is built: each takes
# seconds to import and most runs need neither.

KINDS = "torchvision:NAME, hf:MODEL_TYPE, hf:path/to/config.json or package.module:function"
#: The default batch of a spec model without --batch.
DEFAULT_BATCH = {"torchvision": 32, "hf": 1, "user": 8}
#: The longest default sequence of an hf: model (its maximum position count, at most this).
MAX_DEFAULT_SEQ = 2048


def is_spec(name) -> bool:
    return isinstance(name, str) and ":" in name


def kind_of(spec: str) -> str:
    prefix = spec.split(":", 1)[0]
    if prefix in ("torchvision", "hf"):
        return prefix
    if not prefix or not all(part.isidentifier() for part in prefix.split(".")) or \
            not spec.split(":", 1)[1].isidentifier():
        raise KarmaError(f"model spec {spec!r} is none of {KINDS}")
    return "user"


def parse_set(items) -> dict:
    """`key=value` strings (values read as YAML: 48, 1e-5, true, [1, 2], text) -> a dict."""
    out = {}
    for item in items or []:
        key, eq, value = str(item).partition("=")
        if not eq or not key.strip():
            raise KarmaError(f"--set takes key=value, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def parse_input(text: str | None) -> tuple[int, ...]:
    text = text or "3x224x224"
    try:
        shape = tuple(int(d) for d in str(text).lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d <= 0 for d in shape):
        raise KarmaError(f"--input takes positive sizes joined by x (3x224x224), got {text!r}")
    return shape


@dataclass
class Source:
    """What a spec builds before it becomes a chain."""

    module: nn.Module
    make_batch: Callable[[int, torch.device, int], tuple[torch.Tensor, torch.Tensor]]
    loss: Callable
    optimizer: str
    config: dict


def _on(device, seed: int, build: Callable[[], nn.Module]) -> nn.Module:
    """Build under `device`; a builder that computes with tensors (torchvision's RegNet) cannot on
    meta: build it on the CPU, then move it."""
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            return build()
    except NotImplementedError:
        if torch.device(device).type != "meta":
            raise
    torch.manual_seed(seed)
    return build().to(device)


def _torchvision(name: str, options: dict, device, seed: int) -> Source:
    import torchvision

    classifiers = torchvision.models.list_models(module=torchvision.models)
    segmenters = torchvision.models.list_models(module=torchvision.models.segmentation)
    if name not in classifiers + segmenters:
        near = difflib.get_close_matches(name, classifiers + segmenters, n=3)
        raise KarmaError(f"unknown torchvision classification or segmentation model {name!r}"
                         f"{'; did you mean ' + ', '.join(near) if near else ''} (torchvision.models.list_models())")
    kwargs = dict(options.get("set") or {})
    if name in ("googlenet", "inception_v3"):  # their auxiliary heads read the middle of the network
        kwargs.setdefault("aux_logits", False)
        kwargs.setdefault("init_weights", False)
    segmentation = name in segmenters
    if segmentation:
        kwargs.setdefault("weights_backbone", None)
        if not name.startswith("lraspp"):  # torchvision's reference recipe trains FCN and DeepLabV3 with it
            kwargs.setdefault("aux_loss", True)
    shape = parse_input(options.get("input"))
    try:
        module = _on(device, seed, lambda: torchvision.models.get_model(name, weights=None, **kwargs))
    except TypeError as err:
        raise KarmaError(f"torchvision:{name}: {err}") from None
    classes = int(kwargs.get("num_classes", 21 if segmentation else 1000))

    def make_batch(batch, dev, s):
        images, labels = random_images(shape, classes, batch, dev, s)
        if not segmentation:
            return images, labels
        if dev.type == "meta":
            return images, torch.empty((batch, *shape[1:]), dtype=torch.long, device=dev)
        gen = torch.Generator().manual_seed(s + 1)
        return images, torch.randint(0, classes, (batch, *shape[1:]), generator=gen).to(dev)

    config = {"input": "x".join(map(str, shape)), "set": kwargs}
    if segmentation:
        return Source(SegmentationLogits(module), make_batch, segmentation_loss, "sgd", config)
    return Source(module, make_batch, F.cross_entropy, "sgd", config)


class SegmentationLogits(nn.Module):
    """A torchvision segmentation model as one tensor out: its per-pixel logits, stacked with the
    auxiliary head's (which reads the backbone's third stage) where the model has one. The stack is
    one copy of both logits more than torchvision's recipe holds (a chain's last unit returns one
    tensor); the logits are small beside the backbone's activations."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, images):
        out = self.model(images)
        return torch.stack([out["out"], out["aux"]]) if "aux" in out else out["out"]


def segmentation_loss(logits, targets):
    """Per-pixel cross-entropy, plus half the auxiliary head's (torchvision's segmentation reference,
    references/segmentation/train.py `criterion`)."""
    if logits.dim() == targets.dim() + 2:
        return F.cross_entropy(logits[0], targets) + 0.5 * F.cross_entropy(logits[1], targets)
    return F.cross_entropy(logits, targets)


class LMLogits(nn.Module):
    """A transformers model as one tensor in (token ids), one tensor out (its logits)."""

    def __init__(self, model: nn.Module, causal: bool):
        super().__init__()
        self.model = model
        self.causal = causal

    def forward(self, ids):
        if self.causal:
            return self.model(input_ids=ids, use_cache=False).logits
        return self.model(input_ids=ids).logits


class Seq2SeqLogits(nn.Module):
    """A transformers encoder-decoder as one tensor in (token ids), one out (the decoder's logits):
    the decoder reads the ids shifted right by one (its start token first) and is trained to
    reproduce them, a denoising objective without the noise (timing does not depend on the data)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids):
        decoder_ids = self.model.prepare_decoder_input_ids_from_labels(labels=ids)
        return self.model(input_ids=ids, decoder_input_ids=decoder_ids, use_cache=False).logits


def hf_config(what: str, sets: dict):
    """AutoConfig.for_model(MODEL_TYPE or a config.json's model_type, **its fields, **sets); no hub."""
    from transformers import AutoConfig

    fields = {}
    if what.endswith(".json") or os.sep in what or Path(what).is_file():
        try:
            fields = json.loads(Path(what).read_text())
        except (OSError, ValueError) as err:
            raise KarmaError(f"hf:{what}: cannot read a JSON config ({err})") from None
        if not isinstance(fields, dict) or "model_type" not in fields:
            raise KarmaError(f"hf:{what}: a config.json needs a 'model_type' field")
        what = fields.pop("model_type")
        fields = {k: v for k, v in fields.items() if not k.startswith("_") and k not in ("architectures",
                                                                                             "transformers_version")}
    try:
        return AutoConfig.for_model(what, **{**fields, **sets})
    except (ValueError, KeyError) as err:
        raise KarmaError(f"hf:{what}: {str(err).splitlines()[0][:300]}") from None


def hf_task(config) -> str:
    """'seq2seq', 'causal', 'masked' or 'classification', or a one-line refusal."""
    from transformers.models.auto import modeling_auto as auto

    kind = config.model_type
    if getattr(config, "is_encoder_decoder", False):
        if kind in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
            return "seq2seq"
        raise KarmaError(f"hf:{kind} is an encoder-decoder model without a sequence-to-sequence LM head in "
                         f"transformers")
    if kind in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return "masked"
    if kind in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return "causal"
    if kind in auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES:
        return "classification"
    raise KarmaError(f"hf:{kind} has no causal-LM, masked-LM or sequence-classification head in transformers")


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _hf(what: str, options: dict, device, seed: int) -> Source:
    from transformers import (  # heavy optional dependency: seconds to import, only hf: specs need it
        AutoModelForCausalLM,
        AutoModelForMaskedLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
    )
    from transformers.utils import logging

    logging.set_verbosity_error()
    sets = dict(options.get("set") or {})
    config = hf_config(what, sets)
    task = hf_task(config)
    if task == "seq2seq" and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = config.pad_token_id or 0  # T5's published configs: the pad id, 0
    auto = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM, "seq2seq": AutoModelForSeq2SeqLM,
            "classification": AutoModelForSequenceClassification}[task]
    positions = next((getattr(config, k) for k in ("max_position_embeddings", "n_positions", "n_ctx")
                      if isinstance(getattr(config, k, None), int)), MAX_DEFAULT_SEQ)
    seq = int(options.get("seq") or min(positions, MAX_DEFAULT_SEQ))
    if seq > positions:
        raise KarmaError(f"--seq {seq} is longer than hf:{config.model_type}'s {positions} positions "
                         f"(--set max_position_embeddings=... or n_positions=...)")
    vocab = int(config.vocab_size)
    labels = int(getattr(config, "num_labels", 2))
    def wrap(model: nn.Module) -> nn.Module:
        return Seq2SeqLogits(model) if task == "seq2seq" else LMLogits(model, task == "causal")

    module = _on(device, seed, lambda: wrap(auto.from_config(config)))

    def make_batch(batch, dev, s):
        if dev.type == "meta":
            ids = torch.empty((batch, seq), dtype=torch.long, device=dev)
            target = torch.empty((batch,) if task == "classification" else (batch, seq), dtype=torch.long,
                                 device=dev)
            return ids, target
        gen = torch.Generator().manual_seed(s)
        ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
        if task == "seq2seq":
            return ids[:, 1:].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)
        if task == "causal":
            return ids[:, :-1].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)
        inputs = ids[:, :-1].contiguous()
        if task == "classification":
            return inputs.to(dev), torch.randint(0, labels, (batch,), generator=gen).to(dev)
        masked = torch.rand((batch, seq), generator=gen) < 0.15
        masked[:, 0] = True  # at least one position per sequence carries a target
        return inputs.to(dev), torch.where(masked, ids[:, 1:], torch.full_like(inputs, -100)).to(dev)

    loss = F.cross_entropy if task == "classification" else lm_loss
    return Source(module, make_batch, loss, "adam",
                  {"model_type": config.model_type, "task": task, "seq": seq, "set": sets})


def _user(spec: str, options: dict, device, seed: int) -> Source:
    path, _, attr = spec.rpartition(":")
    if os.getcwd() not in sys.path:  # `karma` is a console script: make the user's modules importable
        sys.path.insert(0, os.getcwd())
    try:
        function = getattr(importlib.import_module(path), attr)
    except (ImportError, AttributeError) as err:
        raise KarmaError(f"model spec {spec!r}: {err}") from None
    sets = dict(options.get("set") or {})
    got: dict = {}

    def build():
        got["value"] = function(**sets)
        value = got["value"]
        return value[0] if isinstance(value, tuple) and value else value

    try:
        _on(device, seed, build)
    except TypeError as err:
        raise KarmaError(f"{spec}: {err}") from None
    value = got["value"]
    if not (isinstance(value, tuple) and len(value) in (3, 4) and isinstance(value[0], nn.Module)
            and callable(value[1]) and callable(value[2])):
        raise KarmaError(f"{spec} must return (module, make_batch, loss[, optimizer]) (docs/models.md: Your own model)")
    optimizer = value[3] if len(value) == 4 else "sgd"
    if optimizer not in ("sgd", "adam"):
        raise KarmaError(f"{spec}: optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    make = value[1]
    return Source(value[0], lambda batch, dev, s: make(batch, dev, s), value[2], optimizer, {"set": sets})


BUILDERS = {"torchvision": lambda spec, *a: _torchvision(spec.split(":", 1)[1], *a),
            "hf": lambda spec, *a: _hf(spec.split(":", 1)[1], *a),
            "user": _user}


def build_pair(spec: str, batch: int | None = None, device: str | torch.device = "cpu", seed: int = 0,
               options: dict | None = None, precision: str = "fp32") -> tuple[nn.Module, ChainModel]:
    """(the original module, its chain sharing its parameters) for a spec; see the module doc."""
    check_precision(precision)
    options = dict(options or {})
    kind = kind_of(spec)
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0):
        raise KarmaError(f"batch must be a positive integer, got {batch!r}")
    batch = batch or DEFAULT_BATCH[kind]
    device = torch.device(device)
    source = BUILDERS[kind](spec, options, device, seed)
    source.module.train()
    inputs, targets = source.make_batch(batch, device, seed)
    units, traced = auto_units(source.module, inputs, options.get("units"), spec,
                               loss=lambda out: source.loss(out, targets))
    to_precision(source.module, precision)
    make = source.make_batch
    chain = ChainModel(
        name=spec,
        size="custom",
        batch=batch,
        units=sequential(units),
        make_batch_fn=lambda _config, b, dev, s: make(b, dev, s),
        loss=source.loss,
        optimizer=source.optimizer,
        config={**source.config, "traced": traced, "units": len(units)},
        precision=precision,
    )
    return source.module, chain


def build(spec: str, batch: int | None = None, device: str | torch.device = "cpu", seed: int = 0,
          options: dict | None = None, precision: str = "fp32") -> ChainModel:
    return build_pair(spec, batch, device, seed, options, precision)[1]

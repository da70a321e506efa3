"""Plan: what to do with each block of a chain model's units (docs/design.md, Plan).

A plan splits the units into blocks of consecutive units and gives each block
a policy for the activations its units save for backward (KARMA, Sec. IV):

* ``keep``: they stay on the device until the block's backward;
* ``swap``: after the block's forward they are copied to the host (device->host
  link) and freed; they are prefetched back (host->device) before its backward;
* ``recompute``: they are dropped; only the block input (its checkpoint) is
  kept, on the device or swapped to the host (``checkpoint='host'``); the
  block's forward is re-run just before its backward.

Weights are ``resident`` (weights, gradients and optimizer state on the
device, optimizer step on the device) or ``streamed`` (uploaded per block
before its forward and again before its backward; gradients downloaded after
the block's backward; the optimizer step runs on the host, KARMA Sec. V).
``optimizer='host'`` with resident weights is ZeRO-Offload's layout (Ren et
al. 2021, Sec. 4): weights stay on the device, the optimizer state lives on the
host, each block's gradients go down after its backward, the host updates the
master weights and sends them back up. Streamed weights always update on the host.
``update_order`` says when the host updates a block: ``pipelined`` as soon as its gradients are down
(KARMA), or ``after-backward``, every block once the backward is done (ZeRO-Offload's step without its
delayed parameter update, Sec. 5.2).
``prefetch_depth`` is how many blocks ahead of the running backward block the
prefetches (activations, checkpoints, streamed weights) are issued. Depth 0 is
on demand: a block's copies back are issued when its own backward is due and it
waits for them (streamed weights go up just before each forward too), so no
block's copy back ever shares the device with another block's backward: the
reach of a chain whose single layers nearly fill the device (docs/reach.md).
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

from karma.core.errors import KarmaError, number, text
from karma.core.files import read_json

VERSION = 1
POLICIES = ("keep", "swap", "recompute")
PLACES = ("device", "host")
WEIGHTS = ("resident", "streamed")
OPTIMIZERS = ("device", "host")
#: when the host optimizer updates a block: as soon as its gradients are down, during the rest of the backward
#: (KARMA Sec. V), or every block after the whole backward (ZeRO-Offload without its delayed update, Sec. 5.2)
UPDATE_ORDERS = ("pipelined", "after-backward")


@dataclass(frozen=True)
class Block:
    """Units [start, stop) of the chain and what happens to their saved activations."""

    start: int
    stop: int
    policy: str = "keep"
    checkpoint: str = "device"

    @property
    def units(self) -> range:
        return range(self.start, self.stop)


@dataclass(frozen=True)
class Plan:
    """A complete plan for one (model, batch); JSON round-trips with a version field."""

    model: str
    batch: int
    units: int
    blocks: tuple[Block, ...]
    weights: str = "resident"
    prefetch_depth: int = 1
    optimizer: str = "device"
    update_order: str = "pipelined"
    strategy: str = "manual"
    predicted_time: float | None = None
    predicted_peak: float | None = None
    notes: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        validate(self)

    @property
    def host_optimizer(self) -> bool:
        """The optimizer step runs on the host (streamed weights, or resident ones with optimizer='host')."""
        return self.weights == "streamed" or self.optimizer == "host"

    def with_prediction(self, time: float, peak: float) -> Plan:
        return replace(self, predicted_time=time, predicted_peak=peak)

    def policies(self) -> str:
        """Compact form, one letter per unit (K keep, S swap, R recompute; lower case: checkpoint on host)."""
        letters = []
        for b in self.blocks:
            letter = {"keep": "K", "swap": "S", "recompute": "R"}[b.policy]
            if b.policy == "recompute" and b.checkpoint == "host":
                letter = "r"
            letters.append(letter * (b.stop - b.start))
        return "|".join(letters)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["blocks"] = [asdict(b) for b in self.blocks]
        data["version"] = VERSION
        return data

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, data, where: str = "plan") -> Plan:
        """A plan read from a file: unknown or missing fields and every bad value are one-line KarmaErrors."""
        if not isinstance(data, dict):
            raise KarmaError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("version") != VERSION:
            raise KarmaError(f"{where}: field 'version' must be {VERSION}, got {data.get('version')!r}")
        for key in ("model", "batch", "units", "blocks"):
            if key not in data:
                raise KarmaError(f"{where}: missing field '{key}'")
        if not isinstance(data["blocks"], list) or not data["blocks"]:
            raise KarmaError(f"{where}: field 'blocks' must be a non-empty list of block objects, "
                             f"got {data['blocks']!r:.60}")
        blocks = []
        for k, raw in enumerate(data["blocks"]):
            if not isinstance(raw, dict) or "start" not in raw or "stop" not in raw:
                raise KarmaError(f"{where}: field 'blocks[{k}]' needs 'start' and 'stop'")
            extra = set(raw) - {"start", "stop", "policy", "checkpoint"}
            if extra:
                raise KarmaError(f"{where}: unknown field 'blocks[{k}].{sorted(extra)[0]}'")
            blocks.append(Block(**raw))
        known = {"model", "batch", "units", "weights", "prefetch_depth", "optimizer", "update_order", "strategy",
                 "predicted_time", "predicted_peak", "notes"}
        extra = set(data) - known - {"blocks", "version"}
        if extra:
            raise KarmaError(f"{where}: unknown field '{sorted(extra)[0]}'")
        try:
            return cls(blocks=tuple(blocks), **{k: v for k, v in data.items() if k in known})
        except KarmaError as err:
            raise KarmaError(f"{where}: {err}") from None

    @classmethod
    def from_json(cls, path: str | Path) -> Plan:
        return cls.from_dict(read_json(path, "plan"), str(path))


def unchecked(**values) -> Plan:
    """A Plan built without `validate`: for plans the planner makes from states of its own space
    (karma/plan/space.py `to_plan`), which tile the units by construction; validating each of the
    tens of thousands it simulates would cost several percent of planning time."""
    plan = object.__new__(Plan)
    for f in fields(Plan):
        if f.name in values:
            value = values[f.name]
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        else:
            value = f.default
        object.__setattr__(plan, f.name, value)
    return plan


def _choice(value, name: str, valid: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in valid:
        raise KarmaError(f"field '{name}' must be one of {', '.join(valid)}, got {value!r}")


def validate(plan: Plan) -> None:
    """Blocks must tile units 0..units-1 in order; every field of its type and within its choices."""
    number(plan.units, "units", positive=True, integer=True)
    number(plan.batch, "batch", positive=True, integer=True)
    number(plan.prefetch_depth, "prefetch_depth", integer=True)
    text(plan.model, "model")
    text(plan.strategy, "strategy")
    number(plan.predicted_time, "predicted_time", optional=True)
    number(plan.predicted_peak, "predicted_peak", optional=True)
    if not isinstance(plan.notes, dict):
        raise KarmaError(f"field 'notes' must be an object, got {plan.notes!r:.60}")
    _choice(plan.weights, "weights", WEIGHTS)
    _choice(plan.optimizer, "optimizer", OPTIMIZERS)
    _choice(plan.update_order, "update_order", UPDATE_ORDERS)
    expected = 0
    for k, b in enumerate(plan.blocks):
        number(b.start, f"blocks[{k}].start", integer=True)
        number(b.stop, f"blocks[{k}].stop", positive=True, integer=True)
        if b.start != expected or b.stop <= b.start:
            raise KarmaError(f"field 'blocks[{k}]' covers units {b.start}..{b.stop - 1}; "
                             f"blocks must tile the units in order (expected start {expected})")
        _choice(b.policy, f"blocks[{k}].policy", POLICIES)
        _choice(b.checkpoint, f"blocks[{k}].checkpoint", PLACES)
        expected = b.stop
    if expected != plan.units:
        raise KarmaError(f"field 'blocks' covers {expected} units, the model has {plan.units}")


def from_policies(model: str, batch: int, labels: list[str], *, segments: list[int] | None = None,
                  checkpoint: str = "device", **kwargs) -> Plan:
    """A plan from one label per unit (keep/swap/recompute).

    Keep and swap units become one-unit blocks (finer swap blocks start their
    copies earlier); consecutive recompute units form one block unless
    `segments` lists unit indices where a new recompute block begins.
    """
    starts = set(segments or [])
    blocks: list[Block] = []
    for i, label in enumerate(labels):
        prev = blocks[-1] if blocks else None
        if label == "recompute" and prev and prev.policy == "recompute" and i not in starts:
            blocks[-1] = replace(prev, stop=i + 1)
        else:
            blocks.append(Block(i, i + 1, label, checkpoint if label == "recompute" else "device"))
    return Plan(model=model, batch=batch, units=len(labels), blocks=tuple(blocks), **kwargs)

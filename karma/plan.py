"""Plan: what to do with each block of a chain model's units (DESIGN.md, Plan).

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
``prefetch_depth`` is how many blocks ahead of the running backward block the
prefetches (activations, checkpoints, streamed weights) are issued.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from karma.errors import KarmaError, read_json

VERSION = 1
POLICIES = ("keep", "swap", "recompute")
PLACES = ("device", "host")
WEIGHTS = ("resident", "streamed")
OPTIMIZERS = ("device", "host")


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
        if not isinstance(data, dict):
            raise KarmaError(f"{where}: expected a JSON object")
        if data.get("version") != VERSION:
            raise KarmaError(f"{where}: field 'version' must be {VERSION}, got {data.get('version')!r}")
        for key in ("model", "batch", "units", "blocks"):
            if key not in data:
                raise KarmaError(f"{where}: missing field '{key}'")
        blocks = []
        for k, raw in enumerate(data["blocks"] if isinstance(data["blocks"], list) else [None]):
            if not isinstance(raw, dict) or "start" not in raw or "stop" not in raw:
                raise KarmaError(f"{where}: field 'blocks[{k}]' needs 'start' and 'stop'")
            extra = set(raw) - {"start", "stop", "policy", "checkpoint"}
            if extra:
                raise KarmaError(f"{where}: unknown field 'blocks[{k}].{sorted(extra)[0]}'")
            blocks.append(Block(**raw))
        known = {"model", "batch", "units", "weights", "prefetch_depth", "optimizer", "strategy", "predicted_time",
                 "predicted_peak", "notes"}
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


def _int(value, name: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise KarmaError(f"field '{name}' must be an integer >= {minimum}, got {value!r}")


def validate(plan: Plan) -> None:
    """Blocks must tile units 0..units-1 in order; every field within its choices."""
    _int(plan.units, "units", 1)
    _int(plan.batch, "batch", 1)
    _int(plan.prefetch_depth, "prefetch_depth", 1)
    if plan.weights not in WEIGHTS:
        raise KarmaError(f"field 'weights' must be one of {', '.join(WEIGHTS)}, got {plan.weights!r}")
    if plan.optimizer not in OPTIMIZERS:
        raise KarmaError(f"field 'optimizer' must be one of {', '.join(OPTIMIZERS)}, got {plan.optimizer!r}")
    expected = 0
    for k, b in enumerate(plan.blocks):
        _int(b.start, f"blocks[{k}].start", 0)
        _int(b.stop, f"blocks[{k}].stop", 1)
        if b.start != expected or b.stop <= b.start:
            raise KarmaError(f"field 'blocks[{k}]' covers units {b.start}..{b.stop - 1}; "
                             f"blocks must tile the units in order (expected start {expected})")
        if b.policy not in POLICIES:
            raise KarmaError(f"field 'blocks[{k}].policy' must be one of {', '.join(POLICIES)}, got {b.policy!r}")
        if b.checkpoint not in PLACES:
            raise KarmaError(f"field 'blocks[{k}].checkpoint' must be device or host, got {b.checkpoint!r}")
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

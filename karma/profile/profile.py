"""Profile: the per-unit costs of one ChainModel at one batch size.

Two sources fill the same type (docs/design.md): `analytic` (built on the meta
device, FLOPs and bytes counted, times from a Hardware's rates) and
`measured` (timed on the local device). The planner and the simulator read
only this type, so they never care where the numbers came from; every
profile says it in `source` and `device`.

Memory terms follow what PyTorch keeps alive during training:
weights, their gradients and the optimizer state (momentum: 1x the
weights, Adam: 2x), buffers (BatchNorm statistics), the tensors each unit
saves for backward, and the transients of a unit's backward (its output
gradient, its input gradient and the largest intermediate).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import MISSING, asdict, dataclass, fields, replace
from functools import cached_property
from pathlib import Path

from karma.core.errors import KarmaError, choose, number, text
from karma.core.files import read_json

VERSION = 3
#: bytes of optimizer state per byte of weights (SGD with momentum: the momentum
#: buffer; Adam: first and second moments, Kingma & Ba 2015).
OPTIMIZER_STATE_FACTOR = {"sgd": 1, "adam": 2}
#: the precisions a profile may be made in (docs/design.md, Precision)
DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class UnitProfile:
    """Costs of one unit. Times in seconds, sizes in bytes, work in FLOPs.

    `saved_input_bytes` / `saved_output_bytes` are the parts of `saved_bytes`
    that are the unit's input / output storage: when unit i saves its output
    and unit i+1 saves its input, it is one tensor and must be counted once.
    `workspace_bytes` is the unit's transient memory in its forward beyond what is
    counted apart: the peak of live tensors created during the forward that die
    before it ends; `backward_workspace_bytes` the same for its backward: what it
    creates besides its input and weight gradients (for the last unit, the
    gradient of its pre-loss output too), counted from its peak with its saved
    tensors and gradients taken out, so negative when autograd frees saved
    tensors before the backward's transients peak. Tracked per storage until
    its last tensor dies (karma/profile/trace.py). `tied_param_bytes`: weights this
    unit uses that an earlier unit owns (GPT's head and the embedding table);
    `shared_param_bytes`: this unit's own weights that a later unit uses too.

    A boundary may carry several tensors (the running activation and the skip of a unit finer
    than a residual block, models/layer_units.py); then input and output bytes count each
    storage once, and the gradients are as the chain makes them: `grad_alias_bytes` of the
    input's are not distinct storages (a join hands its output's gradient to both of its
    inputs: the gradient of its input boundary is one tensor), and `grad_reused_bytes` of them
    the backward does not make (the output's gradient handed on, a skip's gradient that is the
    output's). `boundary_out` names the output's storages, (id, bytes) each, ids unique within
    the profile, and `boundary_saved` the ids of boundary storages the unit saves: with them the
    simulator follows each boundary storage itself (karma/sim/boundary_memory.py), held while any
    holder needs it. Both are empty at block granularity, where a boundary is one tensor.

    A recompute is costed apart from the forward it repeats, in two cases: the unit last in its
    recompute segment (`recompute_extra_time`: torch.utils.checkpoint stops once the last saved
    tensor is made again, so a tail nobody saved, WRN's second convolution and residual add, is
    not recomputed and this may be negative) and the unit inside a segment, whose output the next
    unit saves (`recompute_inner_extra_time`). Both are 0 in an analytic profile (a recompute is
    the forward again, as the paper's model has it) and measured in a measured one, as one fraction
    of the forward for the whole chain (karma/profile/measured.py says why; docs/machine.md what it is
    on this CPU).
    `recompute_time(last)` is what a recompute is costed at; neither is below 0.

    `input_grad_last`: the backward makes its weight gradients first and its input gradient last
    (a convolution of a layer chain, models/lean_layers.py), so a saved input nothing else holds
    (a prefetched copy, a recomputed tensor) is freed before the input gradient is allocated; the
    simulator runs such a backward as two ops, weights then input (karma/sim/simulate.py).

    Measured times carry their spread (`forward_spread`, `backward_spread`: half the range of the timed
    repeats, 0 in an analytic profile) and may carry a second, independent estimate of the four times
    (`holdout`: forward, backward, recompute extra as the last unit of its segment and inside one), timed
    in the repeats interleaved with those of the first: a planner that picks the plan the first estimate
    calls fastest is drawn to units whose noise made them look cheap, so its choice is predicted with
    the second (`Profile.held_out`, karma/profile/measured.py).

    `recompute_remakes_output`: a recompute that ends with this unit makes its output again. The
    recompute stops once the last saved tensor is packed, and autograd packs a built-in operator's
    inputs before its kernel and its outputs after: a convolution or linear layer last in its segment
    stops before its kernel, a batch norm (its statistics) or a custom autograd Function (which packs
    once its forward has returned: models/lean_layers.py's convolution) after. From the trace's order
    of packs and kernels (karma/profile/trace.py); True when unknown (the output counted: conservative).
    """

    name: str
    forward_time: float
    backward_time: float
    forward_flops: float
    backward_flops: float
    forward_bytes: float
    backward_bytes: float
    saved_bytes: int
    saved_input_bytes: int
    saved_output_bytes: int
    input_bytes: int
    output_bytes: int
    param_bytes: int
    buffer_bytes: int
    optimizer_bytes: int
    workspace_bytes: int
    backward_workspace_bytes: int
    tied_param_bytes: int = 0
    shared_param_bytes: int = 0
    grad_alias_bytes: int = 0
    grad_reused_bytes: int = 0
    boundary_out: tuple[tuple[int, int], ...] = ()
    boundary_saved: tuple[int, ...] = ()
    recompute_extra_time: float = 0.0
    recompute_inner_extra_time: float = 0.0
    input_grad_last: bool = False
    recompute_remakes_output: bool = True
    forward_spread: float = 0.0
    backward_spread: float = 0.0
    holdout: tuple[float, ...] = ()

    def recompute_time(self, last: bool = True) -> float:
        """Seconds of recomputing the unit: the last of its segment, or inside one."""
        return self.forward_time + (self.recompute_extra_time if last else self.recompute_inner_extra_time)


#: fields of UnitProfile that may be negative (a backward that frees saved tensors before it peaks; a
#: recompute that skips a tail nobody saved)
SIGNED = {"backward_workspace_bytes", "recompute_extra_time", "recompute_inner_extra_time"}


def _unit(raw, k: int) -> UnitProfile:
    """Unit k of a profile file, each field checked: a string name, finite non-negative times,
    work and bytes (integers where UnitProfile says so)."""
    if not isinstance(raw, dict):
        raise KarmaError(f"unit {k} must be an object, got {raw!r:.60}")
    spec = {f.name: f for f in fields(UnitProfile)}
    unknown = set(raw) - set(spec)
    if unknown:
        raise KarmaError(f"unit {k} has unknown field '{sorted(unknown)[0]}'")
    values = {}
    for name, f in spec.items():
        if name not in raw:
            if f.default is MISSING:
                raise KarmaError(f"unit {k} lacks field '{name}'")
            continue
        where = f"units[{k}].{name}"
        if f.type == "str":
            values[name] = text(raw[name], where)
        elif f.type == "bool":
            if not isinstance(raw[name], bool):
                raise KarmaError(f"{where}: expected true or false, got {raw[name]!r}")
            values[name] = raw[name]
        elif name in ("boundary_out", "boundary_saved"):
            values[name] = _ids(raw[name], where, pairs=name == "boundary_out")
        elif name == "holdout":
            values[name] = _holdout(raw[name], where)
        else:
            values[name] = number(raw[name], where, integer=f.type == "int", signed=name in SIGNED)
    unit = UnitProfile(**values)
    for last in (True, False):
        if unit.recompute_time(last) < 0:
            raise KarmaError(f"unit {k}: a recompute ({'last in' if last else 'inside'} its segment) of "
                             f"{unit.recompute_time(last):g} s: its extra time may not exceed the forward's")
    return unit


def _holdout(raw, where: str) -> tuple[float, ...]:
    """A unit's second estimate of its times: empty, or [forward, backward, extra last, extra inside]."""
    if not isinstance(raw, (list, tuple)) or len(raw) not in (0, 4):
        raise KarmaError(f"{where} must be [] or [forward, backward, recompute extra last, inside], got {raw!r:.60}")
    return tuple(number(v, f"{where}[{j}]", signed=j >= 2) for j, v in enumerate(raw))


def _ids(raw, where: str, pairs: bool) -> tuple:
    """A list of storage ids (boundary_saved) or of [id, bytes] pairs (boundary_out), non-negative integers."""
    if not isinstance(raw, (list, tuple)):
        raise KarmaError(f"{where} must be a list, got {raw!r:.60}")
    if not pairs:
        return tuple(number(v, f"{where}[{j}]", integer=True) for j, v in enumerate(raw))
    out = []
    for j, pair in enumerate(raw):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise KarmaError(f"{where}[{j}] must be an [id, bytes] pair, got {pair!r:.60}")
        out.append(tuple(number(v, f"{where}[{j}]", integer=True) for v in pair))
    return tuple(out)


@dataclass(frozen=True)
class Profile:
    model: str
    size: str
    batch: int
    source: str
    device: str
    optimizer: str
    units: tuple[UnitProfile, ...]
    dtype: str = "float32"
    note: str = ""

    def __post_init__(self):
        if self.source not in ("analytic", "measured"):
            raise KarmaError(f"profile source must be 'analytic' or 'measured', got {self.source!r}")
        if not self.units:
            raise KarmaError("a profile needs at least one unit")

    @property
    def label(self) -> str:
        """Where the numbers come from, for every table row (docs/design.md)."""
        if self.source == "analytic":
            return f"simulated: analytic profile on {self.device}"
        return f"measured on {self.device}"

    def param_bytes(self) -> int:
        return sum(u.param_bytes for u in self.units)

    def weight_state_bytes(self) -> int:
        """Weights + gradients + optimizer state + buffers."""
        return sum(2 * u.param_bytes + u.optimizer_bytes + u.buffer_bytes for u in self.units)

    def shared_boundary_bytes(self, i: int) -> int:
        """Bytes of unit i's output counted in both unit i's and unit i+1's saved bytes."""
        if i + 1 >= len(self.units):
            return 0
        return min(self.units[i].saved_output_bytes, self.units[i + 1].saved_input_bytes)

    # Per-unit terms the simulator reads for every plan it simulates, computed once per profile
    # (the planner simulates tens of thousands of plans of one profile: karma/planner/search.py).

    @cached_property
    def shared_bytes(self) -> tuple[int, ...]:
        """`shared_boundary_bytes(i)` for every unit i (0 for the last)."""
        return tuple(self.shared_boundary_bytes(i) for i in range(len(self.units)))

    @cached_property
    def transients(self) -> tuple[float, ...]:
        """`backward_transient(units, i)` for every unit i."""
        return tuple(backward_transient(self.units, i) for i in range(len(self.units)))

    @cached_property
    def weight_prefix(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Prefix sums over the units of param, optimizer and tied-param bytes (a block's are a difference)."""
        sums = ([0], [0], [0])
        for u in self.units:
            for acc, value in zip(sums, (u.param_bytes, u.optimizer_bytes, u.tied_param_bytes), strict=True):
                acc.append(acc[-1] + value)
        return tuple(tuple(acc) for acc in sums)

    @cached_property
    def saved_floats(self) -> tuple[float, ...]:
        """Every unit's saved bytes, as the floats a plan's attribution starts from (karma/sim/block_bytes.py)."""
        return tuple(float(u.saved_bytes) for u in self.units)

    @cached_property
    def workspaces(self) -> tuple[float, ...]:
        """Every unit's forward workspace bytes, as floats."""
        return tuple(float(u.workspace_bytes) for u in self.units)

    @cached_property
    def storages(self) -> bool:
        """Whether boundaries carry several tensors, followed by storage id (layer granularity)."""
        return any(u.boundary_out for u in self.units)

    @cached_property
    def static_terms(self) -> tuple[float, int, int]:
        """(buffer bytes as a float; resident weights with the optimizer on the host, and on the device): the
        static bytes of every plan, by layout (karma/sim/block_bytes.py)."""
        units = self.units
        return (float(sum(u.buffer_bytes for u in units)), self.param_bytes(),
                sum(u.param_bytes + u.optimizer_bytes for u in units))

    @cached_property
    def weight_gradients(self) -> tuple[float, ...]:
        """Per unit, the weight-gradient bytes its backward makes (`GradientBytes`, called in backward order)."""
        made = GradientBytes()
        grads = [made(u) for u in reversed(self.units)]
        return tuple(reversed(grads))

    @cached_property
    def output_gradients(self) -> tuple[float, ...]:
        """`output_gradient_bytes(units, i)` for every unit i."""
        return tuple(output_gradient_bytes(self.units, i) for i in range(len(self.units)))

    def activation_bytes(self) -> int:
        """Bytes saved for backward by a whole forward pass, each storage once."""
        if self.storages:
            size = storage_bytes_of(self)
            saved = {sid for u in self.units for sid in u.boundary_saved}
            inner = sum(u.saved_bytes - sum(size[sid] for sid in u.boundary_saved) for u in self.units)
            return inner + sum(size[sid] for sid in saved)
        total = sum(u.saved_bytes for u in self.units)
        return total - sum(self.shared_boundary_bytes(i) for i in range(len(self.units) - 1))

    def unit_floor_bytes(self) -> int:
        """Device memory no plan of this chain can go below: the largest unit's backward alone (its saved
        tensors, its backward transient, its weights and their gradients) with every buffer. At block
        granularity that unit is a whole residual block: below this, only finer units train
        (docs/profiles.md, *Granularity*)."""
        return max(self.unit_floors())

    def unit_floors(self) -> list[int]:
        """Per unit, its backward alone with every buffer (`unit_floor_bytes` is the largest)."""
        buffers = sum(u.buffer_bytes for u in self.units)
        return [buffers + u.saved_bytes + backward_transient(self.units, i) + 2 * u.param_bytes
                for i, u in enumerate(self.units)]

    def in_core_peak_bytes(self) -> int:
        """Peak device memory of plain (all-resident) training.

        During unit i's forward: weights, optimizer state, buffers, the saved tensors
        of units 0..i and unit i's forward workspace. During unit i's backward:
        weights, optimizer state and buffers; the gradients made so far (units
        i..n-1, and tied weights those use); the saved tensors of units 0..i; unit
        i's backward transient (karma.profile.profile.backward_transient). The optimizer
        step needs weights + all gradients + state. The peak is the max of all.
        Chains without boundary storages only: with them (layer granularity) the peak follows each
        storage, as the simulator does (karma.sim.simulate.in_core_peak_bytes takes either).
        """
        if self.storages:
            raise ValueError("a profile with boundary storages: use karma.sim.simulate.in_core_peak_bytes")
        units = self.units
        static = sum(u.param_bytes + u.optimizer_bytes + u.buffer_bytes for u in units)
        step = static + sum(u.param_bytes for u in units)
        saved_prefix = []
        acc = 0
        for i, u in enumerate(units):
            acc += u.saved_bytes - (self.shared_boundary_bytes(i - 1) if i else 0)
            saved_prefix.append(acc)
        peak = max([step] + [static + saved_prefix[i] + u.workspace_bytes for i, u in enumerate(units)])
        grads = 0
        made = GradientBytes()
        for i in range(len(units) - 1, -1, -1):
            grads += made(units[i])
            live = static + grads + saved_prefix[i] + backward_transient(units, i)
            peak = max(peak, live)
        return peak

    def forward_time(self) -> float:
        return sum(u.forward_time for u in self.units)

    @property
    def has_holdout(self) -> bool:
        return all(u.holdout for u in self.units)

    def held_out(self) -> Profile:
        """The profile with every unit's times replaced by its held-out estimate (UnitProfile.holdout),
        to predict the plans chosen on this one; itself when it has none (an analytic profile has no noise
        to select on)."""
        if not self.has_holdout:
            return self
        units = tuple(replace(u, forward_time=u.holdout[0], backward_time=u.holdout[1],
                              recompute_extra_time=max(u.holdout[2], -u.holdout[0]),
                              recompute_inner_extra_time=max(u.holdout[3], -u.holdout[0]), holdout=())
                      for u in self.units)
        return replace(self, units=units, note=f"{self.note}; the held-out estimate".lstrip("; "))

    def backward_time(self) -> float:
        return sum(u.backward_time for u in self.units)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["version"] = VERSION
        return data

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    def to_csv(self) -> str:
        out = io.StringIO()
        names = [f.name for f in fields(UnitProfile)]
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        for unit in self.units:
            writer.writerow(asdict(unit))
        return out.getvalue()

    @classmethod
    def from_dict(cls, data: dict, where: str = "profile") -> Profile:
        """A profile read from a file: every field checked for type and range (one-line KarmaError)."""
        if not isinstance(data, dict):
            raise KarmaError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("version") != VERSION:
            raise KarmaError(f"{where}: field 'version' must be {VERSION}, got {data.get('version')!r}"
                             + (" (written by an older version: profile the model again)"
                                if isinstance(data.get("version"), int) and data["version"] < VERSION else ""))
        try:
            return cls._checked(data)
        except KarmaError as err:
            raise KarmaError(f"{where}: {err}") from None

    @classmethod
    def _checked(cls, data: dict) -> Profile:
        top = {f.name for f in fields(cls)}
        unknown = set(data) - top - {"version"}
        if unknown:
            raise KarmaError(f"unknown field '{sorted(unknown)[0]}'")
        missing = top - {"dtype", "note"} - set(data)
        if missing:
            raise KarmaError(f"missing field '{sorted(missing)[0]}'")
        if not isinstance(data["units"], list) or not data["units"]:
            raise KarmaError(f"field 'units' must be a non-empty list of unit objects, got {data['units']!r:.60}")
        choose("optimizer", data["optimizer"], OPTIMIZER_STATE_FACTOR)
        choose("dtype", data.get("dtype", "float32"), DTYPES)
        number(data["batch"], "batch", positive=True, integer=True)
        for key in top - {"units", "optimizer", "batch", "dtype"}:
            if key in data:
                text(data[key], key)
        units = tuple(_unit(raw, k) for k, raw in enumerate(data["units"]))
        if not any(u.forward_time + u.backward_time for u in units):
            raise KarmaError("every unit's forward and backward time is 0: nothing to plan or simulate")
        return cls(units=units, **{k: data[k] for k in top - {"units"} if k in data})

    @classmethod
    def from_json(cls, path: str | Path) -> Profile:
        return cls.from_dict(read_json(path, "profile"), str(path))


def storage_bytes_of(profile: Profile) -> dict[int, int]:
    """Bytes of every boundary storage of the profile, by id."""
    return {sid: n for u in profile.units for sid, n in u.boundary_out}


# What a unit's backward makes, in bytes: weight gradients (tied weights credited once), the gradient of
# its output and of its input, and its backward transient. The simulator, the bound, the recompute program
# and the coarsening read these terms of the units.


class GradientBytes:
    """Weight-gradient bytes a unit's backward creates, in backward order: its own weights' and
    those of tied weights it uses (owned by an earlier unit). The owner's backward then finds the
    gradient of its shared weights made already and accumulates into it (GPT's embedding, whose
    table the head uses: found crediting the unit after the head instead, a layer, on the runtime's
    Megatron peak)."""

    def __init__(self):
        self.made_early = 0

    def __call__(self, u) -> float:
        credit = min(self.made_early, u.shared_param_bytes)
        self.made_early += u.tied_param_bytes - credit
        return u.param_bytes + u.tied_param_bytes - credit


def output_gradient_bytes(units, i: int) -> float:
    """Bytes of the gradient of unit i's output, as unit i+1's backward makes it (none for the last
    unit, which ends in the scalar loss)."""
    return 0 if i == len(units) - 1 else units[i].output_bytes - units[i + 1].grad_alias_bytes


def backward_transient(units, i: int) -> float:
    """Bytes unit i's backward holds besides saved tensors and weight gradients: its output's
    gradient, the input gradients it makes (the first unit's input is the batch, which needs none)
    and its backward workspace."""
    return output_gradient_bytes(units, i) + input_gradient_bytes(units, i) + units[i].backward_workspace_bytes


def input_gradient_bytes(units, i: int) -> float:
    """Bytes of the input gradients unit i's backward makes (none for the first unit: the batch)."""
    return 0 if i == 0 else units[i].input_bytes - units[i].grad_reused_bytes

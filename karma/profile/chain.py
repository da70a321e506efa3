"""The loop both profile sources share: walk the chain unit by unit.

Each unit is traced (karma/profile/trace.py) on the input the previous unit
produced, then timed by the source's `timer`; identical units (same structure,
same input shape) are traced and timed once, so units of one shape share one time
(a measured profile's noise cannot make one of them look cheaper than its twins). Parameters shared between units
(GPT's tied embedding) are owned by the first unit that uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from karma.core.precision import optimizer_bytes
from karma.core.precision_bytes import PROFILE_DTYPE, mixed
from karma.core.storages import storage_bytes, storage_key
from karma.profile.profile import Profile, UnitProfile
from karma.profile.trace import UnitTrace, next_input, trace_unit, unit_signature
from models.boundary import rebuild, tensors
from models.chain import ChainModel


@dataclass(frozen=True)
class UnitTimes:
    """What a profile source's timer gives for one unit (seconds; UnitProfile says what each means)."""

    forward: float
    backward: float
    recompute_extra: float = 0.0  # as the last unit of its recompute segment
    recompute_inner_extra: float = 0.0  # inside one
    forward_spread: float = 0.0
    backward_spread: float = 0.0
    holdout: tuple[float, ...] = ()  # a second, independent estimate of the four times above
    # per timed repeat (forward, backward, extra last, extra inside): what a source that pools the recompute
    # premium over the chain reads (karma/profile/measured.py); empty where the times are not measured
    samples: tuple[tuple[float, float, float, float], ...] = ()


#: (unit, input, loss or None, target or None, trace) -> its times
Timer = Callable[[torch.nn.Module, torch.Tensor, Callable | None, object, UnitTrace], UnitTimes]


def weight_bytes(unit: torch.nn.Module, seen: set[int], optimizer: str = "sgd") -> tuple[int, int, int, int]:
    """(parameter bytes not already owned by an earlier unit, buffer bytes, bytes of the
    parameters it uses that an earlier unit owns: tied weights, and the optimizer's bytes for the
    owned ones: its fp32 state, plus fp32 masters of 16-bit weights, karma.core.precision)."""
    params = tied = 0
    owned = []
    for p in unit.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel() * p.element_size()
            owned.append(p)
        else:
            tied += p.numel() * p.element_size()
    buffers = sum(b.numel() * b.element_size() for b in unit.buffers())
    return params, buffers, tied, optimizer_bytes(owned, optimizer)


def rebuilt_output(trace: UnitTrace, x):
    """A unit's output boundary when its trace comes from an identical unit earlier in the chain:
    what it hands on unchanged is this unit's own input tensor (the skip riding along is this block's,
    not the earlier one's), what it makes is a new storage with the trace's values (free on meta)."""
    ins, outs = tensors(x), tensors(trace.output)
    made = [ins[j] if j is not None else torch.empty_like(t) if t.device.type == "meta" else t.clone()
            for j, t in zip(trace.out_from_in, outs, strict=True)]
    return rebuild(trace.output, made)


class BoundaryIds:
    """Ids of the storages that cross unit boundaries, unique within the profile, so that the simulator can
    follow a storage several boundaries carry (a skip) as one (karma/sim/boundary_memory.py)."""

    def __init__(self):
        self.ids: dict[int, int] = {}
        self.several = False
        self._alive: list = []  # a freed storage's key may be reused: keep each one named alive (free on meta)

    def _id(self, t) -> int:
        key = storage_key(t)
        if key not in self.ids:
            self.ids[key] = len(self.ids)
            self._alive.append(t)
        return self.ids[key]

    def unit(self, x, output, trace: UnitTrace, first: bool, last: bool) -> tuple[tuple, tuple]:
        """(boundary_out, boundary_saved) of one unit: its output's storages (id, bytes) and the ids of
        the boundary storages it saves (its input, unless it is the batch, and its new outputs)."""
        self.several |= isinstance(x, tuple) or isinstance(output, tuple)
        ins, outs = tensors(x), tensors(output)
        saved = [] if first else [self._id(ins[j]) for j in trace.saved_in]
        if last:
            return (), tuple(dict.fromkeys(saved))
        saved += [self._id(outs[j]) for j in trace.saved_out]
        out = {self._id(t): storage_bytes(t) for t in outs}
        return tuple(out.items()), tuple(dict.fromkeys(saved))


def profile_chain(model: ChainModel, device: torch.device, timer: Timer, source: str, label: str,
                  note: str, progress=None, policy: str | None = None,
                  finish: Callable[[list[UnitTimes]], list[UnitTimes]] | None = None) -> Profile:
    """Trace and time every unit of `model` on `device`; `progress(i, n, name)` after each; `policy`:
    the autocast op lists of a mixed-precision trace on meta (karma.core.precision.MetaAutocast);
    `finish` turns every unit's times (one per unit, in chain order, shared by units of one shape) into the
    times the profile keeps, where an estimate needs the whole chain (the measured recompute premium)."""
    x, y = model.make_batch(device=device)
    seen: set[int] = set()
    cache: dict[tuple, tuple[UnitTrace, UnitTimes]] = {}
    units = []
    occurrences: list[UnitTimes] = []
    owner: dict[int, int] = {}  # weight -> the first unit using it
    shared = [0] * len(model.units)
    named = list(model.units.named_children())
    ids = BoundaryIds()
    for i, (name, unit) in enumerate(named):
        last = i == len(named) - 1
        unit.train()
        loss, target = (model.loss, y) if last else (None, None)
        key = unit_signature(unit, x, last)
        fresh = key not in cache
        if fresh:
            trace = trace_unit(unit, x, loss, target, model.precision, policy)
            cache[key] = (trace, timer(unit, x, loss, target, trace))
        trace, times = cache[key]
        occurrences.append(times)
        output = trace.output if fresh else rebuilt_output(trace, x)
        boundary_out, boundary_saved = ids.unit(x, output, trace, first=i == 0, last=last)
        params, buffers, tied, state = weight_bytes(unit, seen, model.optimizer)
        for p in unit.parameters():
            j = owner.setdefault(id(p), i)
            if j != i:
                shared[j] += p.numel() * p.element_size()
        units.append(UnitProfile(
            name=name,
            forward_time=times.forward,
            backward_time=times.backward,
            recompute_extra_time=times.recompute_extra,
            recompute_inner_extra_time=times.recompute_inner_extra,
            forward_spread=times.forward_spread,
            backward_spread=times.backward_spread,
            holdout=times.holdout,
            input_grad_last=getattr(unit, "input_grad_last", False) and not mixed(model.precision),
            recompute_remakes_output=trace.ops_before_last_pack == len(trace.forward_ops),
            forward_flops=sum(op.flops for op in trace.forward_ops),
            backward_flops=sum(op.flops for op in trace.backward_ops),
            forward_bytes=sum(op.bytes for op in trace.forward_ops),
            backward_bytes=sum(op.bytes for op in trace.backward_ops),
            saved_bytes=trace.saved_bytes,
            saved_input_bytes=trace.saved_input_bytes,
            saved_output_bytes=trace.saved_output_bytes,
            input_bytes=trace.input_bytes,
            output_bytes=trace.output_bytes,
            param_bytes=params,
            buffer_bytes=buffers,
            optimizer_bytes=state,
            workspace_bytes=trace.workspace_bytes,
            backward_workspace_bytes=trace.backward_workspace_bytes,
            tied_param_bytes=tied,
            grad_alias_bytes=trace.grad_alias_bytes,
            grad_reused_bytes=trace.grad_reused_bytes,
            boundary_out=boundary_out,
            boundary_saved=boundary_saved,
        ))
        if progress:
            progress(i, len(named), name)
        x = next_input(output)
    for p in model.units.parameters():
        p.grad = None
    units = [replace(u, shared_param_bytes=shared[i]) for i, u in enumerate(units)]
    if finish is not None:
        units = [replace(u, recompute_extra_time=t.recompute_extra, recompute_inner_extra_time=t.recompute_inner_extra,
                         holdout=t.holdout) for u, t in zip(units, finish(occurrences), strict=True)]
    if not ids.several:  # every boundary one tensor: the block-level memory model needs no storage ids
        units = [replace(u, boundary_out=(), boundary_saved=()) for u in units]
    return Profile(model=model.name, size=model.size, batch=model.batch, source=source, device=label,
                   optimizer=model.optimizer, units=tuple(units), note=note,
                   dtype=PROFILE_DTYPE[model.precision])

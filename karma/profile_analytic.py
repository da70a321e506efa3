"""Analytic profile: count on the meta device, time with a Hardware's rates.

Each aten operator of a unit's forward and backward costs (Williams et al.,
"Roofline", CACM 2009, plus a launch overhead per kernel)

    t_op = kernel_launch + max(flops / sustained_flops, bytes_moved / memory_bw)

so convolutions and GEMMs are compute bound and BatchNorm, ReLU, softmax and
LayerNorm (0 FLOPs in the flop counter, FACTS.md) are memory bound. Nothing
is allocated, so every model of the zoo, Turing-NLG 17B included, profiles
at paper size in seconds; identical units (same structure, same input shape)
are traced once.
"""

from __future__ import annotations

import torch

from karma.hardware import Hardware
from karma.profile import OPTIMIZER_STATE_FACTOR, Profile, UnitProfile
from karma.unit_trace import OpCost, next_input, trace_unit, unit_signature
from models.chain import ChainModel


def roofline_time(ops: list[OpCost], hw: Hardware) -> float:
    return sum(hw.kernel_launch + max(op.flops / hw.flops, op.bytes / hw.memory_bw) for op in ops)


def weight_bytes(unit: torch.nn.Module, seen: set[int]) -> tuple[int, int]:
    """(parameter bytes, buffer bytes) not already owned by an earlier unit (tied weights count once)."""
    params = 0
    for p in unit.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel() * p.element_size()
    buffers = sum(b.numel() * b.element_size() for b in unit.buffers())
    return params, buffers


def analytic_profile(model: ChainModel, hw: Hardware, progress=None) -> Profile:
    """Profile `model` (built on the meta device) for `hw`; `progress(i, n, name)` is called per unit."""
    if next(model.units.parameters()).device.type != "meta":
        raise ValueError("analytic_profile expects a model built on the meta device")
    x, y = model.make_batch(device="meta")
    seen: set[int] = set()
    cache = {}
    units = []
    named = list(model.units.named_children())
    for i, (name, unit) in enumerate(named):
        last = i == len(named) - 1
        unit.train()
        key = unit_signature(unit, x, last)
        if key not in cache:
            cache[key] = trace_unit(unit, x, model.loss if last else None, y if last else None)
        trace = cache[key]
        params, buffers = weight_bytes(unit, seen)
        units.append(UnitProfile(
            name=name,
            forward_time=roofline_time(trace.forward_ops, hw),
            backward_time=roofline_time(trace.backward_ops, hw),
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
            optimizer_bytes=OPTIMIZER_STATE_FACTOR[model.optimizer] * params,
            workspace_bytes=trace.workspace_bytes,
        ))
        if progress:
            progress(i, len(named), name)
        x = next_input(trace.output)
    return Profile(
        model=model.name, size=model.size, batch=model.batch, source="analytic", device=hw.name,
        optimizer=model.optimizer, units=tuple(units),
        note="roofline per aten op: launch + max(FLOPs/sustained rate, bytes/memory bandwidth)",
    )

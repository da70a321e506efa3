"""Run one unit forward and backward and record what it costs.

Shared by both profile sources: on the meta device it counts (no memory is
allocated, so a 17B-parameter layer is free to trace); on a real device the
same counts hold (FACTS.md: meta numbers equal a real CPU run exactly) and
the caller times the passes.

* FLOPs: torch.utils.flop_counter's formulas (2 FLOPs per multiply-add),
  applied per aten operator by our own dispatch mode, so the same pass
  also yields per-operator memory traffic for the roofline.
* Memory traffic: bytes of every tensor an operator reads plus those it
  writes; views move nothing.
* Saved bytes: a saved_tensors_hooks pack hook, each storage counted once,
  parameters skipped (FACTS.md: otherwise ResNet is overcounted 1.5x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

#: Size queries that dispatch modes see but that are not kernels.
_SKIP = {
    torch.ops.aten.size.default, torch.ops.aten.stride.default, torch.ops.aten.numel.default,
    torch.ops.aten.dim.default, torch.ops.aten.is_contiguous.default, torch.ops.aten.storage_offset.default,
    torch.ops.aten.sym_size.default, torch.ops.aten.sym_stride.default, torch.ops.aten.sym_numel.default,
    torch.ops.prim.layout.default,
}


def storage_key(t: torch.Tensor) -> int:
    """Identity of the memory behind a tensor, valid on meta too (no data_ptr there)."""
    return t.untyped_storage()._cdata


def storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


@dataclass
class OpCost:
    """One aten operator: FLOPs and bytes moved, for the per-operator roofline."""

    name: str
    flops: float
    bytes: float
    out_bytes: int


@dataclass
class OpRecorder(TorchDispatchMode):
    ops: list[OpCost] = field(default_factory=list)

    def __post_init__(self):
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SKIP:
            return func(*args, **kwargs)
        packet = func._overloadpacket
        if packet not in flop_registry:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        if func.is_view:
            return out
        flops = flop_registry[packet](*args, **kwargs, out_val=out) if packet in flop_registry else 0
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in ins + outs)
        out_bytes = max((storage_bytes(t) for t in outs), default=0)
        self.ops.append(OpCost(str(packet), float(flops), float(moved), out_bytes))
        return out


@dataclass
class UnitTrace:
    """What one forward+backward of a unit did (before any timing)."""

    forward_ops: list[OpCost]
    backward_ops: list[OpCost]
    saved_bytes: int
    saved_input_bytes: int
    saved_output_bytes: int
    input_bytes: int
    output_bytes: int
    output: torch.Tensor

    @property
    def workspace_bytes(self) -> int:
        return max((op.out_bytes for op in self.forward_ops + self.backward_ops), default=0)


def run_forward(unit: torch.nn.Module, x: torch.Tensor, loss: Callable | None, target) -> torch.Tensor:
    out = unit(x)
    return loss(out, target) if loss is not None else out


def run_backward(result: torch.Tensor, output: torch.Tensor) -> None:
    """Backward from the loss (a scalar) or, for an inner unit, from its output with unit gradient."""
    if result.dim() == 0:
        result.backward()
    else:
        output.backward(torch.ones_like(output))


def trace_unit(unit: torch.nn.Module, x: torch.Tensor, loss: Callable | None = None, target=None) -> UnitTrace:
    """Forward (with `loss` for the last unit) and backward of one unit, counted."""
    params = {storage_key(p) for p in unit.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        key = storage_key(t)
        if key not in params:
            saved[key] = storage_bytes(t)
        return t

    captured: dict[str, torch.Tensor] = {}

    def forward_hook(_module, _inputs, output):
        captured["out"] = output

    handle = unit.register_forward_hook(forward_hook)
    fwd = OpRecorder()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), fwd:
            result = run_forward(unit, x, loss, target)
    finally:
        handle.remove()
    output = captured["out"]
    bwd = OpRecorder()
    with bwd:
        run_backward(result, output)
    in_key, out_key = storage_key(x), storage_key(output)
    return UnitTrace(
        forward_ops=fwd.ops,
        backward_ops=bwd.ops,
        saved_bytes=sum(saved.values()),
        saved_input_bytes=saved.get(in_key, 0),
        saved_output_bytes=saved.get(out_key, 0) if out_key != in_key else 0,
        input_bytes=storage_bytes(x),
        output_bytes=storage_bytes(output),
        output=output.detach(),
    )


def unit_signature(unit: torch.nn.Module, x: torch.Tensor, last: bool) -> tuple:
    """Units with the same structure and input cost the same: profile once."""
    return (type(unit).__name__, repr(unit), tuple(x.shape), x.dtype, x.requires_grad, last)


def next_input(output: torch.Tensor) -> torch.Tensor:
    """The next unit's input: the output, detached, carrying grad if floating point."""
    nxt = output.detach()
    if nxt.is_floating_point():
        nxt.requires_grad_(True)
    return nxt

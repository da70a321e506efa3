"""Run one unit forward and backward and record what it costs.

Shared by both profile sources: on the meta device it counts (no memory is
allocated, so a 17B-parameter layer is free to trace); on a real device the
same counts hold (docs/machine.md: meta numbers equal a real CPU run exactly) and
the caller times the passes.

* FLOPs: torch.utils.flop_counter's formulas (2 FLOPs per multiply-add),
  applied per aten operator by our own dispatch mode, so the same pass
  also yields per-operator memory traffic for the roofline.
* Memory traffic: bytes of every tensor an operator reads plus those it
  writes; views, aliases (``_unsafe_view``) and allocation-only operators
  (``empty_like``) move nothing and launch no kernel, so they are not
  recorded as operators (their storages are still followed for memory).
* Dropout as CUDA runs it: ``F.dropout`` in training on a CUDA tensor is one
  fused kernel (``native_dropout``: read the input, write the output and a
  1-byte mask; its backward reads the gradient and the mask, writes one
  gradient), where the meta and CPU paths decompose it into
  ``empty_like``/``bernoulli_``/``div_``/``mul``. The pass records the fused
  kernel's traffic in their place (`FusedDropout`); what is saved for
  backward stays what the traced path saves.
* GEMM shape: the narrowest of a GEMM's or convolution's (m, n, k), for the
  roofline's tensor-core efficiency (karma/profile/analytic.py).
* Saved bytes: a saved_tensors_hooks pack hook, each storage counted once,
  parameters skipped (docs/machine.md: otherwise ResNet is overcounted 1.5x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import get_gradient_edge
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from karma.core.aten import NO_KERNEL, SIZE_QUERIES
from karma.core.precision import autocast
from karma.core.storages import StorageLifetimes, accumulates_gradients, storage_bytes, storage_key
from models.boundary import boundary_gradients, detached, nbytes, storages, tensors

#: GEMM-like operators: (m, n, k) of the matrix product each runs, for `narrowest`
GEMMS = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution", "aten.convolution_backward"}


@dataclass
class OpCost:
    """One aten operator: FLOPs and bytes moved, for the per-operator roofline."""

    name: str
    flops: float
    bytes: float
    dtype: str = "float32"  # the type its floating-point inputs compute in (16-bit GEMMs use tensor cores)
    narrow: float = 0.0  # a GEMM's or convolution's narrowest dimension (m, n or k); 0 for other operators


def narrowest(name: str, args) -> float:
    """The narrowest of (m, n, k) of the matrix product a GEMM-like operator runs: mm/addmm/bmm from
    their operands; a convolution as the implicit GEMM (batch x output pixels) x C_out x (C_in/groups
    x kernel), its backward from the same weight (data and weight gradients run the same dims)."""
    try:
        if name in ("aten.mm", "aten.bmm"):
            a, b = args[0], args[1]
        elif name in ("aten.addmm", "aten.baddbmm"):
            a, b = args[1], args[2]
        elif name == "aten.convolution":
            x, w = args[0], args[1]
            return float(min(w.shape[0], w[0].numel(), x.shape[0] * max(1, x[0, 0].numel())))
        elif name == "aten.convolution_backward":
            x, w = args[1], args[2]
            return float(min(w.shape[0], w[0].numel(), x.shape[0] * max(1, x[0, 0].numel())))
        else:
            return 0.0
        return float(min(a.shape[-2], a.shape[-1], b.shape[-1]))
    except (AttributeError, IndexError, TypeError):
        return 0.0


@dataclass
class OpRecorder(TorchDispatchMode):
    """Per-operator costs, and the peak live bytes of the storages the operators create
    (plus `base()`, bytes created elsewhere that are still alive, when given)."""

    ops: list[OpCost] = field(default_factory=list)
    live: int = 0
    peak: int = 0
    base: Callable[[], int] | None = None
    fusing: bool = False  # inside a fused kernel (FusedDropout): its parts are not recorded one by one
    decomposing: int = 0  # inside an operator run by its parts: their costs count, their memory does not

    def __post_init__(self):
        super().__init__()
        self._lifetimes = StorageLifetimes(self._allocated, self._freed)

    def _allocated(self, _key: int, nbytes: int) -> None:
        self.live += nbytes
        self.peak = max(self.peak, self.live + (self.base() if self.base else 0))

    def _freed(self, _key: int, nbytes: int) -> None:
        self.live -= nbytes

    def __exit__(self, *exc):
        self._lifetimes.settle()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._lifetimes.settle()
        if func in SIZE_QUERIES:
            return func(*args, **kwargs)
        packet = func._overloadpacket
        if packet not in flop_registry:
            # costed by its parts (their FLOPs and bytes), but on a device it is one kernel (silu_backward,
            # the norms' backwards): the parts' intermediates are never allocated, only its outputs are
            self.decomposing += 1
            try:
                with self:
                    decomposed = func.decompose(*args, **kwargs)
            finally:
                self.decomposing -= 1
            if decomposed is not NotImplemented and not self.decomposing:
                self._lifetimes.settle()
                given = {storage_key(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
                defer = accumulates_gradients(func, args, kwargs)
                for t in tree_flatten(decomposed)[0]:
                    if isinstance(t, torch.Tensor) and storage_key(t) not in given:
                        self._lifetimes.track(t, new_storage=not func.is_view, defer=defer)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        defer = accumulates_gradients(func, args, kwargs)
        for t in outs if not self.decomposing else ():
            self._lifetimes.track(t, new_storage=not func.is_view, defer=defer)
        name = str(packet)
        if func.is_view or name in NO_KERNEL or self.fusing:
            return out
        flops = flop_registry[packet](*args, **kwargs, out_val=out) if packet in flop_registry else 0
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in ins + outs)
        floats = [t.dtype for t in ins if t.is_floating_point()]
        dtype = str(floats[0]).removeprefix("torch.") if floats else "float32"
        narrow = narrowest(name, args) if name in GEMMS else 0.0
        self.ops.append(OpCost(name, float(flops), float(moved), dtype, narrow))
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
    output: object  # the unit's output, detached: a tensor or a tuple of them (models/boundary.py)
    workspace_bytes: int = 0
    backward_workspace_bytes: int = 0
    # with a boundary of several tensors (models/boundary.py): see karma.profile.profile.UnitProfile
    grad_alias_bytes: int = 0
    grad_reused_bytes: int = 0
    saved_in: tuple[int, ...] = ()  # positions of the input tensors the unit saves
    saved_out: tuple[int, ...] = ()  # positions of the (new) output tensors it saves
    out_from_in: tuple[int | None, ...] = ()  # per output tensor: the input position it hands on, or None
    # forward operators run before its last saved tensor was packed (None: it saves nothing); a recompute
    # that ends with this unit stops there (torch.utils.checkpoint's early stop)
    ops_before_last_pack: int | None = None


def run_forward(unit: torch.nn.Module, x, loss: Callable | None, target, precision: str = "fp32"):
    """The unit's forward (and the loss, for the last unit), under autocast in mixed precision;
    `x` is one tensor or a tuple of them (a boundary, models/boundary.py)."""
    with autocast(tensors(x)[0].device, precision):
        out = unit(x)
        return loss(out, target) if loss is not None else out


def output_gradient(result: torch.Tensor) -> torch.Tensor | None:
    """The gradient a unit's backward starts from: none for the loss, ones for an inner unit's output."""
    return None if result.dim() == 0 else torch.ones_like(result)


def backward_roots(result) -> list[torch.Tensor]:
    """The output tensors a unit's backward starts from: those its own operations made (an input
    handed on unchanged, a skip riding along, has no gradient function of this unit)."""
    return [t for t in tensors(result) if t.grad_fn is not None]


def run_backward(result, grad=None) -> None:
    """Backward through a unit's output (one tensor or a boundary tuple), from ones (or `grad`)."""
    roots = backward_roots(result)
    if grad is not None:
        torch.autograd.backward(roots, [grad] * len(roots) if isinstance(grad, torch.Tensor) else grad)
    else:
        torch.autograd.backward(roots, [output_gradient(t) for t in roots])


def trace_unit(unit: torch.nn.Module, x, loss: Callable | None = None, target=None,
               precision: str = "fp32", policy: str | None = None) -> UnitTrace:
    """Forward (with `loss` for the last unit) and backward of one unit, counted. In mixed
    precision the forward runs under autocast (on meta its emulation with `policy`'s op lists,
    karma.core.precision.MetaAutocast), so saved tensors are 2-byte where autocast makes them so.
    `x` is the unit's input boundary: one tensor or a tuple (models/boundary.py); its bytes,
    and the output's, count each storage once, and the gradients of its inputs are measured as
    the chain makes them (models.boundary.boundary_gradients)."""
    params = {storage_key(p) for p in unit.parameters()}
    saved: dict[int, int] = {}
    packed_after: list[int] = []  # per pack, weights too: how many operators had run

    def pack(t):
        key = storage_key(t)
        if key not in params:
            saved[key] = storage_bytes(t)
        packed_after.append(len(fwd.ops))
        return t

    captured: dict[str, torch.Tensor] = {}

    def forward_hook(_module, _inputs, output):
        captured["out"] = output

    handle = unit.register_forward_hook(forward_hook)
    fwd = OpRecorder()

    dropout = FusedDropout(fwd)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), fwd, \
                autocast(tensors(x)[0].device, precision, policy), dropout:
            result = run_forward(unit, x, loss, target)
    finally:
        handle.remove()
    output = captured.pop("out")
    roots = backward_roots(result)
    grads = [torch.ones((), dtype=t.dtype, device=t.device) if output_gradient(t) is None else output_gradient(t)
             for t in roots]
    in_keys, out_keys = storages(x), storages(output)
    output_bytes = nbytes(output)
    multi = isinstance(x, tuple) or isinstance(output, tuple)
    ins, outs = tensors(x), tensors(output)
    positions = {storage_key(t): j for j, t in enumerate(ins)}
    out_from_in = tuple(positions.get(storage_key(t)) for t in outs)
    saved_in = tuple(j for j, t in enumerate(ins) if storage_key(t) in saved)
    saved_out = tuple(j for j, t in enumerate(outs) if storage_key(t) in saved and out_from_in[j] is None)
    del outs  # the output must not outlive the forward here (below: what survives it is what was saved)
    # new tensors on the same storages: not counted, do not keep the output counted
    nxt = tuple(t.detach() for t in output) if isinstance(output, tuple) else output.detach()
    # The backward starts from the output's gradient edge, not the output: in a run nobody but
    # autograd holds a unit's output during its backward, so an output the unit saved itself
    # (ResNet's last ReLU) is freed as soon as that op's backward is done. Holding it here would
    # make every such unit's backward workspace one output too large (one output per stage of
    # ResNet-50 under SuperNeurons' plan).
    edges = [get_gradient_edge(t) for t in roots]
    del output, result, roots
    # What the memory model counts of this unit between its forward and backward: its saved
    # tensors (an output nobody saved is gone; the next unit saves it, or counts it in its workspace)
    saved_survivors = fwd.live
    # The backward's peak counts what is left of the forward's tensors too: autograd frees saved
    # tensors as it goes, so the transients may peak when part of the saved bytes are gone.
    bwd = OpRecorder(base=lambda: fwd.live)
    dropout.recorder = bwd
    alias = reused = 0
    with bwd:
        if multi:
            input_grad, param_grads, alias, reused = boundary_gradients(unit, ins, edges, grads)
        elif edges:
            torch.autograd.backward(edges, grads)
    del grads
    if not multi:
        input_grad = storage_bytes(x) if x.requires_grad else 0
        param_grads = sum(storage_bytes(p) for p in unit.parameters() if p.requires_grad)
    # Transients beyond what the memory model counts separately: in the forward, what is not
    # saved (what dies before it ends, and an output nobody saved); in the backward, its peak
    # beyond the saved tensors (held until the unit's backward ends in the model) and the input
    # and weight gradients -- negative when saved tensors are freed before the transients peak.
    workspace = max(fwd.peak - saved_survivors, 0)
    backward_workspace = max(bwd.peak, saved_survivors) - saved_survivors - input_grad - param_grads
    return UnitTrace(
        forward_ops=fwd.ops,
        backward_ops=bwd.ops,
        saved_bytes=sum(saved.values()),
        saved_input_bytes=sum(saved.get(key, 0) for key in in_keys),
        saved_output_bytes=sum(saved.get(key, 0) for key in out_keys if key not in in_keys),
        input_bytes=nbytes(x),
        output_bytes=output_bytes,
        output=nxt,
        workspace_bytes=workspace,
        backward_workspace_bytes=backward_workspace,
        grad_alias_bytes=alias,
        grad_reused_bytes=reused,
        saved_in=saved_in,
        saved_out=saved_out,
        out_from_in=out_from_in,
        ops_before_last_pack=packed_after[-1] if packed_after else None,
    )


def unit_signature(unit: torch.nn.Module, x, last: bool) -> tuple:
    """Units with the same structure and input cost the same: profile once."""
    return (type(unit).__name__, repr(unit), tuple((tuple(t.shape), t.dtype, t.requires_grad) for t in tensors(x)),
            last)


def next_input(output):
    """The next unit's input: the output (a tensor or a boundary tuple), detached, floating tensors
    carrying grad; a storage that appears twice stays one tensor."""
    return detached(output)


# `F.dropout` costed as the one fused kernel CUDA runs ("Dropout as CUDA runs it" above): the meta and CPU
# paths decompose it into empty_like / bernoulli_ / div_ / mul, which the profile would otherwise record as
# several operators with their own traffic.


class FusedDropout(TorchFunctionMode):
    """`F.dropout` in training costed as the one kernel PyTorch runs on CUDA (`native_dropout`, and
    `native_dropout_backward` in the backward) instead of the decomposition the meta and CPU paths
    dispatch: while it runs, `recorder` (the forward's, then the backward's: trace_unit swaps it)
    records nothing, then one operator with the fused kernel's traffic."""

    def __init__(self, recorder: OpRecorder):
        super().__init__()
        self.recorder = recorder

    def _fused(self, name: str, elements: int, size: int, dtype: torch.dtype, reads: int) -> OpCost:
        # `reads` tensors of the input's type read and one written, plus the 1-byte mask
        moved = (reads + 1) * elements * size + elements
        return OpCost(name, 0.0, float(moved), str(dtype).removeprefix("torch."))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.nn.functional.dropout:
            return func(*args, **kwargs)
        x = args[0]
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        if not (training and 0 < p < 1 and x.numel()):
            return func(*args, **kwargs)
        recorder = self.recorder
        recorder.fusing = True
        try:
            out = func(*args, **kwargs)
        finally:
            recorder.fusing = False
        n, size, dtype = x.numel(), x.element_size(), x.dtype
        recorder.ops.append(self._fused("aten.native_dropout", n, size, dtype, reads=1))
        node = out.grad_fn
        if node is not None:
            def begin(_grads):
                self.recorder.fusing = True

            def end(_inputs, _outputs):
                self.recorder.fusing = False
                self.recorder.ops.append(self._fused("aten.native_dropout_backward", n, size, dtype, reads=1))

            node.register_prehook(begin)
            node.register_hook(end)
        return out

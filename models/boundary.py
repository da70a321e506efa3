"""What passes between two units: one tensor, or a tuple of tensors.

A unit finer than a residual block hands on the running activation *and* the skip
connection (models/layer_units.py); a transformer layer split into its attention and MLP
halves hands on the residual stream the same way. Everything that moves a boundary (the
runtime's checkpoints, swaps and backward hooks; the profiler's byte counts) goes through
these helpers, so one tensor and a tuple are handled alike. Bytes are counted per storage,
each once: the skip is usually the very tensor an earlier boundary carried.
"""

from __future__ import annotations

import torch

from karma.core.storages import storage_bytes, storage_key

Boundary = torch.Tensor | tuple[torch.Tensor, ...]


def tensors(b: Boundary) -> tuple[torch.Tensor, ...]:
    """The boundary's tensors, in order."""
    return b if isinstance(b, tuple) else (b,)


def rebuild(like: Boundary, flat) -> Boundary:
    """A boundary of the same shape as `like` from its tensors (`flat`, in order)."""
    flat = tuple(flat)
    return flat if isinstance(like, tuple) else flat[0]


def storages(b: Boundary) -> dict[int, int]:
    """Storage key -> bytes, for every storage of the boundary's tensors (each once)."""
    return {storage_key(t): storage_bytes(t) for t in tensors(b)}


def nbytes(b: Boundary) -> int:
    """Bytes of the boundary, each storage once."""
    return sum(storages(b).values())


def detached(b: Boundary) -> Boundary:
    """The boundary as the next unit's leaf inputs: detached, floating tensors requiring grad;
    a tensor that appears twice stays one tensor."""
    seen: dict[int, torch.Tensor] = {}
    out = []
    for t in tensors(b):
        if id(t) not in seen:
            d = t.detach()
            if d.is_floating_point():
                d.requires_grad_(True)
            seen[id(t)] = d
        out.append(seen[id(t)])
    return rebuild(b, out)


def boundary_gradients(unit: torch.nn.Module, ins: tuple, edges: list, grads: list) -> tuple[int, int, int, int]:
    """The backward of a unit whose boundary has several tensors, by torch.autograd.grad so that the
    input gradients come back as the chain makes them (accumulating into leaf inputs would copy a
    gradient two inputs share: the join of a residual block hands its output's gradient to both).
    Returns (new input-gradient bytes, weight-gradient bytes, grad_alias_bytes, grad_reused_bytes):
    gradients of two inputs that are one tensor are counted once (alias: input bytes less the
    distinct gradient bytes), and an input gradient that is the output's gradient, or that of an
    input handed on unchanged, is no new memory (reused: input bytes less the new bytes)."""
    wanted = [t for t in ins if t.requires_grad]
    params = [p for p in unit.parameters() if p.requires_grad]
    found = torch.autograd.grad(edges, wanted + params, grads, allow_unused=True) if edges and wanted + params \
        else [None] * (len(wanted) + len(params))
    fed = {storage_key(g) for g in grads}
    per_input: dict[int, tuple[int, object]] = {}  # input storage -> (bytes, its gradient's storage)
    for t, g in zip(wanted, found[:len(wanted)], strict=True):
        key = storage_key(t)
        # no gradient here (an input handed on unchanged): the chain's is the output's, its own storage
        per_input[key] = (storage_bytes(t), ("own", key) if g is None else storage_key(g))
    distinct: dict[object, int] = {}
    new: dict[object, int] = {}
    for nbytes, gkey in per_input.values():
        distinct.setdefault(gkey, nbytes)
        if not (isinstance(gkey, tuple) or gkey in fed):
            new.setdefault(gkey, nbytes)
    total = sum(n for n, _ in per_input.values())
    weight_grads = sum({storage_key(g): storage_bytes(g) for g in found[len(wanted):] if g is not None}.values())
    return sum(new.values()), weight_grads, total - sum(distinct.values()), total - sum(new.values())

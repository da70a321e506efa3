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

from karma.unit_trace import storage_bytes, storage_key

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


def carried(inputs: Boundary, outputs: Boundary) -> int:
    """Bytes of the input storages handed on unchanged in the output (a skip riding along)."""
    out = storages(outputs)
    return sum(n for key, n in storages(inputs).items() if key in out)


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

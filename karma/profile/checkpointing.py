"""A recomputed block's forward: torch.utils.checkpoint as the runtime runs it.

One function for the runtime (karma/runtime/execute.py) and the measured profile
(karma/profile/measured.py), so that the recompute the profile times is the one the
runtime pays: non-reentrant checkpoint, RNG state preserved (dropout must draw the
same mask again, docs/machine.md) and BatchNorm running statistics put back after the
recompute (it would otherwise update them twice and drift from plain training).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils.checkpoint import checkpoint

from models.boundary import tensors


def _bn_buffers(modules) -> list[torch.Tensor]:
    return [b for unit in modules for m in unit.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
            for b in m.buffers()]


def _keep_bn_statistics(modules):
    """checkpoint's context_fn: the forward runs plainly; the recompute restores the statistics."""

    @contextlib.contextmanager
    def recompute():
        buffers = _bn_buffers(modules)
        before = [b.clone() for b in buffers]
        try:
            yield
        finally:
            with torch.no_grad():
                for b, old in zip(buffers, before, strict=True):
                    b.copy_(old)

    return contextlib.nullcontext(), recompute()


def checkpointed(fn, modules, x):
    """`fn(x)` as a checkpointed segment over the boundary's tensors (a tuple of them when the
    boundary carries several, models/boundary.py); `modules`: whose BatchNorm statistics to keep."""
    several = isinstance(x, tuple)  # not x itself: the recompute closure would keep its tensors alive
    return checkpoint(lambda *flat: fn(flat if several else flat[0]), *tensors(x), use_reentrant=False,
                      preserve_rng_state=True, context_fn=lambda: _keep_bn_statistics(modules))

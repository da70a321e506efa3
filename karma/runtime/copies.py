"""Host<->device copies that work on both devices of the runtime.

On the emulated device (CPU) a copy is a clone (the link's worker then waits out the
transfer time). On CUDA the host side is a pinned buffer and the copy is asynchronous on
the calling thread's current stream (a CudaLink copy stream); the source is marked as used
by that stream so the caching allocator cannot hand its memory out again before the copy
has read it (the caller may drop its last reference right away).
"""

from __future__ import annotations

import torch


def to_host(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.device.type == "cpu":
        return t.clone()
    out = torch.empty_like(t, device="cpu", pin_memory=True)
    out.copy_(t, non_blocking=True)
    t.record_stream(torch.cuda.current_stream(t.device))
    return out


def to_device(h: torch.Tensor, device: torch.device) -> torch.Tensor:
    if device.type == "cpu":
        return h.clone()
    return h.to(device, non_blocking=True)


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Overwrite `dst` (a device weight) with `src` (its host master)."""
    with torch.no_grad():
        dst.copy_(src, non_blocking=dst.device.type == "cuda")

"""Measured profile: the same fields as the analytic one, timed on a real device.

Bytes are counted exactly as in the analytic profile (the same hooks, on real
tensors); forward and backward times are the median of `reps` timed runs after
`warmup` untimed ones, per distinct unit, with gradients cleared before each
run so every run does the work of a first step. On CUDA the device is
synchronised around each timed pass.
"""

from __future__ import annotations

import statistics
import time

import torch

from karma.profile import Profile
from karma.profile_chain import profile_chain
from karma.unit_trace import run_backward, run_forward
from models.boundary import tensors
from models.chain import ChainModel


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    threads = torch.get_num_threads()
    return f"cpu ({threads} thread{'s' if threads > 1 else ''})"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_unit(unit, x, loss, target, device: torch.device, reps: int, warmup: int,
              precision: str = "fp32") -> tuple[float, float]:
    """Median forward and backward seconds of one unit (the forward under autocast in mixed precision)."""
    fwd, bwd = [], []
    for r in range(warmup + reps):
        for p in unit.parameters():
            p.grad = None
        for t in tensors(x):
            t.grad = None
        _sync(device)
        t0 = time.perf_counter()
        result = run_forward(unit, x, loss, target, precision)
        _sync(device)
        t1 = time.perf_counter()
        run_backward(result)
        _sync(device)
        t2 = time.perf_counter()
        if r >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def measured_profile(model: ChainModel, reps: int = 5, warmup: int = 1, progress=None) -> Profile:
    """Profile `model` (built on a real device) by running it there, in the model's precision
    (real torch.autocast: bf16 works on a CPU, fp16 wants CUDA)."""
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be >= 1 and warmup >= 0")
    device = next(model.units.parameters()).device

    def timer(unit, x, loss, target, _trace):
        return time_unit(unit, x, loss, target, device, reps, warmup, model.precision)

    return profile_chain(model, device, timer, "measured", device_label(device),
                         f"median of {reps} runs after {warmup} warm-up, per distinct unit", progress)

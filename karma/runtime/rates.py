"""The rates of the machine a run happens on, measured there, for the simulator's Hardware.

The simulator predicts a run from a measured profile (compute) plus four rates: the link each way,
the device's memory bandwidth (the device optimizer step) and the host optimizer's update rate
(streamed weights and host updates, KARMA Sec. V). Each is measured the way the runtime uses it:

* link: pinned copies on CUDA, each direction apart (an H200's d2h is not its h2d); on the CPU
  the emulated link, whose bandwidth is set, not measured (docs/design.md, Measured versus simulated);
* optimizer steps: the chain's own optimizer (karma/runtime/optim.py) stepping weights of the chain's
  own shapes (measure_update): the host's updates block by block on a host thread with as many
  intra-op threads as HostWeights gets (one on the emulated device, the cores a GPU's host can spare
  on CUDA), the emulated device's step over all of them at once; bytes touched per second
  (simulate.optimizer_traffic_bytes: (3 + 2k) x weight bytes). The preset's 45 GB/s is a whole ABCI
  node's STREAM share; one thread of a single-tensor Adam reaches a fraction of it (with the preset's
  figure the model predicts KARMA's streamed WRN-28-10 on an H200 far too fast: docs/measurements/README.md).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import torch

from karma.core.host_memory import keep_freed_memory
from karma.runtime import cuda
from karma.runtime.optim import new_optimizer
from karma.sim.simulate import optimizer_traffic_bytes
from models.chain import ChainModel


@dataclass(frozen=True)
class Rates:
    """Bytes/s of this machine, and where they come from (printed with every measured result)."""

    h2d: float
    d2h: float
    memory_bw: float
    host_update: float
    link: str  # "emulated" (set) or "measured" (pinned copies)

    def describe(self) -> str:
        device = "device optimizer step" if self.link == "emulated" else "memory copy"
        return (f"link h2d {self.h2d / 1e9:.3g} GB/s, d2h {self.d2h / 1e9:.3g} GB/s ({self.link}); "
                f"{device} {self.memory_bw / 1e9:.3g} GB/s, host optimizer {self.host_update / 1e9:.3g} GB/s "
                f"(measured)")


def _probe_weights(shapes: list[list[torch.Size]]) -> list[list[torch.nn.Parameter]]:
    """Zero fp32 weights of the given shapes, each with a small gradient already in memory."""
    groups = []
    for group in shapes:
        params = []
        for shape in group:
            weight = torch.nn.Parameter(torch.zeros(shape))
            weight.grad = torch.full_like(weight, 1e-3)
            params.append(weight)
        groups.append(params)
    return groups


def weight_shapes(chain: ChainModel) -> list[list[torch.Size]]:
    """The shapes of the weights each unit of `chain` owns (a tied weight with its first user), in unit
    order: what the optimizer steps, block by block on the host or all at once on the device."""
    seen: set[int] = set()
    groups = []
    for unit in chain.units:
        group = []
        for p in unit.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                group.append(p.shape)
        groups.append(group)
    return groups


def measure_update(optimizer: str, shapes: list[list[torch.Size]] | None = None, reps: int = 3, threads: int = 1,
                   on_thread: bool = True) -> float:
    """Bytes/s an optimizer step streams (simulate.optimizer_traffic_bytes of the weights it steps): `optimizer`
    stepping fp32 weights of `shapes`, one optimizer per group in turn (the host's per-block updates) or one
    group of them all (the device's step), with `threads` intra-op threads, on a thread of its own (the host
    optimizer, karma/runtime/streamed.py) or on the caller's (the device's step). The weights' own shapes
    matter: an optimizer step costs per tensor as well as per byte, so a chain of many small tensors
    (ResNet-50's batch norms) steps slower per byte than one of large matrices, whose tensors may also fit
    in the cache where a single large probe does not; without `shapes`, one 128 MB tensor (about one
    Megatron-1.2B layer)."""
    groups = _probe_weights(shapes if shapes is not None else [[torch.Size([(128 << 20) // 4])]])
    optimizers = [new_optimizer(optimizer, params) for params in groups if params]
    nbytes = sum(p.numel() * p.element_size() for params in groups for p in params)
    times: list[float] = []

    def run():
        if on_thread:
            torch.set_num_threads(threads)
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            for opt in optimizers:
                opt.step()
            times.append(time.perf_counter() - t0)

    if on_thread:
        worker = threading.Thread(target=run, name="optimizer-probe")
        worker.start()
        worker.join()
    else:
        run()
    return optimizer_traffic_bytes(nbytes, optimizer) / statistics.median(times[1:])


def cpu_rates(link_bw: float, optimizer: str, chain: ChainModel | None = None) -> Rates:
    """The emulated device: its link as set (both ways) and this CPU's optimizer rates, measured on the
    weights of `chain` (when given) as the runtime steps them: the host's update block by block on a thread
    of its own with one intra-op thread, the device's step over every weight at once on this thread with
    its intra-op threads (the emulated device is this CPU, and its step the same torch optimizer). Neither a
    plain copy's rate nor one large probe tensor steps at the rate of the model's own tensors
    (measure_update; docs/measurements/README.md)."""
    keep_freed_memory()
    shapes = weight_shapes(chain) if chain is not None else None
    host = measure_update(optimizer, shapes)
    device = measure_update(optimizer, [[s for group in shapes for s in group]] if shapes else None, on_thread=False)
    return Rates(link_bw, link_bw, device, host, "emulated")


def cuda_rates(device: torch.device, optimizer: str, chain: ChainModel | None = None) -> Rates:
    """A real GPU: pinned copies each way, device-to-device copies, the host optimizer (on the weights
    of `chain` when given, block by block, as cpu_rates)."""
    shapes = weight_shapes(chain) if chain is not None else None
    return Rates(cuda.measure_link(device, "h2d"), cuda.measure_link(device, "d2h"),
                 cuda.measure_memory_bandwidth(device),
                 measure_update(optimizer, shapes, threads=cuda.host_threads()), "measured")

"""The rates of the machine a run happens on, measured there, for the simulator's Hardware.

The simulator predicts a run from a measured profile (compute) plus four rates: the link each way,
the device's memory bandwidth (the device optimizer step) and the host optimizer's update rate
(streamed weights and host updates, KARMA Sec. V). Each is measured the way the runtime uses it:

* link: pinned copies on CUDA, each direction apart (an H200's d2h is not its h2d); on the CPU
  the emulated link, whose bandwidth is set, not measured (docs/design.md, Measured versus simulated);
* host update: the chain's own optimizer (karma/runtime/optim.py) stepping a block of weights on
  a host thread with as many intra-op threads as HostWeights gets (one on the emulated device,
  the cores a GPU's host can spare on CUDA); bytes touched per second (simulate.optimizer_traffic_bytes:
  (3 + 2k) x weight bytes). The preset's 45 GB/s is a whole ABCI node's STREAM share; one thread of
  a single-tensor Adam reaches a fraction of it (with the preset's figure the model predicts KARMA's
  streamed WRN-28-10 on an H200 far too fast: docs/measurements/README.md).
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import torch

from karma.runtime import cuda
from karma.runtime.optim import new_optimizer
from karma.sim.simulate import optimizer_traffic_bytes


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


def measure_host_update(optimizer: str, nbytes: int = 128 << 20, reps: int = 3, threads: int = 1) -> float:
    """Bytes/s the runtime's host optimizer streams: `optimizer` stepping `nbytes` of fp32 weights
    (a block's worth: 128 MB is about one Megatron-1.2B layer) on a thread of its own with
    `threads` intra-op threads (karma/runtime/streamed.py, _step), its gradient already in memory."""
    weight = torch.nn.Parameter(torch.zeros(nbytes // 4))
    weight.grad = torch.full_like(weight, 1e-3)
    opt = new_optimizer(optimizer, [weight])
    times: list[float] = []

    def run():
        torch.set_num_threads(threads)
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)

    worker = threading.Thread(target=run, name="host-optimizer-probe")
    worker.start()
    worker.join()
    return optimizer_traffic_bytes(nbytes, optimizer) / statistics.median(times[1:])


def cpu_rates(link_bw: float, optimizer: str) -> Rates:
    """The emulated device: its link as set (both ways) and this CPU's optimizer rate, for the host's
    updates and for the device's own optimizer step alike: the emulated device is this CPU, and its
    step is the same torch optimizer on one compute thread (a plain copy's rate, 3-4x faster than
    Adam here, would predict Megatron's steps short)."""
    rate = measure_host_update(optimizer)
    return Rates(link_bw, link_bw, rate, rate, "emulated")


def cuda_rates(device: torch.device, optimizer: str) -> Rates:
    """A real GPU: pinned copies each way, device-to-device copies, the host optimizer."""
    return Rates(cuda.measure_link(device, "h2d"), cuda.measure_link(device, "d2h"),
                 cuda.measure_memory_bandwidth(device), measure_host_update(optimizer, threads=cuda.host_threads()),
                 "measured")

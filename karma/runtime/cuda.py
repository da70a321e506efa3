"""The runtime on a real CUDA device: copy streams, pinned host buffers, events, a capped device.

The step is the same `train_step` as on the emulated device (karma/runtime/execute.py); only
the link and the memory accounting change:

* `CudaLink` has EmulatedLink's interface (`submit` -> Future, in-order queues per direction,
  one shared queue when half duplex) but each queue's worker thread copies on its own CUDA
  stream: the copy first waits for an event recorded on the compute stream when it was
  submitted (so it reads finished data), copies between the device and pinned host buffers
  (karma/runtime/copies.py), and the future resolves once an event after the copy has
  completed. Tensors it brings up are marked as used by the compute stream for the caching
  allocator. Its timeline is wall-clock time on the copy threads.
* Capacity: `torch.cuda.set_per_process_memory_fraction(capacity / total)`, so a big GPU plays
  a 16 GB V100; an allocation past it raises torch.cuda.OutOfMemoryError, reported as the
  runtime's DeviceOOM naming the block that was running.
* Peak: the caching allocator's own `max_memory_allocated` over the step (reset before it),
  so no per-tensor tracking runs (`track=False`).

`python -m karma.runtime.gpu_check` is the check to run; its runs on a GPU (an H200 capped at
16 GB) are in docs/measurements/.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from karma.core.errors import KarmaError
from karma.plan.plan import Plan
from karma.runtime.execute import make_optimizer, train_step
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink, _Job
from karma.runtime.streamed import HostWeights
from models.registry import build


def require_cuda() -> torch.device:
    # Under a cap the default allocator's fragmentation matters: on an H200 capped at 16 GB a plan
    # predicted at 15.0 GB runs out of memory with it and fits with expandable segments
    # (docs/measurements/README.md).
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    if not torch.cuda.is_available():
        raise KarmaError("CUDA was asked for but no CUDA device is available")
    return torch.device("cuda", torch.cuda.current_device())


def cap_memory(capacity: float, device: torch.device) -> float:
    """Cap the caching allocator at `capacity` bytes; returns the fraction set."""
    total = torch.cuda.get_device_properties(device).total_memory
    if capacity > total:
        raise KarmaError(f"capacity {capacity / 1e9:.2f} GB exceeds the device's {total / 1e9:.2f} GB")
    fraction = capacity / total
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    torch.cuda.empty_cache()
    return fraction


class CudaLink(EmulatedLink):
    """Real host<->device copies on CUDA streams behind the emulated link's interface."""

    def __init__(self, device: torch.device, duplex: str = "full"):
        self.device = device
        self.compute = torch.cuda.current_stream(device)
        names = ["link"] if duplex == "half" else ["h2d", "d2h"]
        self.streams = {n: torch.cuda.Stream(device) for n in names}
        super().__init__(float("inf"), float("inf"), 0.0, duplex)

    @property
    def label(self) -> str:
        return f"cuda ({torch.cuda.get_device_name(self.device)}, real copy streams)"

    def _ready(self) -> object:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _worker_setup(self) -> None:
        torch.set_num_threads(1)
        torch.cuda.set_device(self.device)

    def _transfer(self, direction: str, job: _Job, begin: float) -> object:
        stream = self.streams[self._queue_name(direction)]
        with torch.cuda.stream(stream):
            stream.wait_event(job.ready)
            result = job.work()
            done = torch.cuda.Event()
            done.record(stream)
        done.synchronize()
        for t in result if isinstance(result, list) else []:
            if isinstance(t, torch.Tensor) and t.is_cuda:
                t.record_stream(self.compute)  # used (and freed) on the compute stream from here
        return result


def host_threads() -> int:
    """Intra-op threads of the host optimizer next to a GPU: the host's cores less one for the
    Python thread launching kernels and one for the copy threads (ZeRO-Offload's CPU Adam and
    KARMA's host updates are multi-threaded too; KARMA Sec. V)."""
    return max(1, len(os.sched_getaffinity(0)) - 2)


def peak_of_step(device: torch.device, step) -> tuple[object, int]:
    """Run `step()` with the allocator's peak reset; returns (its result, the peak bytes)."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = step()
    torch.cuda.synchronize(device)
    return result, torch.cuda.max_memory_allocated(device)


def measure_link(device: torch.device, direction: str = "h2d", nbytes: int = 256 << 20, reps: int = 3) -> float:
    """Bytes/s of a pinned copy host -> device ("h2d") or device -> host ("d2h")."""
    host = torch.empty(nbytes // 4, pin_memory=True)
    dev = torch.empty(nbytes // 4, device=device)
    src, dst = (host, dev) if direction == "h2d" else (dev, host)
    times = []
    for _ in range(reps + 1):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return nbytes / sorted(times[1:])[len(times[1:]) // 2]


def measure_memory_bandwidth(device: torch.device, nbytes: int = 512 << 20) -> float:
    """Bytes/s of a device-to-device copy (read + write), for the optimizer step's time."""
    src, dst = torch.empty(nbytes // 4, device=device), torch.empty(nbytes // 4, device=device)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dst.copy_(src)
    end.record()
    end.synchronize()
    return 2 * nbytes / (start.elapsed_time(end) / 1e3)


def run_cuda_steps(chain, plan, steps: int, device: torch.device):
    """A warm-up and `steps` timed steps on the GPU; returns (the timed step with the highest
    allocator peak, the timed steps), like emulation.run_steps. The warm-up's peak is left out: it
    carries the one-off costs of first use (pinned host allocations, library workspaces), which
    can raise a fresh process's peak above a warm one's (docs/measurements/README.md); the performance
    model describes the steady step."""
    gc.collect()  # the previous run's blocks back to the allocator, not counted against this cap
    torch.cuda.empty_cache()
    # streamed weights: host masters and optimizers; the device copies exist only while uploaded
    reports = []
    optimizer = None
    try:
        with CudaLink(device) as link:
            # a host optimizer with resident weights sends the updated weights back up over the link
            optimizer = HostWeights(chain, plan, link=link, threads=host_threads()) if plan.host_optimizer \
                else make_optimizer(chain)
            for s in range(steps + 1):
                gc.collect()  # the peak is taken on these untracked steps: start each from the same memory
                batch = chain.make_batch(seed=s, device=device)
                report, peak = peak_of_step(device, lambda batch=batch: train_step(
                    chain, plan, optimizer, batch, Ledger(float("inf")), link, track=False))
                reports.append(replace(report, peak_bytes=peak))
    finally:
        if isinstance(optimizer, HostWeights):
            optimizer.close()
    return max(reports[1:], key=lambda r: r.peak_bytes), reports[1:]


@dataclass(frozen=True)
class CudaRunner:
    """Runs a plan on this GPU under the cap, each run in a fresh process.

    A run that ran out of memory can leave device memory behind (tensors in its exception's
    frames, copy threads still holding jobs), which the runs after it would start with. A process
    of its own frees everything when it exits.
    """

    model: str
    size: str
    batch: int | None
    capacity: float
    steps: int = 2
    overrides: dict | None = None  # the model's options (models.build)

    def where(self) -> str:
        return f"cuda ({torch.cuda.get_device_name()}, capped at {self.capacity / 1e9:.1f} GB)"

    def __call__(self, plan):
        with tempfile.TemporaryDirectory() as tmp:
            spec, out = Path(tmp) / "spec.pkl", Path(tmp) / "out.pkl"
            spec.write_bytes(pickle.dumps((self, plan.to_dict())))
            done = subprocess.run([sys.executable, "-m", "karma.runtime.cuda", str(spec), str(out)], check=False)
            if not out.exists():
                raise KarmaError(f"the CUDA run of {plan.strategy} exited with {done.returncode} and no result")
            result = pickle.loads(out.read_bytes())
        if isinstance(result, Exception):
            raise result
        return result


def _run_one(spec: Path, out: Path) -> None:
    """The child of CudaRunner: build the chain on the GPU, cap it, run; the result or the error goes to `out`."""
    runner, plan = pickle.loads(spec.read_bytes())
    try:
        device = require_cuda()
        cap_memory(runner.capacity, device)
        chain = build(runner.model, runner.size, runner.batch, seed=1, device=device, overrides=runner.overrides)
        result = run_cuda_steps(chain, Plan.from_dict(plan), runner.steps, device)
    except KarmaError as err:  # sent without its traceback (and the tensors in its frames)
        result = type(err)(str(err))
    out.write_bytes(pickle.dumps(result))


if __name__ == "__main__":
    _run_one(Path(sys.argv[1]), Path(sys.argv[2]))

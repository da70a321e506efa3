"""An emulated host<->device link: copies on worker threads at a given bandwidth.

A real copy into a new buffer is made (so the data really moves and the result
is exact), then the worker waits until the absolute deadline start + latency +
bytes / bandwidth (docs/machine.md: per-chunk sleeps overshoot; a deadline does not
drift). Each direction is an in-order queue like a CUDA copy stream; a half
duplex link shares one queue. Workers use one torch thread, leaving the other
core to compute (docs/machine.md).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import torch

from karma.sim.simulate import Event


@dataclass
class _Job:
    nbytes: int
    work: Callable[[], object]
    future: Future
    op: str
    block: int
    on_start: Callable[[], None] | None
    on_end: Callable[[object], None] | None = None
    ready: object = None  # CudaLink: an event on the compute stream the copy must wait for


def emulated_label(h2d_bw: float, duplex: str = "full") -> str:
    """Where numbers measured through an emulated link come from."""
    return f"cpu-emulated (link {h2d_bw / 1e6:.1f} MB/s{', half duplex' if duplex == 'half' else ''})"


class EmulatedLink:
    def __init__(self, h2d_bw: float, d2h_bw: float, latency: float = 0.0, duplex: str = "full"):
        self.bw = {"h2d": h2d_bw, "d2h": d2h_bw}
        self.latency = latency
        self.duplex = duplex
        self.start = time.perf_counter()
        self.events: list[Event] = []
        self.bytes = {"h2d": 0, "d2h": 0}
        self._lock = threading.Lock()
        names = ["link"] if duplex == "half" else ["h2d", "d2h"]
        self._queues = {n: queue.Queue() for n in names}
        self._threads = [threading.Thread(target=self._serve, args=(n,), daemon=True) for n in names]
        for t in self._threads:
            t.start()

    @property
    def label(self) -> str:
        """Where numbers measured through this link come from."""
        return emulated_label(self.bw["h2d"], self.duplex)

    def _queue_name(self, direction: str) -> str:
        return "link" if self.duplex == "half" else direction

    def submit(self, direction: str, nbytes: int, work: Callable[[], object], op: str, block: int,
               on_start: Callable[[], None] | None = None,
               on_end: Callable[[object], None] | None = None) -> Future:
        """Run `work` (the copy) on `direction`'s queue; the future resolves after the emulated
        transfer time and after `on_end(result)` (so whoever waits on it sees its effects)."""
        future: Future = Future()
        job = _Job(nbytes, work, future, op, block, on_start, on_end, self._ready())
        self._queues[self._queue_name(direction)].put((direction, job))
        return future

    def _ready(self) -> object:
        """What a copy submitted now must wait for before it starts (nothing here: the CPU is in order)."""
        return None

    def _transfer(self, direction: str, job: _Job, begin: float) -> object:
        """Do the copy, then wait until the emulated transfer would end."""
        result = job.work()
        deadline = begin + self.latency + job.nbytes / self.bw[direction]
        delay = deadline - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return result

    def _worker_setup(self) -> None:
        torch.set_num_threads(1)

    def _serve(self, name: str) -> None:
        self._worker_setup()
        q = self._queues[name]
        while True:
            item = q.get()
            if item is None:
                return
            direction, job = item
            begin = time.perf_counter()
            try:
                if job.on_start:
                    job.on_start()
                result = self._transfer(direction, job, begin)
                end = time.perf_counter()
                with self._lock:
                    self.events.append(Event(self._queue_name(direction), job.op, job.block, begin - self.start,
                                             end - self.start))
                    self.bytes[direction] += job.nbytes
                if job.on_end:
                    job.on_end(result)
                job.future.set_result(result)
            except BaseException as err:  # the waiting compute thread re-raises it
                job.future.set_exception(err)
            # Drop this frame's references before blocking on the next job: the job's closure and
            # result would otherwise keep its tensors (a swapped block's device copies) alive.
            item = job = result = None

    def reset_clock(self, start: float) -> None:
        with self._lock:
            self.start = start
            self.events = []
            self.bytes = {"h2d": 0, "d2h": 0}

    def close(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> EmulatedLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

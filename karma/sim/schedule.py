"""The simulator's resources: in-order queues like CUDA streams, and a device-memory ledger.

Operations are issued in program order; each starts when its queue is free and its
dependencies are met, and lasts its cost. Memory is accounted at operation boundaries:
allocated at the start of the op that produces it (a copy to the device: when it is
issued, `alloc_at`), freed at the end of the op that last needs it; at equal times frees
come first (an op's memory is released before the next op starts), except an op of no
duration, whose frees follow its own allocation and precede those issued after it at that time
(program order: the ledger's sort is stable). Freeing them after every allocation at that time
would hold a residual add's output gradient (its backward takes no time) together with the next
unit's backward, and overcount the peak by about 15% (ResNet-50 small b64, layer units swapped
in whole blocks at depth 1; tests/models/test_layer_units.py). So whatever is
taken or handed over when an op starts must be recorded before that op (`start_at` says when it
will start): recorded after it, an op of no duration has already freed, and the peak misses what
both held (karma/sim/simulate.py's prefetches and recompute gradients; tests/sim/test_simulate.py checks
that no op of no duration counts less memory than one of a nanosecond).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter


@dataclass(frozen=True)
class Event:
    """One operation of the timeline, in the simulator's and the runtime's common format."""

    resource: str
    op: str
    block: int
    start: float
    end: float


class Schedule:
    """In-order queues and a memory ledger, filled in program order."""

    def __init__(self, duplex: str, record: bool):
        self.free_at: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self.duplex = duplex
        self.mem: list[tuple[float, int, float, int]] = []  # (time, order, delta, block)
        self.record = record
        self.timeline: list[Event] = []
        self.compute_start = 0.0
        self._queues = {"h2d": "link", "d2h": "link"} if duplex == "half" else {}

    def queue(self, resource: str) -> str:
        return self._queues.get(resource, resource)

    def start_at(self, resource: str, ready: float) -> float:
        """When an op on `resource` ready at `ready` and queued now would start."""
        free_at = self.free_at.get(self.queue(resource), 0.0)
        return free_at if free_at > ready else ready

    def op(self, resource: str, name: str, block: int, ready: float, duration: float,
           alloc: float = 0.0, free: float = 0.0, alloc_at: float | None = None) -> tuple[float, float]:
        """Queue an op; `alloc` is taken at its start, or at `alloc_at` (a copy's issue, before its
        queue is free: its destination is allocated when the copy is issued, karma/sim/simulate.py)."""
        q = self._queues.get(resource, resource) if self._queues else resource
        free_at = self.free_at.get(q, 0.0)
        start = free_at if free_at > ready else ready
        end = start + duration
        self.free_at[q] = end
        if q == "compute":
            self.compute_start = start
        busy = self.busy
        busy[q] = busy.get(q, 0.0) + duration
        if alloc:
            self.mem.append((start if alloc_at is None else alloc_at, 1, alloc, block))
        if free:
            # an op of no duration frees after its own allocation, not before (frees come first at equal times),
            # and before the allocations of the ops issued after it (allocations' order, kept by the stable sort)
            self.mem.append((end, 1 if end == start else 0, -free, block))
        if self.record:
            self.timeline.append(Event(q, name, block, start, end))
        return start, end

    def alloc(self, t: float, nbytes: float, block: int) -> None:
        self.mem.append((t, 1, nbytes, block))

    def release(self, t: float, nbytes: float, block: int, after_allocs: bool = False) -> None:
        """Frees come first at equal times, except those of an op of no duration (after_allocs): in program
        order among that time's allocations, after its own."""
        self.mem.append((t, 1 if after_allocs else 0, -nbytes, block))

    def peak(self, base: float, capacity: float) -> tuple[float, int | None, float]:
        """Peak bytes, and the first block whose allocation crossed `capacity` (frees first at equal times)."""
        level = peak = base
        first_over, over_by = (0, base - capacity) if base > capacity else (None, 0.0)
        self.mem.sort(key=itemgetter(0, 1))  # stable: program order within a time and kind
        for _t, _kind, delta, block in self.mem:
            level += delta
            if level > peak:
                peak = level
            if first_over is None and level > capacity:
                first_over, over_by = block, level - capacity
        return peak, first_over, over_by

    def levels(self, base: float) -> list[tuple[float, float]]:
        """(time, bytes in use) after each allocation or free, in the order `peak` counts them (call it first)."""
        out, level = [], base
        for t, _kind, delta, _block in self.mem:
            level += delta
            out.append((t, level))
        return out

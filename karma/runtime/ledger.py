"""Device memory of the emulated device, accounted per storage and owner.

A storage (the memory behind a tensor) is on the device while at least one
owner holds it: a block that saved it for backward, a block whose checkpoint
it is, a prefetch. Counting storages, not tensors, counts a tensor saved by
two units once, as PyTorch's memory would. Going past the capacity raises
DeviceOOM naming the block, so the runtime never exceeds the memory it was
given. Thread safe: the link's workers free and allocate too.

An allocation on the compute thread that would go past the capacity while
copies to the host are in flight (`expect_release`: a swap-out, a checkpoint
offload) first waits for them to end, as PyTorch's CUDA caching allocator does
before it reports out of memory (it synchronizes the events of blocks freed
while a side stream still used them, then retries): when a copy ends relative
to the compute depends on the processor's speed of the moment, and a run whose
link lags its plan would otherwise fail where a GPU program only stalls. The
time waited is counted (`waited`, seconds), and it is in the measured step.
"""

from __future__ import annotations

import threading
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from karma.core.errors import KarmaError
from karma.core.storages import StorageLifetimes, accumulates_gradients

#: Seconds an allocation waits at most for copies to the host to end (a copy that never ends would hang the step).
COPY_WAIT_LIMIT = 60.0


class DeviceOOM(KarmaError):
    """An allocation would exceed the emulated device's capacity."""


class Ledger:
    def __init__(self, capacity: float, clock_start: float | None = None):
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self._owners: dict[object, set] = {}
        self._bytes: dict[object, int] = {}
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._compute_thread = threading.get_ident()  # the thread that may wait for copies (not a link worker)
        self.in_flight = 0  # copies to the host whose end frees device memory
        self.waited = 0.0
        self.start = time.perf_counter() if clock_start is None else clock_start
        self.trace: list[tuple[float, int]] = []

    def expect_release(self) -> None:
        """A copy to the host is in flight; its end frees memory (`released` when it has ended)."""
        with self._lock:
            self.in_flight += 1

    def released(self) -> None:
        with self._lock:
            self.in_flight -= 1
            self._released.notify_all()

    def _wait_for_copies(self, nbytes: int) -> None:
        """On the compute thread, while `nbytes` more would go past the capacity and copies to the host are
        in flight: wait for them (the lock held on entry and on return)."""
        if threading.get_ident() != self._compute_thread:
            return
        t0 = time.perf_counter()
        deadline = t0 + COPY_WAIT_LIMIT
        while self.used + nbytes > self.capacity and self.in_flight and time.perf_counter() < deadline:
            self._released.wait(timeout=deadline - time.perf_counter())
        self.waited += time.perf_counter() - t0

    def hold(self, key, nbytes: int, owner, where: str) -> None:
        """`owner` holds storage `key` of `nbytes`; allocates it if nobody did."""
        with self._lock:
            if not self._owners.get(key) and self.used + nbytes > self.capacity:
                self._wait_for_copies(nbytes)  # (another thread may allocate `key` meanwhile)
            owners = self._owners.setdefault(key, set())
            if not owners:
                if self.used + nbytes > self.capacity:
                    del self._owners[key]
                    raise DeviceOOM(f"{where}: allocating {nbytes / 1e6:.1f} MB would use "
                                    f"{(self.used + nbytes) / 1e9:.4f} GB of the {self.capacity / 1e9:.4f} GB "
                                    f"emulated device")
                self.used += nbytes
                self._bytes[key] = nbytes
                self.peak = max(self.peak, self.used)
                self.trace.append((time.perf_counter() - self.start, self.used))
            owners.add(owner)

    def release(self, key, owner) -> None:
        with self._lock:
            owners = self._owners.get(key)
            if not owners or owner not in owners:
                return
            owners.discard(owner)
            if not owners:
                del self._owners[key]
                self.used -= self._bytes.pop(key)
                self.trace.append((time.perf_counter() - self.start, self.used))
                self._released.notify_all()

    def release_all(self, owner) -> None:
        for key in [k for k, owners in list(self._owners.items()) if owner in owners]:
            self.release(key, owner)


class LiveTracker(TorchDispatchMode):
    """Holds, on the ledger, every storage an operator creates until its last tensor dies.

    So the emulated device sees all of the step's memory (activations, gradients,
    transients), not only what the runtime places there on purpose; an operator that
    would cross the capacity raises DeviceOOM naming what was running (`where`).
    """

    def __init__(self, ledger: Ledger):
        super().__init__()
        self.where = "compute"
        self._lifetimes = StorageLifetimes(lambda key, nbytes: ledger.hold(key, nbytes, self, self.where),
                                           lambda key, _nbytes: ledger.release(key, self))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self._lifetimes.settle()
        out = func(*args, **(kwargs or {}))
        defer = accumulates_gradients(func, args, kwargs)  # summed in place by plain PyTorch (unit_trace)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._lifetimes.track(t, new_storage=not func.is_view, defer=defer)
        return out

    def __exit__(self, *exc):
        self._lifetimes.settle()
        return super().__exit__(*exc)

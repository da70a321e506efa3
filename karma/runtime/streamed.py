"""Streamed weights: master weights and the optimizer live on the host (KARMA Sec. V).

Each block's weights are uploaded (host -> device, through the emulated link)
before its forward and again before its backward, and leave the device after
each; its gradients are downloaded as soon as its backward ends, and the host
runs that block's optimizer step on a host thread while later blocks are
still computing. In mixed precision (karma/core/precision.py) the host keeps the fp32
masters and the optimizer state plus a 16-bit copy of each weight, which is what
goes up; the 16-bit gradients come down and become the masters' (unscaled for
fp16), and each update writes the 16-bit copy again, as ZeRO-Offload does. A
weight shared by two blocks (GPT's tied embedding) is
uploaded with each and its gradient downloaded after the last of them (in
backward order) is done. The per-block optimizers use the same single-tensor
update as the resident one, so training is bitwise identical.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from karma.core.precision import LossScaler, to_master_grad
from karma.core.storages import storage_bytes, storage_key
from karma.plan.plan import Plan
from karma.runtime.copies import copy_into, to_host
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.optim import new_optimizer
from models.chain import ChainModel


class _DeviceCopies:
    """Which streamed weights have a device copy. On CUDA a weight's device storage exists only
    while some block holds it: an upload allocates it (on the copy stream, marked for the compute
    stream), the last eviction frees it (`p.data` swapped for an empty tensor, as DeepSpeed does).
    On the emulated device the weights stay where they are and only the ledger counts them
    (`physical=True` frees them there too, so that tests exercise the CUDA behaviour on a CPU)."""

    def __init__(self, params: list[torch.Tensor], masters: dict[int, torch.Tensor], physical: bool | None = None):
        self.masters = masters  # what is uploaded: the weight's host copy in its own type
        self.holders = {id(p): 0 for p in params}
        self.physical = bool(params) and (params[0].is_cuda if physical is None else physical)
        self._lock = threading.Lock()
        if self.physical:
            for p in params:
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    def hold(self, p: torch.Tensor) -> bool:
        """One more block holds `p`; whether another held it already (its device copy is then current)."""
        with self._lock:
            held = self.holders[id(p)] > 0
            self.holders[id(p)] += 1
            if self.physical and p.data.numel() == 0:
                p.data = torch.empty_like(self.masters[id(p)], device=p.device, dtype=p.dtype)
                if p.is_cuda:
                    p.data.record_stream(torch.cuda.default_stream(p.device))
            return held

    def release(self, p: torch.Tensor) -> None:
        with self._lock:
            self.holders[id(p)] = max(0, self.holders[id(p)] - 1)
            if self.physical and not self.holders[id(p)]:
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)


class HostWeights:
    """Master weights, gradients and optimizer state of a chain on the host, per block."""

    def __init__(self, chain: ChainModel, plan: Plan, lr: float = 0.01, link: EmulatedLink | None = None,
                 reduce: Callable[[list[torch.Tensor]], Callable[[], None]] | None = None,
                 pipelined: bool | None = None,
                 physical: bool | None = None, threads: int = 1):
        """`reduce(grads)` starts combining a block's host gradients across data-parallel ranks
        (a non-blocking all-reduce) and returns the wait for it; the block's update runs after
        the wait, on the host thread, while later blocks' all-reduces are in flight.
        `pipelined=False` defers every block's reduce and update until the whole backward is
        done (the naive order); None follows the plan's update order (Plan.update_order). With a
        resident-weights plan the weights stay on the device and `link` carries each block's updated
        weights back up after its update (in the gap before the next forward). `physical`: see
        _DeviceCopies (default: on CUDA only).
        `threads`: intra-op threads of the host optimizer (one on the emulated device, whose
        compute needs the other core; a GPU's host has cores to spare: karma.runtime.cuda)."""
        units = list(chain.units.children())
        # each weight once per block, even when two of its units share it (a tied weight)
        self.uses = [list({id(p): p for i in b.units for p in units[i].parameters()}.values())
                     for b in plan.blocks]
        owner: dict[int, int] = {}
        for k, params in enumerate(self.uses):  # the first block in forward order is the last in backward
            for p in params:
                owner.setdefault(id(p), k)
        self.owned = [[p for p in params if owner[id(p)] == k] for k, params in enumerate(self.uses)]
        self.master = {id(p): to_host(p).float() for params in self.uses for p in params}
        # what goes up: the master itself in fp32, a 16-bit host copy of it in mixed precision
        self.source = {id(p): self.master[id(p)] if p.dtype == torch.float32 else to_host(p)
                       for params in self.uses for p in params}
        self.scaler = LossScaler(chain.precision)
        self.copies = _DeviceCopies(list({id(p): p for ps in self.uses for p in ps}.values()), self.source,
                                    physical) if plan.weights == "streamed" else None
        self.optimizers = [new_optimizer(chain.optimizer, [self.master[id(p)] for p in owned], lr) if owned else None
                           for owned in self.owned]
        self.host = ThreadPoolExecutor(max_workers=1, thread_name_prefix="host-optimizer")
        self.threads = threads
        self.steps: list[Future] = []
        self.reduce = reduce
        self.pipelined = plan.update_order == "pipelined" if pipelined is None else pipelined
        self.deferred: list[int] = []
        self.resident = plan.weights == "resident"
        self.link = link
        self.refreshed: list[Future] = []
        self.held: list[tuple[int, Callable[[], None] | None]] = []
        if self.resident and link is None:
            raise ValueError("host updates of resident weights need the link to send them back")

    def _bytes(self, p: torch.Tensor) -> int:
        """Bytes of the weight's device copy (16-bit in mixed precision) and of its gradient."""
        source = self.source[id(p)]
        return source.numel() * source.element_size()

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss the backward starts from (times fp16's loss scale)."""
        return self.scaler.scaled(loss)

    def upload(self, k: int, link: EmulatedLink, ledger: Ledger, after: Future | None = None) -> Future:
        params = self.uses[k]
        nbytes = sum(self._bytes(p) for p in params)

        # taken when the upload is issued, not when the link gets to it (see SavedTensors.prefetch)
        for p in params:
            ledger.hold(("weight", id(p)), self._bytes(p), ("weights", k), f"weights of block {k}")

        def start():
            if after is not None:
                after.result()

        def copy():
            # A weight another block holds (a tied one, held by the block whose backward is running) is current
            # on the device: writing it again in place, from the link's thread, would change a tensor that
            # block's recompute may be saving (torch.utils.checkpoint refuses a pack hook input changed in place)
            for p in params:
                if self.copies is None or not self.copies.hold(p):
                    copy_into(p, self.source[id(p)])

        return link.submit("h2d", nbytes, copy, "upload weights", k, on_start=start)

    def evict(self, k: int, ledger: Ledger) -> None:
        ledger.release_all(("weights", k))
        if self.copies is not None:
            for p in self.uses[k]:
                self.copies.release(p)

    def download(self, k: int, link: EmulatedLink, ledger: Ledger) -> Future:
        """Gradients of the weights block k owns go down; then the host updates them."""
        owned = self.owned[k]
        nbytes = sum(self._bytes(p) for p in owned)
        owner = ("gradients", k)

        def start():
            # The device gradients stay allocated until the transfer ends, as on a GPU (the
            # emulated copy itself happens at once, then the link waits out the transfer time).
            for p in owned:
                if p.grad is not None:
                    ledger.hold(storage_key(p.grad), storage_bytes(p.grad), owner, f"gradients of block {k}")

        def copy():
            for p in owned:
                grad = to_host(p.grad) if p.grad is not None else None
                if grad is not None and (grad.dtype != torch.float32 or self.scaler.enabled):
                    grad = to_master_grad(grad, self.scaler.scale)
                self.master[id(p)].grad = grad
                p.grad = None

        def update(_future):
            ledger.release_all(owner)
            if self.optimizers[k] is None:
                return
            if self.pipelined:
                wait = self._start_reduce(k)
                if self.scaler.enabled:  # fp16: no update before every gradient is known to be finite
                    self.held.append((k, wait))
                else:
                    self.steps.append(self.host.submit(self._step, k, wait))
            else:
                self.deferred.append(k)

        # the update is queued before the future resolves, so finish() never misses it
        return link.submit("d2h", nbytes, copy, "download gradients", k, on_start=start, on_end=update)

    def _start_reduce(self, k: int) -> Callable[[], None] | None:
        if self.reduce is None:
            return None
        return self.reduce([self.master[id(p)].grad for p in self.owned[k]])

    def _step(self, k: int, wait: Callable[[], None] | None) -> None:
        torch.set_num_threads(self.threads)
        if wait is not None:
            wait()
        self.optimizers[k].step()
        self.optimizers[k].zero_grad(set_to_none=True)
        with torch.no_grad():
            for p in self.owned[k]:
                if self.source[id(p)] is not self.master[id(p)]:
                    self.source[id(p)].copy_(self.master[id(p)])
        if self.resident:  # what this update changed: the weights the block owns (a tied one once, by its owner)
            params = self.owned[k]

            def copy():
                for p in params:
                    copy_into(p, self.source[id(p)])

            nbytes = sum(p.numel() * p.element_size() for p in params)
            self.refreshed.append(self.link.submit("h2d", nbytes, copy, "upload weights", k))

    def finish(self) -> None:
        """Wait for every host update of this step (naive order: run them all now, in backward order).
        fp16: the updates wait for the whole backward; an overflowing gradient anywhere skips them
        all and halves the loss scale (as one device optimizer step would)."""
        waits = self.held + [(k, self._start_reduce(k)) for k in self.deferred]
        self.held = []
        if self.scaler.enabled:
            for _, wait in waits:
                if wait is not None:
                    wait()
            masters = [self.master[id(p)] for k, _ in waits for p in self.owned[k]]
            overflow = not LossScaler.finite(m.grad for m in masters)
            self.scaler.update(overflow)
            for m in masters if overflow else []:
                m.grad = None
            waits = [] if overflow else [(k, None) for k, _ in waits]
        for k, wait in waits:
            self.steps.append(self.host.submit(self._step, k, wait))
        self.deferred = []
        while self.steps:
            self.steps.pop().result()
        while self.refreshed:
            self.refreshed.pop().result()

    def sync(self) -> None:
        """Copy the master weights into the model (the device copy is stale between steps)."""
        with torch.no_grad():
            for params in self.uses:
                for p in params:
                    if p.data.numel() == 0:  # evicted (CUDA): give it its storage back
                        p.data = torch.empty_like(self.source[id(p)], device=p.device)
                    p.copy_(self.source[id(p)])

    def close(self) -> None:
        self.host.shutdown(wait=True)

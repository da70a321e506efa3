"""Execute one training step of a chain model under a Plan, on the emulated device.

Forward: a block's saved tensors go through pack hooks that account them on
the device ledger (karma/runtime/saved.py); a swapped block's are copied to the host after its forward
(freed when the copy ends); a recomputed block is a checkpointed segment
(torch.utils.checkpoint, RNG state preserved, BatchNorm statistics put back)
that keeps only its input, on the device or copied to the host. Backward is
one autograd pass: the prefetches of block b are issued when block b+depth's
backward starts. The same ordering rules as the simulator (karma/sim/simulate.py),
so that every run also checks the model. Every tensor the step creates is
held on the ledger until it dies (LiveTracker), so the emulated device sees
all of the memory and the step never exceeds its capacity.
"""

from __future__ import annotations

import contextlib
import gc
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from karma.core.errors import KarmaError
from karma.core.precision import MixedPrecisionOptimizer, optimizer_bytes
from karma.core.storages import storage_bytes, storage_key
from karma.plan.plan import Plan
from karma.profile.checkpointing import checkpointed
from karma.runtime.ledger import DeviceOOM, Ledger, LiveTracker
from karma.runtime.link import EmulatedLink
from karma.runtime.optim import new_optimizer
from karma.runtime.saved import SavedTensors
from karma.runtime.streamed import HostWeights
from karma.sim.simulate import Event
from models.boundary import tensors
from models.chain import ChainModel


@dataclass
class StepReport:
    """One measured step, in the simulator's units (seconds, bytes) and timeline format."""

    loss: float
    time: float
    peak_bytes: int
    bytes_h2d: int
    bytes_d2h: int
    timeline: list[Event] = field(repr=False)
    device: str = ""  # where it was measured, e.g. "cpu-emulated (link 100.0 MB/s)"
    memory_wait: float = 0.0  # seconds allocations waited for copies to the host to free memory (ledger.py)


def make_optimizer(chain: ChainModel, lr: float = 0.01) -> torch.optim.Optimizer | MixedPrecisionOptimizer:
    """The chain's optimizer over all its weights (karma/runtime/optim.py); in mixed precision over
    fp32 masters of its 16-bit weights, with fp16's loss scale (karma.core.precision)."""
    params = list(chain.units.parameters())
    if chain.precision == "fp32":
        return new_optimizer(chain.optimizer, params, lr)
    return MixedPrecisionOptimizer(params, lambda masters: new_optimizer(chain.optimizer, masters, lr),
                                   chain.precision)


def scaled(optimizer, loss: torch.Tensor) -> torch.Tensor:
    """The loss the backward starts from: times fp16's loss scale, as is otherwise."""
    return optimizer.scaled(loss) if hasattr(optimizer, "scaled") else loss


def check_plan(chain: ChainModel, plan: Plan) -> None:
    if plan.units != len(chain) or plan.model != chain.name:
        raise KarmaError(f"plan is for {plan.model} with {plan.units} units; the model is {chain.name} "
                         f"with {len(chain)} units")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pools_by_stream(segments: list[dict]) -> str:
    """Reserved and allocated bytes of the caching allocator per stream, from
    `torch.cuda.memory_snapshot()` segments: a block belongs to the pool of the stream it was
    allocated on, so memory reserved for a copy stream cannot serve the compute stream (the
    question an OOM with far more reserved than allocated memory raises, such as WRN-28-10
    vDNN's on an H200: docs/measurements/README.md)."""
    pools: dict[int, list[int]] = {}
    for seg in segments:
        total = pools.setdefault(seg.get("stream", 0), [0, 0])
        total[0] += seg.get("total_size", 0)
        total[1] += seg.get("allocated_size", 0)
    return ", ".join(f"stream {stream:#x}: {r / 1e9:.2f} GB reserved, {a / 1e9:.2f} GB allocated"
                     for stream, (r, a) in sorted(pools.items())) or "no segments"


@contextlib.contextmanager
def _named_cuda_oom(tracker):
    """On CUDA the capped caching allocator is the device's capacity: its OOM names the block too."""
    try:
        yield
    except torch.cuda.OutOfMemoryError as err:
        tried = str(err).split(". ")[1] if ". " in str(err) else str(err)[:80]
        raise DeviceOOM(f"{tracker.where or 'step'}: CUDA out of memory under the capped allocator ({tried}; "
                        f"{torch.cuda.memory_allocated() / 1e9:.2f} GB allocated, "
                        f"{torch.cuda.memory_reserved() / 1e9:.2f} GB reserved; "
                        f"{pools_by_stream(torch.cuda.memory_snapshot())})") from None


class _Untracked(contextlib.nullcontext):
    """Stands in for LiveTracker when transient memory is not accounted."""

    where = ""


def train_step(chain: ChainModel, plan: Plan, optimizer: torch.optim.Optimizer | HostWeights, batch,
               ledger: Ledger, link: EmulatedLink, track: bool = True) -> StepReport:
    """One step of `chain` under `plan`; raises DeviceOOM (naming the block) if it does not fit.

    `optimizer` is a torch optimizer for resident weights, a HostWeights for streamed ones.
    `track=False` skips the accounting of every created tensor (LiveTracker, a Python
    dispatch mode costing ~5% on this CPU; CUDA's allocator does it for free): then only
    weights, optimizer state and the saved tensors of swapped blocks are on the ledger.
    The forward builds one autograd graph: kept blocks save as usual, swapped blocks
    pack their saved tensors into a store copied to the host, recomputed blocks are
    torch.utils.checkpoint segments whose input is the only saved tensor (kept, or
    swapped when the checkpoint lives on the host). One backward call runs it all; a
    hook on each block's output marks where the block's backward starts, which is
    when the blocks `depth` ahead are prefetched and the block before is finished.
    """
    check_plan(chain, plan)
    streamed = plan.weights == "streamed"
    host_side = isinstance(optimizer, HostWeights)
    if streamed and not host_side:
        raise KarmaError("streamed weights need a HostWeights optimizer (karma.runtime.streamed)")
    # Tensors caught in reference cycles (autograd nodes and hook closures) live until Python's
    # collector runs, at a different moment each run: collect before a memory step, not during it,
    # so that its memory is the same every run. Not before a timed step: a full collection takes
    # 80-150 ms in a process holding torch and pandas, a third of a small model's step, which a
    # plain PyTorch loop does not pay (the runtime's own overhead is ~2%: tests/benchmarks).
    if track:
        gc.collect()
    try:
        with _collector_paused():
            return _train_step(chain, plan, optimizer, batch, ledger, link, track)
    finally:
        gc.collect(0)  # the step's own cycles (~500 objects, 0.1 ms), before the next step allocates


@contextlib.contextmanager
def _collector_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _train_step(chain: ChainModel, plan: Plan, optimizer, batch, ledger: Ledger, link: EmulatedLink,
                track: bool) -> StepReport:
    units = list(chain.units.children())
    streamed = plan.weights == "streamed"
    host_side = isinstance(optimizer, HostWeights)
    device = next(chain.units.parameters()).device
    _synchronize(device)
    start = time.perf_counter()
    ledger.start = start
    ledger.peak = ledger.used
    link.reset_clock(start)
    compute: list[Event] = []
    weights = list(chain.units.parameters())
    params = {storage_key(p): p for p in weights} | {("id", id(p)): p for p in weights}
    depth = plan.prefetch_depth
    blocks = plan.blocks
    nb = len(blocks)
    inputs, targets = batch

    def record(op: str, k: int, t0: float) -> None:
        compute.append(Event("compute", op, k, t0 - start, time.perf_counter() - start))

    uploads: list[Future | None] = [None] * nb
    if streamed:
        for j in range(min(depth, nb)):
            uploads[j] = optimizer.upload(j, link, ledger)
    else:
        for p in chain.units.parameters():  # weights (and optimizer state): resident for the whole step
            ledger.hold(storage_key(p), storage_bytes(p), "weights", "weights")
        if not host_side:  # its state, and fp32 masters of 16-bit weights (karma.core.precision)
            state_bytes = optimizer_bytes(chain.units.parameters(), chain.optimizer)
            ledger.hold("optimizer state", state_bytes, "weights", "optimizer state")

    to_host_side = [b.policy == "swap" or (b.policy == "recompute" and b.checkpoint == "host") for b in blocks]
    stores: list[SavedTensors] = []
    for k, away in enumerate(to_host_side):  # adjacent swapped blocks copy a tensor both save once
        both = k and blocks[k].policy == blocks[k - 1].policy == "swap"
        stores.append(SavedTensors(k, away, ledger, params, prev=stores[k - 1] if both else None,
                                   checkpoint=blocks[k].policy == "recompute"))
    swapped: list[Future | None] = [None] * nb
    downloads: list[Future] = []
    tracker = LiveTracker(ledger) if track else _Untracked()
    begun = [0.0] * nb

    def block_fn(k: int):
        mods = [units[i] for i in blocks[k].units]
        last = k == nb - 1

        def handed(holder: list):
            """The block's forward of the input `holder` hands over: the step keeps no reference to it, so the
            block's first unit is its last reader unless a unit saved it (a plain forward's lifetime, as
            karma/sim/simulate.py counts; an argument would live on the caller's stack until the call returns)."""
            x = holder.pop()
            for m in mods:
                x = m(x)
            return chain.loss(x, targets) if last else x

        return handed, mods

    def issue_prefetch(j: int) -> None:
        if streamed:
            uploads[j] = optimizer.upload(j, link, ledger)
        if swapped[j] is not None:
            stores[j].prefetch(link, swapped[j])

    # A block's gradients go down once every weight it owns has its gradient accumulated: the
    # hook on the previous block's output can fire before the autograd engine has run the
    # block's last AccumulateGrad, so the download waits for each weight's post-accumulate hook.
    waiting = [set() for _ in range(nb)]
    downloaded = [False] * nb
    hooks = []

    def download(k: int) -> None:
        if not downloaded[k]:
            downloaded[k] = True
            downloads.append(optimizer.download(k, link, ledger))

    if host_side:
        for k in range(nb):
            for p in optimizer.owned[k]:
                if p.requires_grad:
                    waiting[k].add(id(p))

                    def accumulated(p, k=k):
                        waiting[k].discard(id(p))
                        if not waiting[k]:
                            download(k)

                    hooks.append(p.register_post_accumulate_grad_hook(accumulated))
            if not waiting[k]:
                downloaded[k] = True  # nothing to send

    def finish(k: int) -> None:
        """Block k's backward is over: free what it held."""
        record("backward", k, begun[k])
        stores[k].release()
        if streamed:
            optimizer.evict(k, ledger)

    def on_block_backward(k: int):
        def hook(grad):
            if k + 1 < nb:
                finish(k + 1)
            tracker.where = f"backward of block {k}"
            if k - depth >= 0:
                issue_prefetch(k - depth)
            if streamed:
                uploads[k].result()
            if stores[k].back is not None:
                stores[k].back.result()
            # the backward starts once its copies are back: a wait for them is a gap on the compute queue,
            # as the simulator has it (karma/runtime/attribution.py)
            begun[k] = time.perf_counter()
            return grad

        return hook

    with tracker, _named_cuda_oom(tracker):
        x = inputs
        with chain.autocast():  # mixed precision: autocast around the forwards (a recompute restores it
            # itself, torch.utils.checkpoint); the backward runs outside it
            for k, b in enumerate(blocks):
                for j in range(0, k - depth + 1):
                    if swapped[j] is not None:
                        swapped[j].result()
                if streamed:
                    if uploads[k] is None:  # depth 0: on demand
                        uploads[k] = optimizer.upload(k, link, ledger)
                    uploads[k].result()
                    if depth and k + depth < nb:
                        uploads[k + depth] = optimizer.upload(k + depth, link, ledger)
                tracker.where = f"forward of block {k}"
                t0 = time.perf_counter()
                handed, mods = block_fn(k)
                # A timed step on the emulated device skips the accounting of what kept blocks save (their
                # memory is the memory step's to measure): Python pack hooks on every saved tensor cost ~2%.
                hooked = track or stores[k].swap or streamed
                with torch.autograd.graph.saved_tensors_hooks(stores[k].pack, stores[k].unpack) if hooked \
                        else contextlib.nullcontext():
                    if b.policy == "recompute":  # checkpoint holds its inputs through the segment (its checkpoint)
                        out = checkpointed(lambda t, run=handed: run([t]), mods, x)  # bound now: run again later
                    else:
                        holder, x = [x], None
                        out = handed(holder)
                if stores[k].swap:
                    swapped[k] = stores[k].swap_out(link)
                record("forward", k, t0)
                if streamed:
                    optimizer.evict(k, ledger)
                roots = [t for t in tensors(out) if t.requires_grad]
                if roots and k < nb - 1:  # the block's backward starts with the first gradient of its output
                    torch.autograd.graph.register_multi_grad_hook(roots, on_block_backward(k), mode="any")
                del roots
                x, out = out, None  # one reference to the boundary: the next block takes it over
        loss = x
        value = loss.detach().item()
        for j in range(nb - 1, max(nb - 1 - depth, -1), -1):
            issue_prefetch(j)
        on_block_backward(nb - 1)(None)
        try:
            scaled(optimizer, loss).backward()
        finally:
            for handle in hooks:
                handle.remove()
        finish(0)
        for k in range(nb - 1, -1, -1):  # weights that got no gradient this step
            if host_side and not downloaded[k]:
                download(k)
        del loss, x, out
    t0 = time.perf_counter()
    if host_side:
        for future in downloads:
            future.result()
        optimizer.finish()
        record("host optimizer (wait)", 0, t0)
    else:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        record("optimizer step", 0, t0)
    ledger.release_all("weights")
    _synchronize(device)  # a GPU step ends when its kernels do, not when they are launched
    end = time.perf_counter() - start
    timeline = sorted(compute + link.events, key=lambda e: e.start)
    return StepReport(loss=value, time=end, peak_bytes=ledger.peak, bytes_h2d=link.bytes["h2d"],
                      bytes_d2h=link.bytes["d2h"], timeline=timeline, device=link.label, memory_wait=ledger.waited)

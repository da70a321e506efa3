"""Execute one training step of a chain model under a Plan, on the emulated device.

The chain runs block by block. Forward: a block's saved tensors go through
pack hooks that account them on the device ledger; a swapped block's are
copied to the host after its forward (freed when the copy ends); a
recomputed block runs without saving anything, keeping only its input (on
the device, or copied to the host). Backward runs block by block in reverse:
the prefetches of block b are issued when block b+depth's backward starts,
a recomputed block re-runs its forward (RNG state restored, BatchNorm
statistics put back, so it matches plain training) just before its
backward. The same ordering rules as the simulator (karma/simulate.py), so
that every run also checks the model.
"""

from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from karma.errors import KarmaError
from karma.plan import Plan
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.streamed import HostWeights
from karma.simulate import Event
from karma.unit_trace import storage_bytes, storage_key
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
    device: str = ""


def make_optimizer(chain: ChainModel, lr: float = 0.01) -> torch.optim.Optimizer:
    """The paper setting's optimizer, single-tensor implementation (identical rounding everywhere)."""
    params = list(chain.units.parameters())
    if chain.optimizer == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=False)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=False)


def check_plan(chain: ChainModel, plan: Plan) -> None:
    if plan.units != len(chain) or plan.model != chain.name:
        raise KarmaError(f"plan is for {plan.model} with {plan.units} units; the model is {chain.name} "
                         f"with {len(chain)} units")


class _Saved:
    """The tensors one block saved for backward, and where they are."""

    def __init__(self, k: int, swap: bool, ledger: Ledger, params: set[int]):
        self.k, self.swap, self.ledger, self.params = k, swap, ledger, params
        self.device: list[torch.Tensor] = []
        self.keys: dict[int, int] = {}
        self.host: list[torch.Tensor] | None = None
        self.back: Future | None = None

    def pack(self, t: torch.Tensor):
        key = storage_key(t)
        if key in self.params:
            return ("param", t)
        if key not in self.keys:
            self.keys[key] = storage_bytes(t)
            self.ledger.hold(key, self.keys[key], self, f"block {self.k}")
        if not self.swap:
            return ("keep", t)
        self.device.append(t)
        return ("swap", len(self.device) - 1)

    def unpack(self, packed):
        kind, value = packed
        if kind != "swap":
            return value
        return self.back.result()[value]

    @property
    def nbytes(self) -> int:
        return sum(self.keys.values())

    def swap_out(self, link: EmulatedLink) -> Future:
        tensors = self.device

        def copy():
            return [t.detach().clone() for t in tensors]

        def done(host):
            self.host = host
            self.device = []
            for key in list(self.keys):
                self.ledger.release(key, self)

        future = link.submit("d2h", self.nbytes, copy, "swap out", self.k)
        future.add_done_callback(lambda f: f.exception() is None and done(f.result()))
        return future

    def prefetch(self, link: EmulatedLink, after: Future) -> None:
        owner = (self, "back")

        def start():
            after.result()
            for key, nbytes in self.keys.items():
                self.ledger.hold(key, nbytes, owner, f"prefetch of block {self.k}")

        def copy():
            return [t.clone() for t in self.host]

        self.back = link.submit("h2d", self.nbytes, copy, "prefetch", self.k, on_start=start)

    def release(self) -> None:
        self.ledger.release_all(self)
        self.ledger.release_all((self, "back"))


def _bn_buffers(module: torch.nn.Module) -> list[torch.Tensor]:
    return [b for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for b in m.buffers()]


def train_step(chain: ChainModel, plan: Plan, optimizer: torch.optim.Optimizer | HostWeights, batch,
               ledger: Ledger, link: EmulatedLink) -> StepReport:
    """One step of `chain` under `plan`; raises DeviceOOM (naming the block) if it does not fit.

    `optimizer` is a torch optimizer for resident weights, a HostWeights for streamed ones.
    """
    check_plan(chain, plan)
    streamed = plan.weights == "streamed"
    if streamed != isinstance(optimizer, HostWeights):
        raise KarmaError("streamed weights need a HostWeights optimizer (karma.runtime.streamed), "
                         "resident weights a torch optimizer")
    units = list(chain.units.children())
    start = time.perf_counter()
    ledger.start = start
    ledger.peak = ledger.used
    link.reset_clock(start)
    compute: list[Event] = []
    params = {storage_key(p) for p in chain.units.parameters()}
    depth = plan.prefetch_depth
    nb = len(plan.blocks)

    def run(k: int, x: torch.Tensor) -> torch.Tensor:
        b = plan.blocks[k]
        for i in b.units:
            x = units[i](x)
        return x

    def record(op: str, k: int, t0: float) -> None:
        compute.append(Event("compute", op, k, t0 - start, time.perf_counter() - start))

    inputs, targets = batch
    uploads: list[Future | None] = [None] * nb
    if streamed:
        for j in range(min(depth, nb)):
            uploads[j] = optimizer.upload(j, link, ledger)
    else:
        for p in chain.units.parameters():  # weights, optimizer state: resident for the whole step
            ledger.hold(storage_key(p), storage_bytes(p), "weights", "weights")
        state_bytes = sum(p.numel() * p.element_size() for p in chain.units.parameters()) * \
            {"sgd": 1, "adam": 2}[chain.optimizer]
        ledger.hold("optimizer state", state_bytes, "weights", "optimizer state")

    saved: list[_Saved] = []
    block_in: list[torch.Tensor] = []
    block_out: list[torch.Tensor] = []
    rng: list[torch.Tensor] = []
    swap_done: list[Future | None] = [None] * nb
    ckpt_host: list[Future | None] = [None] * nb
    x = inputs
    for k, b in enumerate(plan.blocks):
        for j in range(0, k - depth + 1):
            if swap_done[j] is not None:
                swap_done[j].result()
        if k > 0 and x.is_floating_point():
            x = x.detach().requires_grad_(True)
        block_in.append(x)
        store = _Saved(k, b.policy == "swap", ledger, params)
        saved.append(store)
        if streamed:
            uploads[k].result()
            if k + depth < nb:
                uploads[k + depth] = optimizer.upload(k + depth, link, ledger)
        rng.append(torch.get_rng_state())
        t0 = time.perf_counter()
        last = k == nb - 1
        if b.policy == "recompute":
            ledger.hold(storage_key(x), storage_bytes(x), ("ckpt", k), f"checkpoint of block {k}")
            if b.checkpoint == "host":
                key, nbytes = storage_key(x), storage_bytes(x)
                ckpt_host[k] = link.submit("d2h", nbytes, x.detach().clone, "offload checkpoint", k)
                ckpt_host[k].add_done_callback(lambda f, key=key, k=k: ledger.release(key, ("ckpt", k)))
            with torch.no_grad():
                out = run(k, x)
                if last:
                    out = chain.loss(out, targets)
        else:
            with torch.autograd.graph.saved_tensors_hooks(store.pack, store.unpack):
                out = run(k, x)
                if last:
                    out = chain.loss(out, targets)
            if b.policy == "swap":
                swap_done[k] = store.swap_out(link)
        record("forward", k, t0)
        if streamed:
            optimizer.evict(k, ledger)
        block_out.append(out)
        x = out
    loss = block_out[-1].detach().item()

    def issue_prefetch(j: int) -> None:
        b = plan.blocks[j]
        if streamed:
            uploads[j] = optimizer.upload(j, link, ledger)
        if b.policy == "swap":
            saved[j].prefetch(link, swap_done[j])
        elif b.policy == "recompute" and b.checkpoint == "host":
            key, nbytes = storage_key(block_in[j]), storage_bytes(block_in[j])
            host = ckpt_host[j]

            def start(j=j, key=key, nbytes=nbytes, host=host):
                host.result()
                ledger.hold(key, nbytes, ("ckpt", j), f"checkpoint prefetch of block {j}")

            ckpt_host[j] = link.submit("h2d", nbytes, lambda host=host: host.result().clone(),
                                       "prefetch checkpoint", j, on_start=start)

    for j in range(nb - 1, max(nb - 1 - depth, -1), -1):
        issue_prefetch(j)
    grad = None
    downloads: list[Future] = []
    for k in range(nb - 1, -1, -1):
        b = plan.blocks[k]
        last = k == nb - 1
        first = True
        t0 = time.perf_counter()
        if streamed:
            uploads[k].result()
        for p in (p for i in b.units for p in units[i].parameters()):
            ledger.hold(("grad", id(p)), storage_bytes(p), "grads", f"gradients of block {k}")
        if b.policy == "recompute":
            x = block_in[k]
            if b.checkpoint == "host":
                x = ckpt_host[k].result().requires_grad_(x.requires_grad)
            if k - depth >= 0:
                issue_prefetch(k - depth)
                first = False
            bn = [buf.clone() for buf in _bn_buffers(torch.nn.ModuleList(units[i] for i in b.units))]
            now = torch.get_rng_state()
            torch.set_rng_state(rng[k])
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(saved[k].pack, saved[k].unpack):
                out = run(k, x)
                if last:
                    out = chain.loss(out, targets)
            torch.set_rng_state(now)
            for buf, old in zip(_bn_buffers(torch.nn.ModuleList(units[i] for i in b.units)), bn, strict=True):
                buf.copy_(old)
            record("recompute", k, t0)
            t0 = time.perf_counter()
            block_in[k] = x
        else:
            out = block_out[k]
            if b.policy == "swap":
                saved[k].back.result()
        if first and k - depth >= 0:
            issue_prefetch(k - depth)
        out.backward(grad)
        record("backward", k, t0)
        if streamed:
            optimizer.evict(k, ledger)
            downloads.append(optimizer.download(k, link, ledger))
        saved[k].release()
        if b.policy == "recompute":
            ledger.release(storage_key(block_in[k]), ("ckpt", k))
        block_out[k] = None
        grad = block_in[k].grad if block_in[k].requires_grad else None
    t0 = time.perf_counter()
    if streamed:
        for future in downloads:
            future.result()
        optimizer.finish()
        record("host optimizer (wait)", 0, t0)
    else:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        record("optimizer step", 0, t0)
    ledger.release_all("grads")
    ledger.release_all("weights")
    end = time.perf_counter() - start
    timeline = sorted(compute + link.events, key=lambda e: e.start)
    return StepReport(loss=loss, time=end, peak_bytes=ledger.peak, bytes_h2d=link.bytes["h2d"],
                      bytes_d2h=link.bytes["d2h"], timeline=timeline)

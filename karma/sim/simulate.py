"""The performance model: a deterministic event simulation of one training
iteration of (Profile, Plan, Hardware) (KARMA Sec. IV, "concurrency analysis").

Resources are in-order queues, like CUDA streams: ``compute`` (the device),
``h2d`` and ``d2h`` (the host link; one shared ``link`` queue when the
Hardware's link is half duplex) and ``host`` (the CPU running the optimizer
for streamed weights). Operations are issued in program order; each starts
when its queue is free and its dependencies are met, and lasts its cost:
profile times for compute, bytes / bandwidth for copies, bytes touched /
host update rate for the host optimizer.

Device memory is accounted at operation boundaries (allocated at the start
of the op that produces it, a copy to the device when it is issued, freed at
the end of the op that last needs it):

* static: buffers, plus weights and optimizer state when weights are resident (in
  mixed precision the 16-bit weights; the optimizer's fp32 masters and state only
  with the optimizer on the device: karma/core/precision.py, whose profile fields make
  these the same formulas in every precision; streamed weights and the host
  optimizer move the 16-bit weights and gradients, and the host updates the fp32
  masters);
* per unit, its saved activations (a tensor shared by two units of one block
  counted once) from its forward to its backward; for swapped blocks until
  the copy to the host ends and again from the prefetch to the backward; for
  recomputed blocks only during the forward and from the recompute on;
* a recomputed block's checkpoint (its input) until its backward, unless it
  is swapped to the host; its first unit saves that same tensor when it runs
  again, so it is not counted twice;
* during a unit's forward its (forward) workspace; during its backward the
  gradient of its output (none for the last unit, which starts from the scalar
  loss; in a recomputed block from the start of its recompute), of its input
  and its backward workspace (a unit that makes its input gradient last, a
  convolution of a layer chain, runs it as two ops of half the backward each,
  as the weight and input gradients cost a forward each: the input gradient
  is allocated in the second, after a saved input nothing else holds is
  gone, karma/sim/boundary_memory.py); weight gradients from the
  backward to the optimizer step (resident) or the download (streamed);
* streamed weights from their upload to the end of the block's pass (a tied
  weight with every block that uses it, as the runtime uploads it); a tied
  weight's gradient from the backward of the last unit using it.

A tensor saved both by a unit (its output) and by the next (its input) is
one tensor: counted once inside a block and between two kept blocks, and a
recomputed block after a kept one needs no extra checkpoint on the device (the
kept unit holds it until its own, later, backward); a checkpoint on the host is
still copied whole each way, and its copy back is a second tensor on the device,
as the runtime does it (karma/runtime/saved.py: the store packs the segment's
input, whoever else holds it). Between two swapped blocks it is
copied once, as vDNN offloads each layer's input once (Rhu et al. 2016, Sec.
III-B) and as the runtime does (karma/runtime/saved.py): out with the earlier
block's copy (freed once that copy and the later block's forward are over),
back with the later block's prefetch (which runs first in the backward), and
held until the earlier block's backward. Elsewhere it is counted in both
(conservative by at most one boundary activation per block boundary).
A block's copy to the host (its swapped activations, or its checkpoint on the
host) is issued when its forward ends, as the runtime copies out what the block
saved once its forward is over (karma/runtime/execute.py). The forward of block b
waits for the copies to the host of blocks up to b-depth (depth 1:
the previous block's copy must be done, vDNN's per-layer synchronisation;
deeper: more copies in flight), and the prefetches of block
b are issued when the backward of block b+depth starts (depth 0: when block b's own
backward is due, which then waits for them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.core.precision_bytes import master_bytes
from karma.plan.plan import Plan, from_policies
from karma.profile.profile import OPTIMIZER_STATE_FACTOR, Profile, input_gradient_bytes
from karma.sim.block_bytes import BlockBytes, block_bytes
from karma.sim.boundary_memory import OpTimes, hold_boundary_storages
from karma.sim.compiled import simulate_compiled
from karma.sim.network import allreduce_time, nodes_for
from karma.sim.schedule import Event, Schedule


@dataclass
class SimResult:
    """What one iteration costs. `time` is None when the plan does not fit (then `reason` says why)."""

    time: float | None
    makespan: float
    peak_bytes: float
    capacity: float
    busy: dict[str, float]
    bytes_h2d: float
    bytes_d2h: float
    timeline: list[Event] = field(repr=False)
    reason: str | None = None
    memory: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (s, bytes) when recorded

    @property
    def feasible(self) -> bool:
        return self.reason is None


def optimizer_traffic_bytes(param_bytes: float, optimizer: str, optimizer_bytes: float | None = None) -> float:
    """Bytes an optimizer step streams through memory: read weight, gradient and
    state, write weight and state, i.e. (3 + 2k) x weight bytes with k state
    tensors per weight (SGD momentum k=1, Adam k=2; Kingma & Ba 2015). Given the
    optimizer's bytes too, the weights are its fp32 masters (karma.core.precision.master_bytes):
    in mixed precision read master 4 + 16-bit gradient 2 + state 4k, write master 4 +
    state 4k + the 16-bit copy 2 = (3 + 2k) x 4 bytes per weight, twice the 16-bit
    weight bytes; in fp32 the masters are the weights and nothing changes."""
    k = OPTIMIZER_STATE_FACTOR[optimizer]
    weights = param_bytes if optimizer_bytes is None else master_bytes(param_bytes, optimizer_bytes, optimizer)
    return (3 + 2 * k) * weights


@dataclass
class _Iteration:
    """One iteration being scheduled: inputs, the schedule, and what the phases hand on."""

    profile: Profile
    plan: Plan
    hw: Hardware
    s: Schedule
    by: BlockBytes
    host_side: bool
    gpus: int
    order: str
    swap_out_end: list[float] = field(default_factory=list)
    ckpt_out_end: list[float] = field(default_factory=list)
    prefetch_end: list[float] = field(default_factory=list)
    forward_end: float = 0.0
    backward_end: float = 0.0
    grads_down_end: float = 0.0
    host_end: float = 0.0
    net_end: float = 0.0
    pending: list[tuple[int, float]] = field(default_factory=list)
    uploads: list[tuple[float, int]] = field(default_factory=list)  # host-updated weights to go up: (issue, k)
    uploads_queued: int = 0  # how many of them are on the h2d queue
    times: OpTimes = field(default_factory=OpTimes)

    streamed: bool = field(init=False, default=False)  # the plan's weights are streamed

    def __post_init__(self):
        self.streamed = self.plan.weights == "streamed"

    def upload(self, k: int, ready: float) -> float:
        """Block k's weights up (streamed); returns when they are there."""
        uses = self.by.uses[k]
        return self.s.op("h2d", "upload weights", k, ready, uses / self.hw.h2d_bw, alloc=uses, alloc_at=ready)[1]

    def queue_updated_weights(self, until: float = math.inf) -> None:
        """Queue on h2d the uploads of host-updated resident weights issued by `until`, in the order of their
        issue. The host issues each when its update ends, so a copy the compute issued earlier (a prefetch for
        the backward) goes first, as on the runtime's link (a queue in the order copies are submitted,
        karma/runtime/link.py) and on a CUDA stream. Queued in program order instead, a late upload holds back
        the prefetches behind it, the simulated backward waits for them while the gradients' downloads drain,
        and the simulated peak falls under the runtime's (tests/sim/test_simulate.py;
        docs/measurements/README.md)."""
        uploads = self.uploads  # in the order of their issue: the host's queue runs the updates in order
        while self.uploads_queued < len(uploads) and uploads[self.uploads_queued][0] <= until:
            issue, k = uploads[self.uploads_queued]
            self.uploads_queued += 1
            self.host_end = max(self.host_end, self.s.op("h2d", "upload weights", k, issue,
                                                         self.by.params[k] / self.hw.h2d_bw)[1])


def simulate(profile: Profile, plan: Plan, hw: Hardware, capacity: float | None = None,
             record: bool = True, gpus: int = 1, order: str = "pipelined",
             host_updates: bool | None = None, optimizer_shards: int = 1, reference: bool = False) -> SimResult:
    """Simulate one iteration; `capacity` defaults to the Hardware's device memory.

    Without `record` (no timeline, no memory curve: what searches ask for) the iteration runs in
    karma/sim/compiled.py, the same operations compiled; `reference` runs this module's Python instead,
    the specification the compiled one is tested against (tests/sim/test_compiled.py).

    With `gpus` > 1 it is one rank of data parallel training (KARMA Sec. V): each
    block's gradients are all-reduced on the ``network`` queue (karma/sim/network.py) as
    soon as they are ready (``order='pipelined'``: after their download to the host
    for streamed weights, after the block's backward for resident ones), or all after
    the backward (``'naive'``); a block's host update waits for its all-reduce, a
    device optimizer step for all of them. `host_updates` (default: the plan's
    `host_optimizer`) keeps resident weights on the device but the optimizer on the host: each
    block's gradients go down after its backward, are all-reduced and applied there,
    and the updated weights go back up in the gap before the next iteration.
    `optimizer_shards` > 1 is ZeRO stage 1 (Rajbhandari et al. SC'20): a device optimizer
    step updates only this rank's 1/shards of the weights (the profile's optimizer bytes
    are expected to be sharded already; see karma/parallel/megatron_model.py).
    """
    if plan.units != len(profile.units):
        raise KarmaError(f"plan is for {plan.units} units, the profile of {profile.model} has {len(profile.units)}")
    if order not in ("pipelined", "naive"):
        raise KarmaError(f"order must be pipelined or naive, got {order!r}")
    capacity = hw.device_memory if capacity is None else capacity
    host_side = plan.host_optimizer if host_updates is None else (host_updates or plan.host_optimizer)
    nodes = nodes_for(gpus, hw)
    if not record and not reference:
        out = simulate_compiled(profile, plan, hw, capacity, host_side, gpus, nodes, order, optimizer_shards)
        reason = None if out.over_block is None else _over(plan, out.over_block, out.peak, capacity)
        return SimResult(time=None if reason else out.end, makespan=out.end, peak_bytes=out.peak, capacity=capacity,
                         busy=out.busy, bytes_h2d=out.bytes_h2d, bytes_d2h=out.bytes_d2h, timeline=[], reason=reason)
    it = _Iteration(profile, plan, hw, Schedule(hw.link_duplex, record), block_bytes(profile, plan, host_side),
                    host_side, gpus, order, times=OpTimes.sized(len(profile.units), len(plan.blocks)))
    _forward(it)
    _backward(it)
    end = _optimizer(it, optimizer_shards)
    if it.by.storages:
        hold_boundary_storages(profile, plan, it.s, it.times, it.swap_out_end, it.ckpt_out_end)
    return _result(it, end, capacity)


def _forward(it: _Iteration) -> None:
    """Every block's forward in order: uploads `depth` blocks ahead (streamed), a recomputed block's
    checkpoint (offloaded when on the host), a swapped block's copy out after its forward."""
    s, by, plan, hw, units = it.s, it.by, it.plan, it.hw, it.profile.units
    blocks, depth, nb = plan.blocks, plan.prefetch_depth, len(plan.blocks)
    it.swap_out_end = [0.0] * nb
    it.ckpt_out_end = [0.0] * nb
    weights_up_end = [0.0] * nb
    t = copied = 0.0  # copied: when the copies to the host of the blocks before `depth` blocks back are done
    if it.streamed:
        for k in range(min(depth, nb)):
            weights_up_end[k] = it.upload(k, 0.0)
    for k, b in enumerate(blocks):
        ready = t
        if it.streamed and not depth:  # on demand: its weights go up when its forward is due
            weights_up_end[k] = it.upload(k, t)
        if k - depth >= 0:  # copies to the host (swapped blocks, host checkpoints) `depth` blocks back are done
            # (block k itself, at depth 0, has issued none yet)
            back = k - depth if depth else k - 1
            if back >= 0:
                copied = max(copied, it.swap_out_end[back], it.ckpt_out_end[back])
            ready = max(ready, copied)
        if it.streamed:
            ready = max(ready, weights_up_end[k])
        it.times.block_start[k] = ready
        if b.policy == "recompute":
            s.alloc(ready, by.mem_ckpt[k], k)
        if it.streamed and depth and k + depth < nb:
            # issued as the block's forward starts: before that forward's frees, even when it takes no time
            weights_up_end[k + depth] = it.upload(k + depth, s.start_at("compute", ready))
        for i in range(b.start, b.stop):
            u = units[i]
            keep = by.own[i] if b.policy != "recompute" else 0.0
            start, t = s.op("compute", "forward", k, ready, u.forward_time,
                            alloc=by.own[i] + by.workspace[i], free=by.workspace[i] + by.own[i] - keep)
            it.times.forward[i] = (start, t)
            ready = t
        if it.streamed:
            s.release(t, by.uses[k], k, after_allocs=t == s.compute_start)
        if k and by.mem_borrowed[k]:  # the input it shares with the swapped block before: gone once both let go
            s.release(max(t, it.swap_out_end[k - 1]), by.mem_borrowed[k], k)
        if b.policy == "swap":
            it.swap_out_end[k] = s.op("d2h", "swap out", k, t, by.act[k] / hw.d2h_bw, free=by.mem_out[k])[1]
        elif b.policy == "recompute" and b.checkpoint == "host":  # what the block saved goes once it is over
            it.ckpt_out_end[k] = s.op("d2h", "offload checkpoint", k, t, by.ckpt[k] / hw.d2h_bw,
                                      free=by.mem_ckpt[k])[1]
    it.forward_end = t


def _prefetch(it: _Iteration, k: int, issue: float) -> None:
    """Bring block k back for its backward: its weights (streamed), its swapped activations or its
    checkpoint from the host, each after its own copy out ended. The destinations are allocated at
    `issue` (or when that copy out ends, if later: its device copy is freed then), not when the link
    gets to the copy: the runtime allocates them when it issues the copy, as a CUDA program allocates
    a copy's destination on the compute thread before queueing the copy on a stream, so no link
    faster than planned needs more memory for the copy (with weights resident and the optimizer on the
    device, none at all: tests/sim/test_simulate.py)."""
    s, by, hw, b = it.s, it.by, it.hw, it.plan.blocks[k]
    it.queue_updated_weights(issue)
    end = issue
    if it.streamed:
        end = it.upload(k, issue)
    if b.policy == "swap":
        it.times.prefetch_start[k] = ready = max(issue, it.swap_out_end[k])
        end = s.op("h2d", "prefetch", k, ready, by.back(k) / hw.h2d_bw, alloc=by.mem_back[k], alloc_at=ready)[1]
    elif b.policy == "recompute" and b.checkpoint == "host":
        it.times.prefetch_start[k] = ready = max(issue, it.ckpt_out_end[k])
        end = s.op("h2d", "prefetch checkpoint", k, ready, by.ckpt[k] / hw.h2d_bw, alloc=by.mem_ckpt_back[k],
                   alloc_at=ready)[1]
    it.prefetch_end[k] = end


def _backward(it: _Iteration) -> None:
    """Blocks in reverse: prefetches `depth` blocks ahead, a recomputed block's forwards again, its
    backwards; then its gradients go down and are reduced and applied on the host (host optimizer)
    or reduced on the device (data parallel)."""
    s, by, units, transients = it.s, it.by, it.profile.units, it.profile.transients
    blocks, depth, nb = it.plan.blocks, it.plan.prefetch_depth, len(it.plan.blocks)
    it.prefetch_end = [0.0] * nb
    bwd_ready = it.forward_end
    for k in range(nb - 1, max(nb - 1 - depth, -1), -1):
        _prefetch(it, k, bwd_ready)
    weight_grads = it.profile.weight_gradients
    for k in range(nb - 1, -1, -1):
        b = blocks[k]
        if not depth:  # on demand: its copies back are issued when its backward is due
            _prefetch(it, k, bwd_ready)
        ready = max(bwd_ready, it.prefetch_end[k])
        # what is issued when the block's compute starts comes before its first op in program order: at one
        # time with it (an op of no duration frees at its own end), it is still held beside that op
        begin = s.start_at("compute", ready)
        # the gradient of the block's output (made by the next unit's backward) waits through the recompute
        waiting_grad = it.profile.output_gradients[b.stop - 1] if b.policy == "recompute" else 0.0
        if waiting_grad:
            s.alloc(begin, waiting_grad, k)
        if depth and k - depth >= 0:
            _prefetch(it, k - depth, begin)
        if b.policy == "recompute":
            for i in range(b.start, b.stop):
                u = units[i]
                workspace = by.workspace[i]
                if i == b.stop - 1 and i < len(units) - 1 and not u.saved_output_bytes and not by.storages:
                    # the recompute stops once the last saved tensor is made again (torch.utils.checkpoint's
                    # early stop): an output nobody saved, at the block's end, is not made again
                    workspace = max(workspace - u.output_bytes, 0)
                start, ready = s.op("compute", "recompute", k, ready, u.recompute_time(i == b.stop - 1),
                                    alloc=by.own[i] + workspace, free=workspace)
                it.times.recompute[i] = (start, ready)
        for i in range(b.stop - 1, b.start - 1, -1):
            u = units[i]
            transient = transients[i]
            grads = weight_grads[i]
            if waiting_grad:
                # from here it is the backward's own output gradient: handed over when the backward starts,
                # after its allocation at the recompute's start (at that same time if the recompute takes
                # none; released first, it went uncounted beside a kept backward of no duration there)
                s.release(s.start_at("compute", ready), waiting_grad, k, after_allocs=True)
                waiting_grad = 0.0
            if u.input_grad_last:  # weight gradients, then the input gradient (models/lean_layers.py)
                grad_in = input_gradient_bytes(units, i)
                start, mid = s.op("compute", "backward", k, ready, u.backward_time / 2,
                                  alloc=transient - grad_in + grads)
                _, ready = s.op("compute", "backward", k, mid, u.backward_time / 2, alloc=grad_in,
                                free=transient + by.own[i])
            else:
                start, ready = s.op("compute", "backward", k, ready, u.backward_time,
                                    alloc=transient + grads, free=transient + by.own[i])
                mid = ready
            it.times.backward[i] = (start, ready)
            it.times.weights_done[i] = mid
        bwd_ready = ready
        if b.policy == "recompute":
            s.release(ready, by.mem_ckpt_back[k], k, after_allocs=ready == s.compute_start)
        _gradients_ready(it, k, ready)
    it.backward_end = bwd_ready


def _gradients_ready(it: _Iteration, k: int, ready: float) -> None:
    """Block k's backward ended at `ready`: host optimizer: its gradients go down, are all-reduced
    (pipelined) and applied on the host, resident weights go back up; device optimizer with data
    parallelism: its all-reduce starts (pipelined). The naive order leaves them pending."""
    s, by, hw = it.s, it.by, it.hw
    parallel = it.gpus > 1
    if it.host_side:
        if it.streamed:
            s.release(ready, by.uses[k], k, after_allocs=ready == s.compute_start)
        it.grads_down_end = s.op("d2h", "download gradients", k, ready, by.params[k] / hw.d2h_bw,
                                 free=by.params[k])[1]
        if (parallel and it.order == "naive") or it.plan.update_order == "after-backward":
            it.pending.append((k, it.grads_down_end))
        else:
            if parallel:
                it.grads_down_end = it.net_end = s.op("network", "all-reduce", k, it.grads_down_end,
                                                      allreduce_time(by.params[k], hw, it.gpus))[1]
            _host_update(it, k, it.grads_down_end)
    elif parallel:
        if it.order == "naive":
            it.pending.append((k, ready))
        else:
            it.net_end = s.op("network", "all-reduce", k, ready, allreduce_time(by.params[k], hw, it.gpus))[1]


def _host_update(it: _Iteration, k: int, ready: float) -> None:
    """Block k's optimizer step on the host; resident weights go back up after it."""
    traffic = optimizer_traffic_bytes(it.by.params[k], it.profile.optimizer, it.by.state[k])
    rate = it.hw.host_update_rate(min(it.gpus, it.hw.gpus_per_node))
    updated = it.s.op("host", "optimizer step", k, ready, traffic / rate)[1]
    it.host_end = max(it.host_end, updated)
    if not it.streamed:  # the updated weights go back up, queued when the update ends (queue_updated_weights)
        it.uploads.append((updated, k))


def _optimizer(it: _Iteration, shards: int) -> float:
    """The naive order's all-reduces (after the whole backward), then the optimizer step: on the
    device over every weight (1/shards of them with ZeRO-1), or the host's last update (every block's, with
    the plan's update order after-backward). Returns the end of the iteration."""
    s, by, hw = it.s, it.by, it.hw
    start_naive = max([it.backward_end] + [t for _, t in it.pending])
    for k, _ in it.pending:
        ready = start_naive
        if it.gpus > 1:
            ready = it.net_end = s.op("network", "all-reduce", k, start_naive,
                                      allreduce_time(by.params[k], hw, it.gpus))[1]
        if it.host_side:
            _host_update(it, k, ready)
    if it.host_side:
        it.queue_updated_weights()
        return max(it.backward_end, it.grads_down_end, it.host_end, it.net_end)
    # (the profile's optimizer bytes are this rank's 1/shards: the masters are of all the weights)
    traffic = optimizer_traffic_bytes(sum(by.params), it.profile.optimizer, sum(by.state) * shards) / shards
    return s.op("compute", "optimizer step", 0, max(it.backward_end, it.net_end), traffic / hw.memory_bw,
                free=sum(by.params))[1]


def _result(it: _Iteration, end: float, capacity: float) -> SimResult:
    by, s = it.by, it.s
    peak, over_block, _ = s.peak(by.static, capacity)
    reason = None if over_block is None else _over(it.plan, over_block, peak, capacity)
    h2d, d2h = _link_bytes(it)
    update = s.busy.get("host", 0.0) * it.hw.host_update_rate(min(it.gpus, it.hw.gpus_per_node))
    end = max(end, host_memory_time(it.hw, it.gpus, h2d + d2h + update))
    return SimResult(time=None if reason else end, makespan=end, peak_bytes=peak, capacity=capacity, busy=dict(s.busy),
                     bytes_h2d=h2d, bytes_d2h=d2h, timeline=s.timeline, reason=reason,
                     memory=s.levels(by.static) if s.record else [])


def host_memory_time(hw: Hardware, gpus: int, host_bytes: float) -> float:
    """The least time in which a node's host memory serves one iteration of its ranks: each of the
    min(gpus, gpus_per_node) ranks on it moves `host_bytes` through host memory (its link copies, which a
    DMA reads or writes once, and the bytes its host optimizer updates stream), `host_memory_bw` for the
    whole node. The iteration takes at least that long (the roofline argument of Williams et al., CACM 2009,
    applied to the node's memory); 0 where the Hardware gives no host memory bandwidth. Each rank's updates
    also run at most at its share of that bandwidth (Hardware.host_update_rate)."""
    if not hw.host_memory_bw:
        return 0.0
    return min(gpus, hw.gpus_per_node) * host_bytes / hw.host_memory_bw


def _over(plan: Plan, block: int, peak: float, capacity: float) -> str:
    """Why a plan does not fit: its peak, and the first block whose allocation crossed the capacity."""
    b = plan.blocks[block]
    return (f"needs {peak / 1e9:.3f} GB, {(peak - capacity) / 1e9:.3f} GB over the {capacity / 1e9:.3f} GB "
            f"capacity; first over at block {block} (units {b.start}..{b.stop - 1}, {b.policy})")


def _link_bytes(it: _Iteration) -> tuple[float, float]:
    """Bytes crossing the link (h2d, d2h): streamed weights go up twice, gradients down once; resident
    weights updated on the host go down as gradients and up once, updated."""
    h2d = d2h = 0.0
    by = it.by
    for k, b in enumerate(it.plan.blocks):
        if b.policy == "swap":
            h2d += by.back(k)
            d2h += by.act[k]
        elif b.policy == "recompute" and b.checkpoint == "host":
            h2d += by.ckpt[k]
            d2h += by.ckpt[k]
        if it.streamed:
            h2d += 2 * by.uses[k]  # up for the forward and again for the backward, tied weights with each user
            d2h += by.params[k]
        elif it.host_side:
            h2d += by.params[k]
            d2h += by.params[k]
    return h2d, d2h


#: Rates for a simulation whose result does not depend on them (keeping every unit copies nothing).
_ANY_RATES = Hardware(name="any-rates", device_memory=math.inf, flops=1.0, memory_bw=1.0, h2d_bw=1.0, d2h_bw=1.0,
                      host_update_bw=1.0, kernel_launch=0.0, gpus_per_node=1, intra_node_bw=1.0,
                      intra_node_latency=0.0, inter_node_bw=1.0, inter_node_latency=0.0)


def in_core_peak_bytes(profile: Profile) -> int:
    """Peak device memory of plain (all-resident) training: the profile's closed form
    (`Profile.in_core_peak_bytes`), or with boundary storages (layer granularity) the simulated peak
    of keeping every unit, which follows each storage (karma/sim/boundary_memory.py)."""
    if not profile.storages:
        return profile.in_core_peak_bytes()
    keep = from_policies(profile.model, profile.batch, ["keep"] * len(profile.units))
    return int(simulate(profile, keep, _ANY_RATES, capacity=math.inf, record=False).peak_bytes)

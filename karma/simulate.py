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
of the op that produces it, freed at the end of the op that last needs it):

* static: buffers, plus weights and optimizer state when weights are resident;
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
  and its backward workspace; weight gradients from the
  backward to the optimizer step (resident) or the download (streamed);
* streamed weights from their upload to the end of the block's pass (a tied
  weight with every block that uses it, as the runtime uploads it); a tied
  weight's gradient from the backward of the last unit using it.

A tensor saved both by a unit (its output) and by the next (its input) is
one tensor: counted once inside a block and between two kept blocks, and a
recomputed block after a kept one needs no extra checkpoint (the kept unit
holds it until its own, later, backward). Elsewhere it is counted in both
(conservative by at most one boundary activation per block boundary).
The forward of block b waits for the swap-outs of blocks up to
b-depth (depth 1: the previous block's copy must be done, vDNN's per-layer
synchronisation; deeper: more copies in flight), and the prefetches of block
b are issued when the backward of block b+depth starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from karma.hardware import Hardware
from karma.network import allreduce_time, nodes_for
from karma.plan import Plan
from karma.profile import OPTIMIZER_STATE_FACTOR, GradientBytes, Profile, backward_transient


@dataclass(frozen=True)
class Event:
    """One operation of the timeline, in the simulator's and the runtime's common format."""

    resource: str
    op: str
    block: int
    start: float
    end: float


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

    @property
    def feasible(self) -> bool:
        return self.reason is None


def optimizer_traffic_bytes(param_bytes: float, optimizer: str) -> float:
    """Bytes an optimizer step streams through memory: read weight, gradient and
    state, write weight and state, i.e. (3 + 2k) x weight bytes with k state
    tensors per weight (SGD momentum k=1, Adam k=2; Kingma & Ba 2015)."""
    k = OPTIMIZER_STATE_FACTOR[optimizer]
    return (3 + 2 * k) * param_bytes


class _Schedule:
    """In-order queues and a memory ledger, filled in program order."""

    def __init__(self, duplex: str, record: bool):
        self.free_at: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self.duplex = duplex
        self.mem: list[tuple[float, int, float, int]] = []  # (time, order, delta, block)
        self.record = record
        self.timeline: list[Event] = []
        self.order = 0
        self.compute_start = 0.0

    def queue(self, resource: str) -> str:
        if self.duplex == "half" and resource in ("h2d", "d2h"):
            return "link"
        return resource

    def op(self, resource: str, name: str, block: int, ready: float, duration: float,
           alloc: float = 0.0, free: float = 0.0) -> tuple[float, float]:
        q = self.queue(resource)
        start = max(self.free_at.get(q, 0.0), ready)
        end = start + duration
        self.free_at[q] = end
        if q == "compute":
            self.compute_start = start
        self.busy[q] = self.busy.get(q, 0.0) + duration
        if alloc:
            self.alloc(start, alloc, block)
        if free:
            # an op of no duration frees after its own allocation, not before (frees come first at equal times)
            self.release(end, free, block, after_allocs=end == start)
        if self.record:
            self.timeline.append(Event(q, name, block, start, end))
        return start, end

    def alloc(self, t: float, nbytes: float, block: int) -> None:
        self.order += 1
        self.mem.append((t, 1, nbytes, block))

    def release(self, t: float, nbytes: float, block: int, after_allocs: bool = False) -> None:
        """Frees come first at equal times, except those of an op of no duration (after_allocs)."""
        self.order += 1
        self.mem.append((t, 2 if after_allocs else 0, -nbytes, block))

    def peak(self, base: float, capacity: float) -> tuple[float, int | None, float]:
        """Peak bytes, and the first block whose allocation crossed `capacity` (frees first at equal times)."""
        level = peak = base
        first_over, over_by = (0, base - capacity) if base > capacity else (None, 0.0)
        for _t, _kind, delta, block in sorted(self.mem, key=lambda e: (e[0], e[1])):
            level += delta
            if level > peak:
                peak = level
            if first_over is None and level > capacity:
                first_over, over_by = block, level - capacity
        return peak, first_over, over_by


def simulate(profile: Profile, plan: Plan, hw: Hardware, capacity: float | None = None,
             record: bool = True, gpus: int = 1, order: str = "pipelined",
             host_updates: bool | None = None, optimizer_shards: int = 1) -> SimResult:
    """Simulate one iteration; `capacity` defaults to the Hardware's device memory.

    With `gpus` > 1 it is one rank of data parallel training (KARMA Sec. V): each
    block's gradients are all-reduced on the ``network`` queue (karma/network.py) as
    soon as they are ready (``order='pipelined'``: after their download to the host
    for streamed weights, after the block's backward for resident ones), or all after
    the backward (``'naive'``); a block's host update waits for its all-reduce, a
    device optimizer step for all of them. `host_updates` (default: the plan's
    `host_optimizer`) keeps resident weights on the device but the optimizer on the host: each
    block's gradients go down after its backward, are all-reduced and applied there,
    and the updated weights go back up in the gap before the next iteration.
    `optimizer_shards` > 1 is ZeRO stage 1 (Rajbhandari et al. SC'20): a device optimizer
    step updates only this rank's 1/shards of the weights (the profile's optimizer bytes
    are expected to be sharded already; see karma/model_parallel.py).
    """
    units = profile.units
    if plan.units != len(units):
        from karma.errors import KarmaError

        raise KarmaError(f"plan is for {plan.units} units, the profile of {profile.model} has {len(units)}")
    capacity = hw.device_memory if capacity is None else capacity
    streamed = plan.weights == "streamed"
    host_side = plan.host_optimizer if host_updates is None else (host_updates or plan.host_optimizer)
    if order not in ("pipelined", "naive"):
        from karma.errors import KarmaError

        raise KarmaError(f"order must be pipelined or naive, got {order!r}")
    nodes_for(gpus, hw)
    parallel = gpus > 1
    pending: list[tuple[int, float]] = []
    net_end = 0.0
    depth = plan.prefetch_depth
    blocks = plan.blocks
    nb = len(blocks)
    s = _Schedule(hw.link_duplex, record)

    block_of = [0] * len(units)
    for k, b in enumerate(blocks):
        for i in b.units:
            block_of[i] = k
    own = [u.saved_bytes for u in units]
    for i in range(1, len(units)):
        before, here = blocks[block_of[i - 1]], blocks[block_of[i]]
        if before is here or (before.policy == here.policy == "keep"):
            own[i] -= profile.shared_boundary_bytes(i - 1)
    for b in blocks:  # a recomputed block's first unit saves its input: the block's checkpoint, counted apart
        if b.policy == "recompute":
            own[b.start] -= min(units[b.start].saved_input_bytes, units[b.start].input_bytes)
    act = [sum(own[i] for i in b.units) for b in blocks]
    ckpt_bytes = []
    for k, b in enumerate(blocks):
        shared = profile.shared_boundary_bytes(b.start - 1) if k and blocks[k - 1].policy == "keep" else 0
        ckpt_bytes.append(units[b.start].input_bytes - shared)
    params = [sum(units[i].param_bytes for i in b.units) for b in blocks]
    # streamed blocks upload every weight they use, a tied one (owned by an earlier unit) too
    uses = [params[k] + sum(units[i].tied_param_bytes for i in b.units) for k, b in enumerate(blocks)]
    static = sum(u.buffer_bytes for u in units)
    if not streamed:
        static += sum(u.param_bytes + (0 if host_side else u.optimizer_bytes) for u in units)

    # ---- forward -------------------------------------------------------
    fwd_start = [0.0] * nb
    swap_out_end = [0.0] * nb
    ckpt_out_end = [0.0] * nb
    weights_up_end = [0.0] * nb
    t = 0.0
    if streamed:
        for k in range(min(depth, nb)):
            weights_up_end[k] = s.op("h2d", "upload weights", k, 0.0, uses[k] / hw.h2d_bw, alloc=uses[k])[1]
    for k, b in enumerate(blocks):
        ready = t
        if k - depth >= 0:
            ready = max(ready, max(swap_out_end[: k - depth + 1]))
        if streamed:
            ready = max(ready, weights_up_end[k])
        if b.policy == "recompute":
            ckpt = ckpt_bytes[k]
            s.alloc(ready, ckpt, k)
        first = True
        for i in b.units:
            u = units[i]
            keep = own[i] if b.policy != "recompute" else 0.0
            start, t = s.op("compute", "forward", k, ready, u.forward_time,
                            alloc=own[i] + u.workspace_bytes, free=u.workspace_bytes + own[i] - keep)
            ready = t
            if first:
                fwd_start[k] = start
                first = False
                if streamed and k + depth < nb:
                    j = k + depth
                    weights_up_end[j] = s.op("h2d", "upload weights", j, start, uses[j] / hw.h2d_bw,
                                             alloc=uses[j])[1]
                if b.policy == "recompute" and b.checkpoint == "host":
                    ckpt_out_end[k] = s.op("d2h", "offload checkpoint", k, start, ckpt / hw.d2h_bw,
                                           free=ckpt)[1]
        if streamed:
            s.release(t, uses[k], k, after_allocs=t == s.compute_start)
        if b.policy == "swap":
            swap_out_end[k] = s.op("d2h", "swap out", k, t, act[k] / hw.d2h_bw, free=act[k])[1]

    # ---- backward ------------------------------------------------------
    grads_down_end = 0.0
    bwd_ready = t
    prefetch_end = [0.0] * nb

    def prefetch(k: int, issue: float) -> None:
        b = blocks[k]
        end = issue
        if streamed:
            end = s.op("h2d", "upload weights", k, issue, uses[k] / hw.h2d_bw, alloc=uses[k])[1]
        if b.policy == "swap":
            end = s.op("h2d", "prefetch", k, max(issue, swap_out_end[k]), act[k] / hw.h2d_bw, alloc=act[k])[1]
        elif b.policy == "recompute" and b.checkpoint == "host":
            ckpt = ckpt_bytes[k]
            end = s.op("h2d", "prefetch checkpoint", k, max(issue, ckpt_out_end[k]), ckpt / hw.h2d_bw,
                       alloc=ckpt)[1]
        prefetch_end[k] = end

    for k in range(nb - 1, max(nb - 1 - depth, -1), -1):
        prefetch(k, bwd_ready)
    tied_grads = GradientBytes()
    host_t = 0.0
    for k in range(nb - 1, -1, -1):
        b = blocks[k]
        ready = max(bwd_ready, prefetch_end[k])
        first = True
        # the gradient of the block's output (made by the next unit's backward) waits through the recompute
        waiting_grad = units[b.stop - 1].output_bytes if b.policy == "recompute" and b.stop < len(units) else 0.0
        if b.policy == "recompute":
            for i in b.units:
                u = units[i]
                workspace = u.workspace_bytes
                if i == b.stop - 1 and i < len(units) - 1 and not u.saved_output_bytes:
                    # the recompute stops once the last saved tensor is made again (torch.utils.checkpoint's
                    # early stop): an output nobody saved, at the block's end, is not made again
                    workspace = max(workspace - u.output_bytes, 0)
                start, ready = s.op("compute", "recompute", k, ready, u.forward_time,
                                    alloc=own[i] + workspace, free=workspace)
                if first:
                    first = False
                    s.alloc(start, waiting_grad, k)
                    if k - depth >= 0:
                        prefetch(k - depth, start)
        for i in reversed(b.units):
            u = units[i]
            transient = backward_transient(units, i)
            grads = tied_grads(u)
            start, ready = s.op("compute", "backward", k, ready, u.backward_time,
                                alloc=transient + grads, free=transient + own[i])
            if waiting_grad:  # from here it is the backward's own output gradient
                s.release(start, waiting_grad, k)
                waiting_grad = 0.0
            if first:
                first = False
                if k - depth >= 0:
                    prefetch(k - depth, start)
        bwd_ready = ready
        if b.policy == "recompute":
            s.release(ready, ckpt_bytes[k], k, after_allocs=ready == s.compute_start)
        if host_side:
            if streamed:
                s.release(ready, uses[k], k, after_allocs=ready == s.compute_start)
            grads_down_end = s.op("d2h", "download gradients", k, ready, params[k] / hw.d2h_bw,
                                  free=params[k])[1]
            traffic = optimizer_traffic_bytes(params[k], profile.optimizer)
            if parallel and order == "naive":
                pending.append((k, grads_down_end))
            else:
                if parallel:
                    grads_down_end = net_end = s.op("network", "all-reduce", k, grads_down_end,
                                                    allreduce_time(params[k], hw, gpus))[1]
                host_t = s.op("host", "optimizer step", k, grads_down_end, traffic / hw.host_update_bw)[1]
                if not streamed:
                    host_t = s.op("h2d", "upload weights", k, host_t, params[k] / hw.h2d_bw)[1]
        elif parallel:
            if order == "naive":
                pending.append((k, ready))
            else:
                net_end = s.op("network", "all-reduce", k, ready, allreduce_time(params[k], hw, gpus))[1]

    start_naive = max([bwd_ready] + [t for _, t in pending])
    for k, _ in pending:
        net_end = s.op("network", "all-reduce", k, start_naive, allreduce_time(params[k], hw, gpus))[1]
        if host_side:
            traffic = optimizer_traffic_bytes(params[k], profile.optimizer)
            host_t = s.op("host", "optimizer step", k, net_end, traffic / hw.host_update_bw)[1]
            if not streamed:
                host_t = s.op("h2d", "upload weights", k, host_t, params[k] / hw.h2d_bw)[1]

    if host_side:
        end = max(bwd_ready, grads_down_end, host_t, net_end)
    else:
        traffic = optimizer_traffic_bytes(sum(params), profile.optimizer) / optimizer_shards
        end = s.op("compute", "optimizer step", 0, max(bwd_ready, net_end), traffic / hw.memory_bw,
                   free=sum(params))[1]
    peak, over_block, _ = s.peak(static, capacity)
    reason = None
    if over_block is not None:
        b = blocks[over_block]
        reason = (f"needs {peak / 1e9:.3f} GB, {(peak - capacity) / 1e9:.3f} GB over the {capacity / 1e9:.3f} GB "
                  f"capacity; first over at block {over_block} (units {b.start}..{b.stop - 1}, {b.policy})")
    return SimResult(
        time=None if reason else end, makespan=end, peak_bytes=peak, capacity=capacity, busy=dict(s.busy),
        bytes_h2d=_bytes(blocks, act, params, ckpt_bytes, streamed, host_side, "h2d"),
        bytes_d2h=_bytes(blocks, act, params, ckpt_bytes, streamed, host_side, "d2h"),
        timeline=s.timeline, reason=reason,
    )


def _bytes(blocks, act, params, ckpt_bytes, streamed: bool, host_side: bool, direction: str) -> float:
    """Bytes crossing the link in one direction (streamed weights go up twice, gradients down once;
    resident weights updated on the host go down as gradients and up once, updated)."""
    total = 0.0
    for k, b in enumerate(blocks):
        if b.policy == "swap":
            total += act[k]
        elif b.policy == "recompute" and b.checkpoint == "host":
            total += ckpt_bytes[k]
        if streamed:
            total += 2 * params[k] if direction == "h2d" else params[k]
        elif host_side:
            total += params[k]
    return total

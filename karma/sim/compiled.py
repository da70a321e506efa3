"""The simulator's event loop compiled with numba: karma/sim/simulate.py's iteration, op for op.

The planner, the reach search, the baselines' own configuration searches and the sweeps simulate
tens of thousands of plans; karma/sim/simulate.py is their readable specification, this module the
same arithmetic on arrays (numba compiles it to machine code once, then caches it beside this file:
https://numba.readthedocs.io/en/stable/user/jit.html#cache). `simulate(..., record=False)` runs here;
a recorded timeline (figures, the runtime's attribution) runs in Python. Same inputs, same IEEE
operations in the same order: tests/sim/test_compiled.py compares the two over random plans of every
kind of chain to 1e-12 relative.

What is kept per profile (`_columns`): the units' numbers as arrays, and at layer granularity each
boundary storage renumbered 0..S-1 with the storages every unit makes and saves as index lists. What
is built per plan (in `simulate_compiled`): the blocks' bounds and policies. Everything else, block bytes
included, is computed in the compiled functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.typed import Dict

from karma.core.hardware import Hardware
from karma.core.precision_bytes import STATE_TENSORS
from karma.plan.plan import Plan
from karma.plan.space import POLICY
from karma.profile.profile import OPTIMIZER_STATE_FACTOR, Profile, input_gradient_bytes
from karma.sim.block_bytes import storage_unit_bytes

KEEP, SWAP, RECOMPUTE = 0, 1, 2
_POLICY = {"keep": KEEP, "swap": SWAP, "recompute": RECOMPUTE}
_HOST = {"device": 0, "host": 3}  # a block's code: its policy, plus 3 with its checkpoint on the host
#: queue indices; `link` is h2d and d2h together on a half-duplex link (karma/sim/schedule.py)
COMPUTE, H2D, D2H, HOST, NETWORK, LINK = 0, 1, 2, 3, 4, 5
QUEUES = ("compute", "h2d", "d2h", "host", "network", "link")
_BUSY, _CSTART = 6, 12  # the float state: free_at per queue, busy per queue, the compute queue's last start
_USES, _NEV, _NUP, _QUP, _NPEND = 6, 7, 8, 9, 10  # the int state after each queue's first-use rank


#: the rows of Columns.units, one per per-unit number (flags as 0.0 / 1.0)
ROWS = ("forward", "backward", "recompute_last", "recompute_inner", "saved", "shared", "saved_input", "input",
        "workspace", "transient", "weight_grads", "output_grads", "input_grad_last", "grad_in", "saves_no_output",
        "output", "own", "holds_params", "remakes_output")
(_FWD, _BWD, _RC_LAST, _RC_INNER, _SAVED, _SHARED, _SAVED_IN, _INPUT, _WORKSPACE, _TRANSIENT, _WGRAD, _OUTGRAD, _IGL,
 _GRAD_IN, _NO_SAVED_OUT, _OUTPUT, _OWN, _HOLDS, _REMAKES) = range(len(ROWS))


@dataclass(frozen=True)
class Columns:
    """A profile's numbers as arrays: few arguments, as each one costs the compiled call a type check."""

    units: np.ndarray  # (len(ROWS), units) float64: bytes, seconds and flags per unit
    weight_prefix: np.ndarray  # (3, units + 1) int64: prefix sums of params, optimizer and tied-param bytes
    static: tuple[float, float, float]  # Profile.static_terms
    storages: bool  # boundary storages followed one by one (layer granularity); else the arrays below are empty
    size: np.ndarray  # bytes per storage, renumbered 0..S-1 in the order first made
    index: np.ndarray  # (4, ...) int64 of out_ptr, saved_ptr (units + 1 each) then out_ids, saved_ids: see below
    # out_ptr[i]:out_ptr[i+1] slices out_ids, the storages of unit i's output in boundary_out order;
    # saved_ptr[i]:saved_ptr[i+1] slices saved_ids, the boundary storages it saves in boundary_saved order


#: the columns of the last few profiles simulated (the profile is kept too, so that its id is not reused)
_CACHE: dict[int, tuple[Profile, Columns]] = {}
_CACHE_SIZE = 16


def _columns(profile: Profile) -> Columns:
    hit = _CACHE.get(id(profile))
    if hit is not None and hit[0] is profile:
        return hit[1]
    cols = _build_columns(profile)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(profile)] = (profile, cols)
    return cols


def _build_columns(profile: Profile) -> Columns:
    units = profile.units
    n = len(units)
    storages = profile.storages
    renumber: dict[int, int] = {}
    size: list[int] = []
    for u in units:
        for sid, nbytes in u.boundary_out:
            if sid not in renumber:
                renumber[sid] = len(size)
                size.append(nbytes)
    out_ptr, out_ids, saved_ptr, saved_ids = [0], [], [0], []
    own, workspace = list(profile.saved_floats), list(profile.workspaces)
    if storages:
        own, workspace = storage_unit_bytes(profile)
        for u in units:
            out_ids += [renumber[sid] for sid, _ in u.boundary_out]
            out_ptr.append(len(out_ids))
            saved_ids += [renumber[sid] for sid in u.boundary_saved]
            saved_ptr.append(len(saved_ids))
    else:
        out_ptr, saved_ptr = [0] * (n + 1), [0] * (n + 1)
    rows = {
        "forward": [u.forward_time for u in units], "backward": [u.backward_time for u in units],
        "recompute_last": [u.recompute_time(True) for u in units],
        "recompute_inner": [u.recompute_time(False) for u in units],
        "saved": profile.saved_floats, "shared": profile.shared_bytes,
        "saved_input": [u.saved_input_bytes for u in units], "input": [u.input_bytes for u in units],
        "workspace": workspace, "transient": profile.transients, "weight_grads": profile.weight_gradients,
        "output_grads": profile.output_gradients, "input_grad_last": [u.input_grad_last for u in units],
        "grad_in": [input_gradient_bytes(units, i) for i in range(n)],
        "saves_no_output": [not u.saved_output_bytes for u in units], "output": [u.output_bytes for u in units],
        "own": own, "holds_params": [bool(u.saved_bytes or u.param_bytes or u.tied_param_bytes) for u in units],
        "remakes_output": [u.recompute_remakes_output for u in units]}
    index = np.zeros((4, max(n + 1, len(out_ids), len(saved_ids))), dtype=np.int64)
    for row, values in enumerate((out_ptr, saved_ptr, out_ids, saved_ids)):
        index[row, :len(values)] = values
    return Columns(units=np.array([[float(v) for v in rows[name]] for name in ROWS], dtype=np.float64),
                   weight_prefix=np.array(profile.weight_prefix, dtype=np.int64),
                   static=tuple(float(v) for v in profile.static_terms), storages=storages,
                   size=np.array(size, dtype=np.float64), index=index)


#: the rates of the last few Hardware simulated on, as the first 8 of the kernel's 10 scalars (the hardware is kept
#: too, so that its id is not reused)
_RATES: dict[int, tuple[Hardware, np.ndarray]] = {}


def _rates(hw: Hardware) -> np.ndarray:
    hit = _RATES.get(id(hw))
    if hit is not None and hit[0] is hw:
        return hit[1]
    rates = np.array([hw.h2d_bw, hw.d2h_bw, hw.host_update_bw, hw.memory_bw, hw.intra_node_bw, hw.intra_node_latency,
                      hw.inter_node_bw, hw.inter_node_latency, 0.0, 0.0, hw.host_memory_bw], dtype=np.float64)
    if len(_RATES) >= _CACHE_SIZE:
        _RATES.pop(next(iter(_RATES)))
    _RATES[id(hw)] = (hw, rates)
    return rates


@dataclass(frozen=True)
class Outcome:
    """What the compiled iteration returns (karma/sim/simulate.py builds its SimResult from it)."""

    end: float
    peak: float
    over_block: int | None
    busy: dict[str, float]
    bytes_h2d: float
    bytes_d2h: float
    memory: list[tuple[float, float]] | None = None  # (s, bytes in use) after each event, when asked for


def simulate_compiled(profile: Profile, plan: Plan, hw: Hardware, capacity: float, host_side: bool, gpus: int,
                      nodes: int, order: str, shards: int, memory: bool = False) -> Outcome:
    """One iteration of karma/sim/simulate.py's `simulate`, compiled (arguments checked there); with `memory`,
    the bytes in use after each allocation and free, in the order the peak counts them (as SimResult.memory)."""
    c = _columns(profile)
    blocks = plan.blocks
    bounds = [b.start for b in blocks]  # the blocks are consecutive (karma/plan/plan.py validates it)
    bounds.append(blocks[-1].stop)
    codes = [_POLICY[b.policy] + _HOST[b.checkpoint] for b in blocks]
    streamed = plan.weights == "streamed"
    _, scalars, flags = constants(profile, hw, capacity, streamed, host_side, plan.prefetch_depth,
                                  (order == "naive", gpus, nodes, shards), plan.update_order == "after-backward")
    blocks_args = (np.array(bounds, dtype=np.int64), np.array(codes, dtype=np.int64), scalars, flags)
    levels = None
    if memory:
        end, peak, over, fstate, istate, h2d, d2h, events = _iteration(c.units, c.weight_prefix, c.size, c.index,
                                                                        *blocks_args)
        busy, uses = fstate[_BUSY:_BUSY + len(QUEUES)].tolist(), istate[:len(QUEUES)].tolist()
        sequence = _event_order(events, int(istate[_NEV]))
        static = blocks_args[2][8]  # the scalars' slot of the static bytes (`constants`)
        levels = list(zip(events[sequence, 0].tolist(),
                          np.cumsum(np.concatenate(([static], events[sequence, 2])))[1:].tolist(), strict=True))
    else:
        end, peak, over, h2d, d2h, busy, uses = summary_kernel(c.units, c.weight_prefix, c.size, c.index, *blocks_args)
    used = sorted((rank, q) for q, rank in enumerate(uses) if rank >= 0)
    return Outcome(end=end, peak=peak, over_block=None if over < 0 else over,
                   busy={QUEUES[q]: busy[q] for _, q in used}, bytes_h2d=h2d, bytes_d2h=d2h, memory=levels)


def constants(profile: Profile, hw: Hardware, capacity: float, streamed: bool, host_side: bool, depth: int,
              parallel: tuple[bool, int, int, int] = (False, 1, 1, 1), after_backward: bool = False) -> tuple:
    """What the kernels take of a plan besides its blocks: the profile's columns, the Hardware's rates with
    this plan's static bytes and the capacity, and the flags; `parallel` is (naive order, gpus, nodes,
    optimizer shards); `after_backward`, the plan's host updates after the whole backward (Plan.update_order).
    A search builds them once per (depth, layout) and simulates many block tilings."""
    c = _columns(profile)
    naive, gpus, nodes, shards = parallel
    buffers, host_opt, device_opt = c.static
    static = buffers if streamed else buffers + (host_opt if host_side else device_opt)
    scalars = _rates(hw).copy()
    scalars[8], scalars[9] = static, capacity
    scalars[2] = hw.host_update_rate(min(gpus, hw.gpus_per_node))
    flags = np.array([streamed, host_side, naive, hw.link_duplex == "half", c.storages, depth, gpus, nodes,
                      min(gpus, hw.gpus_per_node), shards, OPTIMIZER_STATE_FACTOR[profile.optimizer],
                      STATE_TENSORS[profile.optimizer], after_backward], dtype=np.int64)
    return c, scalars, flags


#: A block's code by the plan space's kind letter (karma/plan/space.py POLICY).
KIND_CODES = {kind: _POLICY[policy] + _HOST[place] for kind, (policy, place) in POLICY.items()}


def blocks_cost(fixed: tuple, blocks) -> tuple[float, float, bool]:
    """(makespan s, peak bytes, fits) of one single-GPU iteration of the plan whose blocks are `blocks`,
    (start, stop, kind letter) over the units of the profile `fixed` (from `constants`) was made for: what a
    search asks of each of its states, without building a Plan (karma/planner/search.py; the same kernel as
    `simulate_compiled`)."""
    c, scalars, flags = fixed
    end, peak, over, *_ = summary_kernel(c.units, c.weight_prefix, c.size, c.index, *block_arrays(blocks), scalars,
                                         flags)
    return end, peak, over < 0


def block_arrays(blocks) -> tuple[np.ndarray, np.ndarray]:
    """Blocks (start, stop, kind letter) as the kernels take them: the bounds (every start, then the last stop)
    and the kind codes."""
    bounds = [a for a, _, _ in blocks]
    bounds.append(blocks[-1][1])
    return np.array(bounds, dtype=np.int64), np.array([KIND_CODES[k] for _, _, k in blocks], dtype=np.int64)


def compile_now() -> None:
    """Compile the event loop now, or load it from numba's cache: a first simulation pays that otherwise
    (tens of seconds once per installation, then a fraction of a second per process). Test runs call it
    once before their workers start (tests/conftest.py), so that the workers load what it cached."""
    flags = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0], dtype=np.int64)
    summary_kernel(np.zeros((len(ROWS), 1)), np.zeros((3, 2), dtype=np.int64), np.zeros(0),
                   np.zeros((4, 2), dtype=np.int64), np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int64),
                   np.ones(11), flags)


# ----------------------------------------------------------------------------------------------------------
# The schedule (karma/sim/schedule.py): queues' free times and busy times in `fs`, memory events in `ev`
# (rows of time, kind, delta, block: kind 0 frees first at equal times, 1 allocations and later frees).


@njit(cache=True)
def _push(ev, ist, t, kind, delta, block):
    """Add a memory event (`ev` is sized for every event an iteration makes: see _iteration)."""
    n = ist[_NEV]
    ev[n, 0] = t
    ev[n, 1] = kind
    ev[n, 2] = delta
    ev[n, 3] = block
    ist[_NEV] = n + 1


@njit(cache=True)
def _op(fs, ist, ev, q, block, ready, duration, alloc, free, alloc_at):
    """Schedule.op: (start, end); `alloc_at` NaN allocates at the op's start."""
    free_at = fs[q]
    start = free_at if free_at > ready else ready
    end = start + duration
    fs[q] = end
    if q == COMPUTE:
        fs[_CSTART] = start
    if ist[q] < 0:
        ist[q] = ist[_USES]
        ist[_USES] += 1
    fs[_BUSY + q] = fs[_BUSY + q] + duration
    if alloc != 0.0:
        _push(ev, ist, start if math.isnan(alloc_at) else alloc_at, 1.0, alloc, block)
    if free != 0.0:
        _push(ev, ist, end, 1.0 if end == start else 0.0, -free, block)
    return start, end


@njit(cache=True)
def _start_at(fs, q, ready):
    free_at = fs[q]
    return free_at if free_at > ready else ready


@njit(cache=True)
def _release(ev, ist, t, nbytes, block, after_allocs):
    _push(ev, ist, t, 1.0 if after_allocs else 0.0, -nbytes, block)


@njit(cache=True)
def _ring(nbytes, ranks, bandwidth, latency):
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * latency + 2 * (ranks - 1) / ranks * nbytes / bandwidth


@njit(cache=True)
def _allreduce(nbytes, sc, fl):
    """karma/sim/network.py's allreduce_time."""
    gpus, nodes, per_node = fl[6], fl[7], fl[8]
    if nodes == 1:
        return _ring(nbytes, per_node, sc[4], sc[5])
    flat = _ring(nbytes, gpus, sc[6] / per_node, sc[7])
    inside = _ring(nbytes, per_node, sc[4], sc[5])
    across = _ring(nbytes / per_node, nodes, sc[6] / per_node, sc[7])
    return min(flat, inside + across)


@njit(cache=True)
def _traffic(params, state, k_state, k_master):
    """optimizer_traffic_bytes with the optimizer's bytes given (karma/sim/simulate.py)."""
    n16 = max(state - k_master * params, 0.0) / (4 + 2 * k_master)
    return (3 + 2 * k_state) * (params + 2 * n16)


# ----------------------------------------------------------------------------------------------------------
# Block bytes (karma/sim/block_bytes.py)


@njit(cache=True)
def _block_bytes(saved, shared, saved_input, inp, starts, stops, policy, host_ckpt):
    nb = starts.shape[0]
    own = saved.copy()
    rows = np.zeros((8, nb))
    lent, borrowed, act, ckpt, mem_out, mem_back = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
    mem_ckpt, mem_ckpt_back = rows[6], rows[7]
    for k in range(nb):
        for i in range(starts[k] + 1, stops[k]):
            own[i] -= shared[i - 1]
    for k in range(1, nb):
        if policy[k - 1] == policy[k] and (policy[k] == KEEP or policy[k] == SWAP):
            own[starts[k]] -= shared[starts[k] - 1]
            if policy[k] == SWAP:
                lent[k - 1] = shared[starts[k] - 1]
                borrowed[k] = shared[starts[k] - 1]
    for k in range(nb):
        if policy[k] == RECOMPUTE:
            own[starts[k]] -= min(saved_input[starts[k]], inp[starts[k]])
    for k in range(nb):
        total = 0.0
        for i in range(starts[k], stops[k]):
            total += own[i]
        act[k] = total
        before = shared[starts[k] - 1] if k > 0 and policy[k - 1] == KEEP else 0.0
        ckpt[k] = inp[starts[k]]  # a checkpoint on the host is copied whole (block_bytes.py)
        mem_ckpt[k] = ckpt[k] - before
        mem_ckpt_back[k] = ckpt[k] if host_ckpt[k] else mem_ckpt[k]
        mem_out[k] = act[k] - lent[k]
        mem_back[k] = act[k] - lent[k] + borrowed[k]
    return own, act, ckpt, lent, borrowed, mem_ckpt, mem_ckpt_back, mem_out, mem_back, borrowed


@njit(cache=True)
def _lent(starts, stops, policy, saved_ptr, saved_ids, size):
    """lent_storages (karma/sim/block_bytes.py): per block, the storages the next block's prefetch brings back
    for it, as index lists (lent_ptr, lent_ids), and their bytes."""
    nb = starts.shape[0]
    ns = size.shape[0]
    count = np.zeros(ns, dtype=np.int64)
    stamp = np.full(ns, -1, dtype=np.int64)
    later = np.full(ns, -1, dtype=np.int64)
    lent_ptr = np.zeros(nb + 1, dtype=np.int64)
    lent_ids = np.empty(saved_ids.shape[0], dtype=np.int64)
    shared = np.zeros(nb)
    n = 0
    for k in range(nb):
        lent_ptr[k] = n
        if k + 1 == nb or not (policy[k] == SWAP and policy[k + 1] == SWAP):
            continue
        for i in range(starts[k + 1], stops[k + 1]):
            for j in range(saved_ptr[i], saved_ptr[i + 1]):
                later[saved_ids[j]] = k
        for i in range(starts[k], stops[k]):
            for j in range(saved_ptr[i], saved_ptr[i + 1]):
                sid = saved_ids[j]
                if stamp[sid] != k:
                    stamp[sid] = k
                    count[sid] = 0
                count[sid] += 1
        for i in range(starts[k], stops[k]):
            for j in range(saved_ptr[i], saved_ptr[i + 1]):
                sid = saved_ids[j]
                if stamp[sid] == k and count[sid] == 1 and later[sid] == k:
                    stamp[sid] = -2  # counted once
                    shared[k] += size[sid]
                    lent_ids[n] = sid
                    n += 1
    lent_ptr[nb] = n
    return shared, lent_ptr, lent_ids


@njit(cache=True)
def _is_lent(lent_ptr, lent_ids, sid, k):
    """Whether block k lends storage sid to the next block (False for k < 0)."""
    if k < 0:
        return False
    for j in range(lent_ptr[k], lent_ptr[k + 1]):
        if lent_ids[j] == sid:
            return True
    return False


@njit(cache=True)
def _storage_block_bytes(own0, saved_input, inp, starts, stops, policy, saved_ptr, saved_ids, size):
    nb = starts.shape[0]
    own = own0.copy()
    if policy[0] == RECOMPUTE:
        own[0] -= min(saved_input[0], inp[0])
    shared, lent_ptr, lent_ids = _lent(starts, stops, policy, saved_ptr, saved_ids, size)
    borrowed = np.zeros(nb)
    for k in range(1, nb):
        borrowed[k] = shared[k - 1]
    inner = np.zeros(nb)
    act = np.zeros(nb)
    ckpt = np.zeros(nb)
    mem_ckpt = np.zeros(nb)
    seen = np.full(size.shape[0], -1, dtype=np.int64)
    for k in range(nb):
        total = 0.0
        for i in range(starts[k], stops[k]):
            total += own[i]
        inner[k] = total
        saved_total = 0.0
        for i in range(starts[k], stops[k]):
            for j in range(saved_ptr[i], saved_ptr[i + 1]):
                sid = saved_ids[j]
                if seen[sid] != k:
                    seen[sid] = k
                    saved_total += size[sid]
        act[k] = inner[k] + saved_total - borrowed[k]
        ckpt[k] = inp[starts[k]]
        mem_ckpt[k] = inp[0] if starts[k] == 0 else 0.0
    return (own, act, ckpt, shared, borrowed, mem_ckpt, mem_ckpt.copy(), inner, inner.copy(), np.zeros(nb), lent_ptr,
            lent_ids)


# ----------------------------------------------------------------------------------------------------------
# The iteration (karma/sim/simulate.py's _forward, _prefetch, _backward, _gradients_ready, _host_update,
# _optimizer and _link_bytes)


@njit(cache=True)
def _upload(fs, ist, ev, qh2d, k, ready, uses, h2d_bw):
    return _op(fs, ist, ev, qh2d, k, ready, uses[k] / h2d_bw, uses[k], 0.0, ready)[1]


@njit(cache=True)
def _queue_updated_weights(fs, ist, ev, qh2d, until, up_issue, up_k, params, h2d_bw, host_end):
    while ist[_QUP] < ist[_NUP] and up_issue[ist[_QUP]] <= until:
        issue, k = up_issue[ist[_QUP]], up_k[ist[_QUP]]
        ist[_QUP] += 1
        _, end = _op(fs, ist, ev, qh2d, k, issue, params[k] / h2d_bw, 0.0, 0.0, np.nan)
        host_end = max(host_end, end)
    return host_end


@njit(cache=True)
def _host_update(fs, ist, ev, k, ready, params, state, sc, fl, up_issue, up_k, host_end):
    traffic = _traffic(params[k], state[k], fl[10], fl[11])
    _, updated = _op(fs, ist, ev, HOST, k, ready, traffic / sc[2], 0.0, 0.0, np.nan)
    host_end = max(host_end, updated)
    if not fl[0]:
        n = ist[_NUP]
        up_issue[n] = updated
        up_k[n] = k
        ist[_NUP] = n + 1
    return host_end


@njit(cache=True)
def _prefetch(fs, ist, ev, qh2d, k, issue, streamed, policy, host_ckpt, swap_out_end, ckpt_out_end, back, mem_back,
              ckpt, mem_ckpt_back, uses, params, up_issue, up_k, h2d_bw, host_end, prefetch_start, prefetch_end):
    """Block k's copies back for its backward, issued at `issue` (simulate.py's _prefetch)."""
    host_end = _queue_updated_weights(fs, ist, ev, qh2d, issue, up_issue, up_k, params, h2d_bw, host_end)
    end = issue
    if streamed:
        end = _upload(fs, ist, ev, qh2d, k, issue, uses, h2d_bw)
    if policy[k] == SWAP:
        ready = max(issue, swap_out_end[k])
        prefetch_start[k] = ready
        _, end = _op(fs, ist, ev, qh2d, k, ready, back[k] / h2d_bw, mem_back[k], 0.0, ready)
    elif policy[k] == RECOMPUTE and host_ckpt[k] != 0:
        ready = max(issue, ckpt_out_end[k])
        prefetch_start[k] = ready
        _, end = _op(fs, ist, ev, qh2d, k, ready, ckpt[k] / h2d_bw, mem_ckpt_back[k], 0.0, ready)
    prefetch_end[k] = end
    return host_end


@njit(cache=True)
def summary_kernel(uf, wprefix, size, index, bounds, codes, sc, fl):
    """_iteration's numbers only, as plain values: no array handed back to Python (each costs a conversion); the
    kernel a compiled search calls too (karma/planner/walk.py)."""
    end, peak, over, fs, ist, h2d, d2h, _ = _iteration(uf, wprefix, size, index, bounds, codes, sc, fl)
    busy = (fs[_BUSY], fs[_BUSY + 1], fs[_BUSY + 2], fs[_BUSY + 3], fs[_BUSY + 4], fs[_BUSY + 5])
    uses = (ist[0], ist[1], ist[2], ist[3], ist[4], ist[5])
    return end, peak, over, h2d, d2h, busy, uses


@njit(cache=True)
def _iteration(uf, wprefix, size, index, bounds, codes, sc, fl):
    fwd, bwd, rc_last, rc_inner = uf[_FWD], uf[_BWD], uf[_RC_LAST], uf[_RC_INNER]
    saved, shared, saved_input, inp = uf[_SAVED], uf[_SHARED], uf[_SAVED_IN], uf[_INPUT]
    workspace0, transient, wgrad, outgrad = uf[_WORKSPACE], uf[_TRANSIENT], uf[_WGRAD], uf[_OUTGRAD]
    igl, grad_in, no_saved_output, output = uf[_IGL], uf[_GRAD_IN], uf[_NO_SAVED_OUT], uf[_OUTPUT]
    own0, holds_params, remakes = uf[_OWN], uf[_HOLDS], uf[_REMAKES]
    nu = fwd.shape[0]
    starts, stops, policy, host_ckpt = bounds[:-1], bounds[1:], codes % 3, codes >= 3
    nb = starts.shape[0]
    out_ptr, saved_ptr = index[0, :nu + 1], index[1, :nu + 1]
    out_ids, saved_ids = index[2, :out_ptr[nu]], index[3, :saved_ptr[nu]]
    streamed, host_side, naive, half, storages = fl[0] != 0, fl[1] != 0, fl[2] != 0, fl[3] != 0, fl[4] != 0
    depth, gpus = fl[5], fl[6]
    parallel = gpus > 1
    after_backward = fl[12] != 0  # the plan's host updates after the whole backward
    h2d_bw, d2h_bw = sc[0], sc[1]
    qh2d = LINK if half else H2D
    qd2h = LINK if half else D2H
    if storages:
        (own, act, ckpt, lent, borrowed, mem_ckpt, mem_ckpt_back, mem_out, mem_back, mem_borrowed, lent_ptr,
         lent_ids) = _storage_block_bytes(own0, saved_input, inp, starts, stops, policy, saved_ptr, saved_ids, size)
    else:
        own, act, ckpt, lent, borrowed, mem_ckpt, mem_ckpt_back, mem_out, mem_back, mem_borrowed = _block_bytes(
            saved, shared, saved_input, inp, starts, stops, policy, host_ckpt)
        lent_ptr = np.zeros(nb + 1, dtype=np.int64)
        lent_ids = np.empty(0, dtype=np.int64)
    workspace = workspace0
    # per-block and per-unit numbers: rows of two arrays (one allocation each, not one per row)
    blk = np.zeros((13, nb))
    params, state, uses, up_issue, pend_t = blk[0], blk[1], blk[2], blk[3], blk[4]
    block_start, prefetch_start = blk[5], blk[6]
    swap_out_end, ckpt_out_end, weights_up_end, prefetch_end = blk[7], blk[8], blk[9], blk[10]
    per_unit = np.zeros((6, nu))
    f_start, f_end, r_start, r_end, b_end, w_done = (per_unit[0], per_unit[1], per_unit[2], per_unit[3], per_unit[4],
                                                     per_unit[5])
    r_start[:] = np.nan
    r_end[:] = np.nan
    ints = np.empty((2, nb), dtype=np.int64)
    up_k, pend_k = ints[0], ints[1]
    for k in range(nb):
        params[k] = float(wprefix[0, stops[k]] - wprefix[0, starts[k]])
        state[k] = float(wprefix[1, stops[k]] - wprefix[1, starts[k]])
        uses[k] = params[k] + (wprefix[2, stops[k]] - wprefix[2, starts[k]])
    back = mem_back  # by.back(k) == act - lent + borrowed (at either granularity's attribution)
    if storages:
        back = np.empty(nb)
        for k in range(nb):
            back[k] = act[k] - lent[k] + borrowed[k]

    fs = np.zeros(13)
    ist = np.full(11, -1, dtype=np.int64)
    ist[_USES:] = 0
    ev = np.empty((8 * nu + 16 * nb + 16, 4))
    nan = np.nan

    # forward
    t = 0.0
    copied = 0.0
    if streamed:
        for k in range(min(depth, nb)):
            weights_up_end[k] = _upload(fs, ist, ev, qh2d, k, 0.0, uses, h2d_bw)
    for k in range(nb):
        ready = t
        if streamed and depth == 0:
            weights_up_end[k] = _upload(fs, ist, ev, qh2d, k, t, uses, h2d_bw)
        if k - depth >= 0:
            back_k = k - depth if depth else k - 1
            if back_k >= 0:
                copied = max(copied, swap_out_end[back_k], ckpt_out_end[back_k])
            ready = max(ready, copied)
        if streamed:
            ready = max(ready, weights_up_end[k])
        block_start[k] = ready
        if policy[k] == RECOMPUTE:
            _push(ev, ist, ready, 1.0, mem_ckpt[k], k)
        if streamed and depth and k + depth < nb:  # issued as the block's forward starts, before its frees
            weights_up_end[k + depth] = _upload(fs, ist, ev, qh2d, k + depth, _start_at(fs, COMPUTE, ready), uses,
                                                h2d_bw)
        for i in range(starts[k], stops[k]):
            keep = own[i] if policy[k] != RECOMPUTE else 0.0
            start, t = _op(fs, ist, ev, COMPUTE, k, ready, fwd[i], own[i] + workspace[i],
                               workspace[i] + own[i] - keep, nan)
            f_start[i] = start
            f_end[i] = t
            ready = t
        if streamed:
            _release(ev, ist, t, uses[k], k, t == fs[_CSTART])
        if k > 0 and mem_borrowed[k] != 0.0:
            _release(ev, ist, max(t, swap_out_end[k - 1]), mem_borrowed[k], k, False)
        if policy[k] == SWAP:
            _, swap_out_end[k] = _op(fs, ist, ev, qd2h, k, t, act[k] / d2h_bw, 0.0, mem_out[k], nan)
        elif policy[k] == RECOMPUTE and host_ckpt[k] != 0:
            _, ckpt_out_end[k] = _op(fs, ist, ev, qd2h, k, t, ckpt[k] / d2h_bw, 0.0, mem_ckpt[k], nan)
    forward_end = t

    # backward
    host_end = 0.0
    grads_down_end = 0.0
    net_end = 0.0
    bwd_ready = forward_end
    for k in range(nb - 1, nb - 1 - min(depth, nb), -1):
        host_end = _prefetch(fs, ist, ev, qh2d, k, bwd_ready, streamed, policy, host_ckpt, swap_out_end,
                                 ckpt_out_end, back, mem_back, ckpt, mem_ckpt_back, uses, params, up_issue, up_k,
                                 h2d_bw, host_end, prefetch_start, prefetch_end)
    for k in range(nb - 1, -1, -1):
        if depth == 0:
            host_end = _prefetch(fs, ist, ev, qh2d, k, bwd_ready, streamed, policy, host_ckpt, swap_out_end,
                                     ckpt_out_end, back, mem_back, ckpt, mem_ckpt_back, uses, params, up_issue, up_k,
                                     h2d_bw, host_end, prefetch_start, prefetch_end)
        ready = max(bwd_ready, prefetch_end[k])
        begin = _start_at(fs, COMPUTE, ready)
        waiting_grad = outgrad[stops[k] - 1] if policy[k] == RECOMPUTE else 0.0
        if waiting_grad != 0.0:
            _push(ev, ist, begin, 1.0, waiting_grad, k)
        if depth and k - depth >= 0:
            host_end = _prefetch(fs, ist, ev, qh2d, k - depth, begin, streamed, policy, host_ckpt, swap_out_end,
                                     ckpt_out_end, back, mem_back, ckpt, mem_ckpt_back, uses, params, up_issue, up_k,
                                     h2d_bw, host_end, prefetch_start, prefetch_end)
        if policy[k] == RECOMPUTE:
            for i in range(starts[k], stops[k]):
                ws = workspace[i]
                last = i == stops[k] - 1
                if last and i < nu - 1 and no_saved_output[i] != 0 and not storages:
                    ws = max(ws - output[i], 0.0)
                start, ready = _op(fs, ist, ev, COMPUTE, k, ready, rc_last[i] if last else rc_inner[i],
                                       own[i] + ws, ws, nan)
                r_start[i] = start
                r_end[i] = ready
        for i in range(stops[k] - 1, starts[k] - 1, -1):
            if waiting_grad != 0.0:
                _release(ev, ist, _start_at(fs, COMPUTE, ready), waiting_grad, k, True)
                waiting_grad = 0.0
            if igl[i] != 0:
                gi = grad_in[i]
                start, mid = _op(fs, ist, ev, COMPUTE, k, ready, bwd[i] / 2, transient[i] - gi + wgrad[i], 0.0,
                                     nan)
                _, ready = _op(fs, ist, ev, COMPUTE, k, mid, bwd[i] / 2, gi, transient[i] + own[i], nan)
            else:
                start, ready = _op(fs, ist, ev, COMPUTE, k, ready, bwd[i], transient[i] + wgrad[i],
                                       transient[i] + own[i], nan)
                mid = ready
            b_end[i] = ready
            w_done[i] = mid
        bwd_ready = ready
        if policy[k] == RECOMPUTE:
            _release(ev, ist, ready, mem_ckpt_back[k], k, ready == fs[_CSTART])
        # the block's gradients
        if host_side:
            if streamed:
                _release(ev, ist, ready, uses[k], k, ready == fs[_CSTART])
            _, grads_down_end = _op(fs, ist, ev, qd2h, k, ready, params[k] / d2h_bw, 0.0, params[k], nan)
            if (parallel and naive) or after_backward:
                n = ist[_NPEND]
                pend_k[n] = k
                pend_t[n] = grads_down_end
                ist[_NPEND] = n + 1
            else:
                if parallel:
                    _, net_end = _op(fs, ist, ev, NETWORK, k, grads_down_end, _allreduce(params[k], sc, fl), 0.0,
                                         0.0, nan)
                    grads_down_end = net_end
                host_end = _host_update(fs, ist, ev, k, grads_down_end, params, state, sc, fl, up_issue, up_k,
                                            host_end)
        elif parallel:
            if naive:
                n = ist[_NPEND]
                pend_k[n] = k
                pend_t[n] = ready
                ist[_NPEND] = n + 1
            else:
                _, net_end = _op(fs, ist, ev, NETWORK, k, ready, _allreduce(params[k], sc, fl), 0.0, 0.0, nan)
    backward_end = bwd_ready

    # the naive order's all-reduces, then the optimizer step
    start_naive = backward_end
    for n in range(ist[_NPEND]):
        start_naive = max(start_naive, pend_t[n])
    for n in range(ist[_NPEND]):
        k = pend_k[n]
        ready = start_naive
        if parallel:
            _, net_end = _op(fs, ist, ev, NETWORK, k, start_naive, _allreduce(params[k], sc, fl), 0.0, 0.0, nan)
            ready = net_end
        if host_side:
            host_end = _host_update(fs, ist, ev, k, ready, params, state, sc, fl, up_issue, up_k, host_end)
    if host_side:
        host_end = _queue_updated_weights(fs, ist, ev, qh2d, np.inf, up_issue, up_k, params, h2d_bw, host_end)
        end = max(max(backward_end, grads_down_end), max(host_end, net_end))
    else:
        total_params = 0.0
        total_state = 0.0
        for k in range(nb):
            total_params += params[k]
            total_state += state[k]
        shards = fl[9]
        traffic = _traffic(total_params, total_state * shards, fl[10], fl[11]) / shards
        _, end = _op(fs, ist, ev, COMPUTE, 0, max(backward_end, net_end), traffic / sc[3], 0.0, total_params, nan)

    if storages:
        ev = _hold_boundary_storages(ev, ist, size, out_ptr, out_ids, saved_ptr, saved_ids, holds_params,
                                     remakes, starts, stops, policy, host_ckpt, lent_ptr, lent_ids, f_start, f_end,
                                     r_start, r_end, b_end, w_done, block_start, prefetch_start, swap_out_end,
                                     ckpt_out_end)
    peak, over = _peak(ev, ist[_NEV], sc[8], sc[9])

    h2d = 0.0
    d2h = 0.0
    for k in range(nb):
        if policy[k] == SWAP:
            h2d += back[k]
            d2h += act[k]
        elif policy[k] == RECOMPUTE and host_ckpt[k] != 0:
            h2d += ckpt[k]
            d2h += ckpt[k]
        if streamed:
            h2d += 2 * uses[k]
            d2h += params[k]
        elif host_side:
            h2d += params[k]
            d2h += params[k]
    if sc[10] > 0.0:  # the node's host memory: karma/sim/simulate.py, host_memory_time
        end = max(end, fl[8] * (h2d + d2h + fs[_BUSY + HOST] * sc[2]) / sc[10])
    return end, peak, over, fs, ist, h2d, d2h, ev


@njit(cache=True)
def _time_keys(ev, events):
    """The events' times as integers that order as the doubles do: a finite double's bits, negatives' flipped
    (-0.0 made 0.0 first, equal to it)."""
    times = np.empty(events.shape[0])
    for j in range(events.shape[0]):
        times[j] = ev[events[j], 0] + 0.0
    keys = times.view(np.int64)
    for j in range(keys.shape[0]):
        if keys[j] < 0:
            keys[j] ^= 0x7FFFFFFFFFFFFFFF
    return keys


@njit(cache=True)
def _sorted_by_time(ev, events):
    """`events` (indices into ev) sorted stably by time: a natural merge sort, whose ascending runs are long and
    few here (allocations come in time order; frees in a few runs, queue by queue)."""
    n = events.shape[0]
    keys = _time_keys(ev, events)
    order = events.copy()
    bounds = np.empty(n + 1, dtype=np.int64)  # where each ascending run starts
    runs = 0
    bounds[0] = 0
    for j in range(1, n):
        if keys[j] < keys[j - 1]:
            runs += 1
            bounds[runs] = j
    runs += 1
    bounds[runs] = n
    key_buffer = np.empty(n, dtype=np.int64)
    buffer = np.empty(n, dtype=np.int64)
    while runs > 1:
        merged = 0
        for r in range(0, runs, 2):
            lo = bounds[r]
            hi = bounds[r + 2] if r + 1 < runs else n
            mid = bounds[r + 1] if r + 1 < runs else n  # an odd run out is copied as it is
            i, j, out = lo, mid, lo
            while i < mid and j < hi:
                if keys[j] < keys[i]:  # the left one first when equal: stable
                    key_buffer[out] = keys[j]
                    buffer[out] = order[j]
                    j += 1
                else:
                    key_buffer[out] = keys[i]
                    buffer[out] = order[i]
                    i += 1
                out += 1
            while i < mid:
                key_buffer[out] = keys[i]
                buffer[out] = order[i]
                i += 1
                out += 1
            while j < hi:
                key_buffer[out] = keys[j]
                buffer[out] = order[j]
                j += 1
                out += 1
            bounds[merged] = lo
            merged += 1
        bounds[merged] = n
        runs = merged
        order, buffer = buffer, order
        keys, key_buffer = key_buffer, keys
    return order, keys


@njit(cache=True)
def _event_order(ev, n):
    """The events' order sorted by (time, kind), stably: each kind sorted by time, then the two merged, the
    frees that come first at equal times (kind 0) before the rest."""
    firsts = np.empty(n, dtype=np.int64)
    rest = np.empty(n, dtype=np.int64)
    nf = nr = 0
    for j in range(n):
        if ev[j, 1] == 0.0:
            firsts[nf] = j
            nf += 1
        else:
            rest[nr] = j
            nr += 1
    a, ka = _sorted_by_time(ev, firsts[:nf])
    b, kb = _sorted_by_time(ev, rest[:nr])
    order = np.empty(n, dtype=np.int64)
    i = j = 0
    for out in range(n):
        if j == nr or (i < nf and ka[i] <= kb[j]):
            order[out] = a[i]
            i += 1
        else:
            order[out] = b[j]
            j += 1
    return order


@njit(cache=True)
def _peak(ev, n, base, capacity):
    """Schedule.peak: the events sorted by (time, kind), stably; (peak bytes, first block over or -1)."""
    order = _event_order(ev, n)
    level = base
    peak = base
    over = 0 if base > capacity else -1
    for j in range(n):
        e = order[j]
        level += ev[e, 2]
        if level > peak:
            peak = level
        if over < 0 and level > capacity:
            over = int(ev[e, 3])
    return peak, over


# ----------------------------------------------------------------------------------------------------------
# Boundary storages (karma/sim/boundary_memory.py): intervals per key (a storage; a host checkpoint's copy
# back; a prefetched copy), their union per key allocated and freed, keys in the order first added.


@njit(cache=True)
def _add(key_slot, size, code, sid, start, end, block, through, sp, key_size, nsp):
    """_Holds.add: an interval of key `code` (holding storage sid); the key's slot is its rank of first use."""
    if nsp == sp.shape[0]:
        grown = np.empty((2 * nsp, 5))
        grown[:nsp] = sp[:nsp]
        sp = grown
    slot = key_slot.get(code, -1)
    if slot < 0:
        slot = len(key_slot)
        key_slot[code] = slot
        if slot == key_size.shape[0]:
            bigger = np.empty(2 * slot)
            bigger[:slot] = key_size
            key_size = bigger
        key_size[slot] = size[sid]
    sp[nsp, 0] = start
    sp[nsp, 1] = max(start, end)
    sp[nsp, 2] = block
    sp[nsp, 3] = 1.0 if through else 0.0
    sp[nsp, 4] = slot
    return sp, key_size, nsp + 1


@njit(cache=True)
def _saves(saved_ptr, saved_ids, i, sid):
    for j in range(saved_ptr[i], saved_ptr[i + 1]):
        if saved_ids[j] == sid:
            return True
    return False


@njit(cache=True)
def _hold(ev, ist, start, end, nbytes, block, through):
    _push(ev, ist, start, 1.0, nbytes, block)
    _push(ev, ist, end, 1.0 if (through or end == start) else 0.0, -nbytes, block)


@njit(cache=True)
def _hold_boundary_storages(ev, ist, size, out_ptr, out_ids, saved_ptr, saved_ids, holds_params, remakes, starts,
                            stops, policy, host_ckpt, lent_ptr, lent_ids, f_start, f_end, r_start, r_end, b_end,
                            w_done, block_start, prefetch_start, swap_out_end, ckpt_out_end):
    """hold_boundary_storages (karma/sim/boundary_memory.py): each storage's holders, their union per key."""
    nu = f_start.shape[0]
    nb = starts.shape[0]
    ns = size.shape[0]
    sp = np.empty((4 * (out_ids.shape[0] + saved_ids.shape[0]) + 16, 5))
    key_slot = Dict.empty(key_type=types.int64, value_type=types.int64)
    key_size = np.empty(ns + 16)
    nsp = 0
    ckpt_key = ns  # ("ckpt", sid, k): ckpt_key + sid * nb + k
    back_key = ns + ns * nb  # ("back", sid, owner): back_key + sid * nb + owner
    # in flight: from the maker's forward to the last reader's, storages in the order first made
    maker = np.full(ns, -1, dtype=np.int64)
    reader = np.full(ns, -1, dtype=np.int64)
    made = np.empty(ns, dtype=np.int64)
    nmade = 0
    for i in range(nu):
        for j in range(out_ptr[i], out_ptr[i + 1]):
            sid = out_ids[j]
            if maker[sid] < 0:
                maker[sid] = i
                made[nmade] = sid
                nmade += 1
        if i > 0:
            for j in range(out_ptr[i - 1], out_ptr[i]):
                reader[out_ids[j]] = i
    block_of = np.empty(nu, dtype=np.int64)
    for k in range(nb):
        block_of[starts[k]:stops[k]] = k
    for n in range(nmade):
        sid = made[n]
        i = maker[sid]
        last = reader[sid] if reader[sid] >= 0 else i
        sp, key_size, nsp = _add(key_slot, size, sid, sid, f_start[i], f_end[last], block_of[i], False, sp, key_size,
                                 nsp)
    seen = np.full(ns, -1, dtype=np.int64)
    inside = np.full(ns, -1, dtype=np.int64)
    for k in range(nb):
        b0, b1 = starts[k], stops[k]
        if policy[k] == SWAP:  # _swapped
            for i in range(b0, b1):
                for j in range(saved_ptr[i], saved_ptr[i + 1]):
                    sid = saved_ids[j]
                    if not _is_lent(lent_ptr, lent_ids, sid, k - 1):
                        sp, key_size, nsp = _add(key_slot, size, sid, sid, f_start[i], swap_out_end[k], k, False, sp,
                                                 key_size, nsp)
            for i in range(b0, b1):
                for j in range(saved_ptr[i], saved_ptr[i + 1]):
                    sid = saved_ids[j]
                    if seen[sid] == k:
                        continue
                    seen[sid] = k
                    if _is_lent(lent_ptr, lent_ids, sid, k):
                        continue  # the next block's prefetch brings it back
                    owner = k - 1 if _is_lent(lent_ptr, lent_ids, sid, k - 1) else k
                    first = starts[owner]
                    while not _saves(saved_ptr, saved_ids, first, sid):
                        first += 1
                    sp, key_size, nsp = _add(key_slot, size, back_key + sid * nb + owner, sid, prefetch_start[k],
                                             w_done[first], k, False, sp, key_size, nsp)
        for i in range(b0, b1):
            for j in range(saved_ptr[i], saved_ptr[i + 1]):
                sid = saved_ids[j]
                if policy[k] == KEEP:
                    sp, key_size, nsp = _add(key_slot, size, sid, sid, f_start[i], b_end[i], k, False, sp, key_size,
                                             nsp)
                elif policy[k] == RECOMPUTE:
                    sp, key_size, nsp = _add(key_slot, size, sid, sid, f_start[i], f_end[i], k, False, sp, key_size,
                                             nsp)
                    copy = False  # the recompute of a block whose checkpoint was on the host runs on its copy
                    if host_ckpt[k] != 0 and b0 > 0:
                        for j2 in range(out_ptr[b0 - 1], out_ptr[b0]):
                            if out_ids[j2] == sid:
                                copy = True
                    code = ckpt_key + sid * nb + k if copy else sid
                    sp, key_size, nsp = _add(key_slot, size, code, sid, r_start[i], w_done[i], k, False, sp,
                                             key_size, nsp)
        if policy[k] == RECOMPUTE:  # _recomputed
            first_saver = -1
            for i in range(b0, b1):
                if holds_params[i] != 0:
                    first_saver = i
                    break
            end = b_end[first_saver if first_saver >= 0 else b0]
            if b0 > 0:
                for j in range(out_ptr[b0 - 1], out_ptr[b0]):
                    sid = out_ids[j]
                    if host_ckpt[k] != 0:
                        sp, key_size, nsp = _add(key_slot, size, sid, sid, block_start[k], ckpt_out_end[k], k, False,
                                                 sp, key_size, nsp)
                        last_t = r_end[b1 - 1] if first_saver >= 0 else end
                        through = first_saver >= 0 and r_start[b1 - 1] == r_end[b1 - 1]
                        sp, key_size, nsp = _add(key_slot, size, ckpt_key + sid * nb + k, sid, prefetch_start[k],
                                                 last_t, k, through, sp, key_size, nsp)
                    elif first_saver >= 0:
                        sp, key_size, nsp = _add(key_slot, size, sid, sid, block_start[k], end, k, False, sp,
                                                 key_size, nsp)
            for i in range(b0, b1):
                for j in range(saved_ptr[i], saved_ptr[i + 1]):
                    inside[saved_ids[j]] = k
            for i in range(b0, b1):
                for j in range(out_ptr[i], out_ptr[i + 1]):
                    sid = out_ids[j]
                    new = True
                    if i > 0:
                        for j2 in range(out_ptr[i - 1], out_ptr[i]):
                            if out_ids[j2] == sid:
                                new = False
                    if not new:
                        continue
                    if i == b1 - 1 and inside[sid] != k and remakes[i] == 0:
                        continue  # not made again (the recompute stops after the last saved tensor)
                    last = min(reader[sid] if reader[sid] >= 0 else i, b1 - 1)
                    sp, key_size, nsp = _add(key_slot, size, sid, sid, r_start[i], r_end[last], k,
                                             r_start[last] == r_end[last], sp, key_size, nsp)

    # each key's intervals sorted as tuples (start, end, block, through), merged, held; keys in order of first use
    grown = np.empty((ist[_NEV] + 2 * nsp, 4))  # room for every interval's allocation and free
    grown[:ist[_NEV]] = ev[:ist[_NEV]]
    ev = grown
    idx = np.arange(nsp)
    for col in (3, 2, 1, 0, 4):
        idx = idx[np.argsort(sp[idx, col], kind="mergesort")]
    n = 0
    while n < nsp:
        e = idx[n]
        slot = sp[e, 4]
        nbytes = key_size[int(slot)]
        start, end, block, through = sp[e, 0], sp[e, 1], sp[e, 2], sp[e, 3] != 0.0
        n += 1
        while n < nsp and sp[idx[n], 4] == slot:
            e = idx[n]
            a, b, th = sp[e, 0], sp[e, 1], sp[e, 3] != 0.0
            n += 1
            if a <= end:
                if b > end:
                    through = th
                elif b == end:
                    through = through or th
                end = max(end, b)
                continue
            _hold(ev, ist, start, end, nbytes, block, through)
            start, end, block, through = a, b, sp[e, 2], th
        _hold(ev, ist, start, end, nbytes, block, through)
    return ev

"""A lower bound on the iteration time of every feasible plan (the physical limit).

Claim: for a Profile P, Hardware H and capacity M, every plan `karma.plan.plan.Plan`
can express (any tiling into blocks; keep, swap or recompute per block; the
checkpoint on the device or the host; any prefetch depth; weights resident
with the optimizer on the device or on the host, or streamed; half or full
duplex) that `karma.sim.simulate.simulate` accepts takes at least
``lower_bound(P, H, M)`` seconds. tests/sim/test_bound.py checks it against the
exhaustive optimum of random adversarial chains.

Proof (every line is a fact of the simulator's schedule, for one layout).
Units j = 0..n-1 with forward f_j, backward b_j, recompute r_j (f_j plus the
measured premium of a recompute, the lesser of its two cases, UnitProfile.recompute_time),
and s_j their own saved bytes:
what they save less the boundary shared with unit j-1 (so each storage is
counted once: the simulator counts it once or twice, never less). Let x_j = 1
if unit j's block is swapped, y_j = 1 if it is recomputed (x_j + y_j <= 1),
TF_j the end of unit j's forward, t1 >= TF_{n-1} the end of the forward phase,
tau_j the start of unit j's backward and T the end of the iteration.

1. Compute is one in-order queue: TF_0 >= f_0, TF_j >= TF_{j-1} + f_j; the
   backward runs after every forward, in reverse unit order, a recomputed
   block's forwards just before its backwards. So tau_j >= tau_{j+1} + b_{j+1},
   tau_j >= t1 + sum_{k>j} b_k + sum_{k>=j} y_k r_k (every later backward and
   every recompute of units >= j, unit j's own included, come first), and
   T >= tau_j + sum_{k<=j} b_k + S + tail, T >= t1 + B + sum_k y_k r_k + S + tail,
   where S is the device optimizer step (resident weights, device optimizer; its traffic over
   the fp32 masters in mixed precision, as the simulator charges it)
   and tail the first unit's gradient download and host update (and upload,
   resident weights with a host optimizer): block 0's gradients go down only
   after its backward.
2. Memory when unit i's backward starts (the op's allocation is counted):
   the static bytes (buffers; plus resident weights; plus the optimizer state
   with a device optimizer), the weight gradients (device optimizer: those of
   units >= i; otherwise at least unit i's own, which its backward allocates),
   streamed: unit i's weights (and tied weights it uses), its backward
   transient (output and input gradients, workspace), all of s_i (kept, or
   prefetched, or recomputed: a recomputed block's first unit holds the rest
   of its input as the checkpoint), and for j < i at least s_j unless unit j
   is swapped or recomputed (then we count nothing). All of it <= M. A unit
   making its input gradient last (models/lean_layers.py) is counted with the
   smaller of its input gradient and its saved input taken off: in its first
   phase the input gradient is not made yet, in its second a saved input may
   be gone (`split_relief`).
3. Memory when unit i's forward starts: static (streamed: unit i's weights),
   unit i's workspace and s_i, and s_j of every earlier unit j that is not
   recomputed, less the swapped bytes a_i already copied out by then (the
   forward allocates as it starts, at TF_i - f_i; frees come first at equal
   times): a_i <= sum_{j<i} x_j s_j, and, for every k < i,
   a_i <= sum_{j<k} x_j s_j + bw_d2h (TF_i - f_i - TF_k), since the bytes of
   units >= k leave only after their block's forward, hence after TF_k, through
   one queue at the link's rate (k = 0: nothing leaves before TF_0). All k in
   O(n) rows: Q_i, what may have left by TF_{i-1}, is at most Q_{i-1} +
   bw_d2h (TF_{i-1} - TF_{i-2}) and sum_{j<i-1} x_j s_j (Q_1 = 0), and
   a_i <= Q_i + bw_d2h (TF_i - f_i - TF_{i-1}).
4. Copies: a swapped unit's bytes come back (host->device) after t1 and before
   its backward, streamed weights are uploaded again after t1 before their
   backward: tau_i >= t1 + (sum_{j>=i} x_j s_j + streamed weights of units >= i)
   / bw_h2d. Swap-outs leave in forward order through one queue and a block is
   prefetched only after its own copy out ended, so a swapped unit j waits for
   every swapped byte of units <= j to leave, then for its own bytes (less the
   boundary it shares with the next unit, which may come back with that unit)
   to come back: if x_j = 1, tau_j >= sum_{k<=j} x_k s_k / bw_d2h + (s_j - shared_j)
   / bw_h2d, and tau_j >= TF_j + x_j (s_j / bw_d2h + (s_j - shared_j) / bw_h2d).
   Streamed: unit i's forward waits for the uploads of every unit <= i.
5. Whole iteration: each queue's total work fits in [0, T] (half duplex: one
   queue carries both directions); host-side optimizers: downloads and host
   updates start only after the last unit's backward.
6. Checkpoints (chains without boundary storage ids; with them a checkpoint
   is a boundary storage, held as karma/sim/boundary_memory.py says). A
   recompute segment starting at unit j holds its checkpoint, c_j = unit j's
   input less what unit j-1 shares with it (karma/sim/block_bytes.py counts
   at least that), either on the device from its forward to its backward, or
   on the host, copied out and back over the link. Let vd_j, vh_j in {0, 1}
   with vd_j + vh_j >= y_j - y_{j-1} wherever units j-1 and j both have own
   bytes (their y are then the plan's; elsewhere v_j is free): a unit whose
   predecessor is not recomputed starts a segment. Then c_j vd_j is added to
   the memory of items 2 and 3 of every unit i > j (unit i's own bytes do not
   include unit j's input, and a recomputed j's own bytes are not counted
   there), and c_j vh_j to the link's total work of item 5, each direction,
   and to the copies back of item 4 of every unit i <= j (a checkpoint comes
   back after t1, before its segment's recompute).

Every constraint holds for the plan's (x, y, vd, vh, TF, t1, tau, a, T), so the minimum
of T over this mixed-integer program is <= the plan's time. HiGHS
(scipy.optimize.milp) solves it; we take its *dual* bound (the proven lower end
of its optimality gap, never the incumbent) after at most `NODES` branch-and-bound
nodes, or the LP relaxation's optimum if it is higher; both are below the MILP
optimum. The result is the minimum over the three weight layouts, less 1e-6
relative for the solver's feasibility tolerance. QED.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from karma.core.hardware import Hardware
from karma.plan.plan import Block
from karma.profile.profile import GradientBytes, Profile, backward_transient, input_gradient_bytes, storage_bytes_of
from karma.sim.simulate import optimizer_traffic_bytes

GB = 1e9
#: (weights, optimizer): the weight layouts a Plan can express.
LAYOUTS = (("resident", "device"), ("resident", "host"), ("streamed", "host"))


@dataclass
class _Program:
    """Rows of `A v <= b` over the variables, built one constraint at a time; `new` adds variables."""

    nv: int

    def __post_init__(self):
        self.rows: list[dict[int, float]] = []
        self.rhs: list[float] = []
        self.zero: list[int] = []  # variables fixed at 0

    def le(self, entries: list[tuple[int, float]], bound: float) -> None:
        row: dict[int, float] = {}
        for idx, val in entries:
            row[idx] = row.get(idx, 0.0) + val
        self.rows.append(row)
        self.rhs.append(bound)

    def new(self, count: int) -> int:
        first = self.nv
        self.nv += count
        return first

    def running_sum(self, steps: list[list[tuple[int, float]]], below: bool, reverse: bool = False) -> int:
        """Variables V_0..V_m over the m `steps` (each a weighted sum of variables): V_0 = 0 and
        V_{k+1} <= V_k + step k if `below` (then V_k is at most the sum of the first k steps), >= if
        not; `reverse` sums from the last step (V_k: steps m-k..m-1). A constraint on a sum of
        variables (memory over every earlier unit, copies of every later one) then takes one row on
        V instead of a row of n entries: O(n) nonzeros in all, where the sums themselves took O(n^2)
        (gigabytes and minutes at ResNet-1001's 3339 layer units). With the direction of each use (a
        sum bounded from below uses `below`, one bounded from above not), every solution of the
        program maps to one of the summed form and back, so the optimum, the LP relaxation and the
        bound are the same."""
        m = len(steps)
        first = self.new(m + 1)
        self.zero.append(first)
        order = range(m - 1, -1, -1) if reverse else range(m)
        sign = 1.0 if below else -1.0
        for k, step in enumerate(order):
            self.le([(first + k + 1, sign), (first + k, -sign)] + [(v, -sign * c) for v, c in steps[step]], 0.0)
        return first

    def matrix(self, scale: np.ndarray) -> sparse.csr_matrix:
        data, cols, ptr = [], [], [0]
        for row in self.rows:
            for idx, val in row.items():
                cols.append(idx)
                data.append(val * scale[idx])
            ptr.append(len(cols))
        return sparse.csr_matrix((data, cols, ptr), shape=(len(self.rows), self.nv))


def split_relief(units, i: int) -> float:
    """Bytes unit i's backward may need less than all its transients and saved bytes at once: a unit
    making its input gradient last (models/lean_layers.py) holds the input gradient only after its
    weight gradients, when a saved input nothing else holds may be gone. Each of its two phases needs
    at least the whole less the smaller of the two, so the bound, counting that less, stays below both."""
    u = units[i]
    return min(input_gradient_bytes(units, i), u.saved_input_bytes) if u.input_grad_last else 0.0


def _gradients(units) -> list[float]:
    """Weight-gradient bytes each unit's backward allocates (tied weights credited as the simulator does)."""
    made = GradientBytes()
    out = [0.0] * len(units)
    for i in range(len(units) - 1, -1, -1):
        out[i] = made(units[i])
    return out


def _own_bytes(profile: Profile) -> tuple[np.ndarray, list[float]]:
    """(s_j, shared_j): each unit's own saved bytes, every storage counted once, and the bytes it
    shares with the next unit. With boundary storage ids (layer granularity, karma/sim/boundary_memory.py)
    a storage is counted with the first unit saving it and shared with the next unit if that one
    saves it too; the simulator holds it at least that long, so the sums stay below its memory."""
    units = profile.units
    if not any(u.boundary_out for u in units):
        shared = [float(profile.shared_boundary_bytes(i)) for i in range(len(units))]
        return np.array([u.saved_bytes - (shared[i - 1] if i else 0) for i, u in enumerate(units)], dtype=float), shared

    size = storage_bytes_of(profile)
    seen: set[int] = set()
    own, shared = [], []
    for i, u in enumerate(units):
        first = [sid for sid in u.boundary_saved if sid not in seen]
        seen.update(first)
        own.append(u.saved_bytes - sum(size[sid] for sid in u.boundary_saved) + sum(size[sid] for sid in first))
        after = set(units[i + 1].boundary_saved) if i + 1 < len(units) else set()
        shared.append(float(sum(size[sid] for sid in first if sid in after)))
    return np.array(own, dtype=float), shared


def _checkpoint_bytes(profile: Profile) -> np.ndarray:
    """Bytes of the checkpoint a recompute segment starting at unit j holds (its input, less what a kept unit
    before it shares), at least: what karma/sim/block_bytes.py counts for it. Zero with boundary storage ids
    (layer granularity): there a checkpoint is a boundary storage, held by karma/sim/boundary_memory.py."""
    units = profile.units
    if any(u.boundary_out for u in units):
        return np.zeros(len(units))
    shared = profile.shared_bytes
    return np.array([float(u.input_bytes - (shared[j - 1] if j else 0)) for j, u in enumerate(units)])


def _case(profile: Profile, hw: Hardware, capacity: float, weights: str, optimizer: str) -> _Layout | None:
    """The program of one weight layout, or None where some unit's backward alone does not fit."""
    units = profile.units
    n = len(units)
    streamed, host_opt = weights == "streamed", optimizer == "host" or weights == "streamed"
    own, shared = _own_bytes(profile)
    own = own / GB
    back = np.maximum(own - np.array(shared) / GB, 0.0)  # what a swapped unit's own prefetch surely brings
    param = np.array([u.param_bytes for u in units], dtype=float)
    total_params = float(param.sum())
    # the optimizer's bytes: in mixed precision its step streams the fp32 masters, as the simulator charges it
    total_state = float(sum(u.optimizer_bytes for u in units))
    d2h, h2d = hw.d2h_bw / GB, hw.h2d_bw / GB  # GB/s
    f = np.array([u.forward_time for u in units])
    r = np.array([min(u.recompute_time(True), u.recompute_time(False)) for u in units])  # either case
    b = np.array([u.backward_time for u in units])
    grads = _gradients(units)
    static = float(sum(u.buffer_bytes for u in units))
    if not streamed:
        static += total_params + (0 if host_opt else sum(u.optimizer_bytes for u in units))
    step = tail = up = down = host = 0.0
    if host_opt:
        down = total_params / hw.d2h_bw
        rate = hw.host_update_rate(1)
        host = optimizer_traffic_bytes(total_params, profile.optimizer, total_state) / rate
        tail = param[0] / hw.d2h_bw + optimizer_traffic_bytes(param[0], profile.optimizer,
                                                               units[0].optimizer_bytes) / rate
        up = 2 * total_params / hw.h2d_bw if streamed else total_params / hw.h2d_bw
        if not streamed:
            tail += param[0] / hw.h2d_bw
    else:
        step = optimizer_traffic_bytes(total_params, profile.optimizer, total_state) / hw.memory_bw
    live_grads = list(np.cumsum(grads[::-1])[::-1]) if not host_opt else grads
    weights_at = [(u.param_bytes + u.tied_param_bytes) if streamed else 0 for u in units]
    # memory left for earlier units' bytes when unit i's backward starts (GB)
    room = np.array([(capacity - static - live_grads[i] - weights_at[i] - backward_transient(units, i)
                      + split_relief(units, i)) / GB - own[i] for i in range(n)])
    if (room < 0).any():  # some unit's backward alone does not fit
        return None
    prefix = np.concatenate([[0.0], np.cumsum(own)])

    X, Y, T1, T2 = 0, n, 2 * n, 2 * n + 1
    TF, A, TAU = 2 * n + 2, 3 * n + 2, 4 * n + 2
    VD, VH = 5 * n + 2, 6 * n + 2  # 6. a recompute segment starts at unit j, its checkpoint on the device / host
    p = _Program(7 * n + 2)
    le = p.le
    ckpt = _checkpoint_bytes(profile) / GB
    # running sums (_Program.running_sum): V[i] over units < i, or >= i (reverse)
    kept_lo = p.running_sum([[(X + j, 1), (Y + j, 1)] for j in range(n)], below=True)  # swapped or recomputed
    recomputed_lo = p.running_sum([[(Y + j, 1)] for j in range(n)], below=True)
    swapped_lo = p.running_sum([[(X + j, 1)] for j in range(n)], below=True)
    swapped_hi = p.running_sum([[(X + j, 1)] for j in range(n)], below=False)
    later_swapped_hi = p.running_sum([[(X + j, 1)] for j in range(n)], below=False, reverse=True)
    later_recompute_hi = p.running_sum([[(Y + k, r[k] / own[k])] if own[k] else [] for k in range(n)],
                                       below=False, reverse=True)
    for j in range(n):
        le([(X + j, 1), (Y + j, 1)], own[j])  # x, y are scaled by own below: x_j + y_j <= 1
    # 6. segment starts: v_j = vd_j + vh_j >= y_j - y_{j-1} where both units' y are the plan's (own bytes)
    device_ckpt_hi = p.running_sum([[(VD + j, ckpt[j])] for j in range(n)], below=False)
    later_host_ckpt_hi = p.running_sum([[(VH + j, ckpt[j])] for j in range(n)], below=False, reverse=True)
    for j in range(n):
        if ckpt[j] > 0 and own[j] > 0 and (j == 0 or own[j - 1] > 0):
            le([(Y + j, 1 / own[j]), (VD + j, -1), (VH + j, -1)] + ([(Y + j - 1, -1 / own[j - 1])] if j else []), 0.0)
    # 1. compute in order; forward
    le([(TF, -1)], -f[0])
    for i in range(1, n):
        le([(TF + i - 1, 1), (TF + i, -1)], -f[i])
    le([(TF + n - 1, 1), (T1, -1)], 0.0)
    if streamed:  # 4. a unit's forward waits for the uploads of every unit up to it
        for i in range(n):
            le([(TF + i, -1)], -(param[: i + 1].sum() / hw.h2d_bw + f[i]))
    # 3. memory at each forward
    left = p.new(n)  # Q_i: what may have left by TF_{i-1} (item 3; Q_0 unused)
    for i in range(1, n):
        le([(A + i, 1), (swapped_lo + i, -1)], 0.0)
        if i == 1:
            le([(left + 1, 1)], 0.0)
        else:
            le([(left + i, 1), (left + i - 1, -1), (TF + i - 1, -d2h), (TF + i - 2, d2h)], 0.0)
            le([(left + i, 1), (swapped_lo + i - 1, -1)], 0.0)
        le([(A + i, 1), (left + i, -1), (TF + i, -d2h), (TF + i - 1, d2h)], -d2h * f[i])
    for i in range(n):
        transient = units[i].workspace_bytes + weights_at[i]
        le([(recomputed_lo + i, -1), (device_ckpt_hi + i, 1)] + ([(A + i, -1)] if i else []),
           (capacity - static - transient) / GB - own[i] - prefix[i])
    # 1. backward order and the recomputes before each backward
    for i in range(n):
        le([(later_recompute_hi + n - i, 1), (T1, 1), (TAU + i, -1)], -b[i + 1:].sum())
        if i + 1 < n:
            le([(TAU + i + 1, 1), (TAU + i, -1)], -b[i + 1])
        le([(TAU + i, 1), (T1, -1), (T2, -1)], -(b[: i + 1].sum() + step + tail))
    le([(later_recompute_hi + n, 1), (T1, -1), (T2, -1)], -(b.sum() + step + tail))
    # 2. memory at each backward
    for i in range(n):
        le([(kept_lo + i, -1), (device_ckpt_hi + i, 1)], room[i] - prefix[i])
    # 4. copies back before each backward; swap-outs in order before a swapped unit's prefetch
    for i in range(n):
        later_weights = param[i:].sum() / GB if streamed else 0.0
        le([(later_swapped_hi + n - i, 1), (later_host_ckpt_hi + n - i, 1), (TAU + i, -h2d), (T1, h2d)],
           -later_weights)
        if own[i] > 0:
            big = prefix[i + 1] / d2h + back[i] / h2d
            le([(swapped_hi + i + 1, 1 / d2h), (X + i, back[i] / own[i] / h2d + big / own[i]), (TAU + i, -1)], big)
            le([(TF + i, 1), (X + i, 1 / d2h + back[i] / own[i] / h2d), (TAU + i, -1)], 0.0)
    # 5. whole iteration
    if host_opt:
        first = (param[n - 1] / hw.d2h_bw) + b[n - 1]
        le([(T2, -1)], -(b[n - 1] + down))
        le([(T2, -1)], -(first + host))
    host_ckpt = [(VH + j, ckpt[j]) for j in range(n)]  # out and back
    if hw.link_duplex == "half":
        le([(X + j, 1 / d2h + 1 / h2d) for j in range(n)] + [(v, c / d2h + c / h2d) for v, c in host_ckpt]
           + [(T1, -1), (T2, -1)], -(up + down))
    else:
        le([(X + j, 1 / d2h) for j in range(n)] + [(v, c / d2h) for v, c in host_ckpt] + [(T1, -1), (T2, -1)], -down)
        le([(X + j, 1 / h2d) for j in range(n)] + [(v, c / h2d) for v, c in host_ckpt] + [(T1, -1), (T2, -1)], -up)
    return _Layout(p, n, own, T1, T2)


@dataclass
class _Layout:
    """One weight layout's program: its rows, the unit count, the own bytes scaling x and y, the objective."""

    program: _Program
    n: int
    own: np.ndarray
    t1: int
    t2: int

    def __post_init__(self):
        p, n = self.program, self.n
        self.c = np.zeros(p.nv)
        self.c[self.t1] = self.c[self.t2] = 1.0
        # A unit's bytes all follow its block's policy: x and y are 0/1 choices scaled by its bytes.
        scale = np.ones(p.nv)
        scale[: n] = scale[n: 2 * n] = np.where(self.own > 0, self.own, 1.0)
        self.constraints = LinearConstraint(p.matrix(scale), -np.inf, np.array(p.rhs))
        self.lower, self.upper = np.zeros(p.nv), np.full(p.nv, np.inf)
        self.upper[: 2 * n] = np.where(self.own > 0, 1.0, 0.0).tolist() * 2
        self.upper[p.zero] = 0.0

    def relaxed(self) -> float:
        """The LP relaxation's optimum (inf: no plan of this layout fits even fractionally)."""
        res = milp(self.c, bounds=Bounds(self.lower, self.upper), constraints=self.constraints)
        if res.status == 2:
            return math.inf
        if res.status != 0:
            raise RuntimeError(f"lower bound LP failed: {res.message}")
        return max(res.fun, 0.0)

    def solve(self, nodes: int, incumbents: bool = True):
        """HiGHS's result after at most `nodes` branch-and-bound nodes (scipy.optimize.milp's OptimizeResult).
        Without `incumbents`, HiGHS's primal heuristics are off (feasibility jump, RINS and RENS sub-MIPs,
        rounding; HiGHS options `mip_heuristic_*`, highs.dev): they look for solutions, which a dual bound does
        not need, and on ResNet-1001's chains they were three quarters of the solve."""
        integrality = np.zeros(self.program.nv)
        integrality[: 2 * self.n] = 1
        integrality[5 * self.n + 2: 7 * self.n + 2] = 1  # where each recompute segment's checkpoint is
        options = {"node_limit": nodes}
        if not incumbents:
            options.update(mip_heuristic_effort=0.0, mip_heuristic_run_feasibility_jump=False,
                           mip_heuristic_run_rins=False, mip_heuristic_run_rens=False)
        with warnings.catch_warnings():  # scipy passes options it does not list on to HiGHS, with a warning
            warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
            return milp(self.c, integrality=integrality, bounds=Bounds(self.lower, self.upper),
                        constraints=self.constraints, options=options)

    def integral(self, nodes: int) -> float:
        """HiGHS's dual bound after at most `nodes` branch-and-bound nodes (inf: proven infeasible)."""
        res = self.solve(nodes, incumbents=False)
        if res.status == 2:
            return math.inf
        dual = getattr(res, "mip_dual_bound", None)
        return max(dual, 0.0) if dual is not None and math.isfinite(dual) else 0.0

    def schedule(self, nodes: int, weights: str, optimizer: str) -> Schedule | None:
        """The program's incumbent after `nodes` nodes as a `Schedule` (None: it has none)."""
        res = self.solve(nodes)
        if res.x is None:
            return None
        n, x = self.n, np.round(res.x).astype(int)
        policies = tuple("swap" if x[j] else "recompute" if x[n + j] else "keep" for j in range(n))
        vd, vh = x[5 * n + 2: 6 * n + 2], x[6 * n + 2: 7 * n + 2]
        starts = tuple(("host" if vh[j] else "device") if policies[j] == "recompute"
                       and (j == 0 or policies[j - 1] != "recompute" or vd[j] or vh[j]) else ""
                       for j in range(n))
        return Schedule(weights, optimizer, float(res.fun), policies, starts)


@dataclass(frozen=True)
class Schedule:
    """One weight layout's solution of the program (HiGHS's incumbent): the swap, recompute and checkpoint
    decisions its value assumes. The program lets copies start at any moment and counts only the memory of
    item 2 and 3's rows, so a plan of these decisions may need more time or memory in the simulator: what
    that costs says whether a plan / bound gap lies in the plan space or in the program
    (karma/experiments/bound_schedule.py)."""

    #: the layout: "resident" or "streamed" weights, the optimizer on the "device" or the "host"
    weights: str
    optimizer: str
    #: the incumbent's value, seconds (the program's optimum, and so the bound, is at most this)
    value: float
    #: per unit: "keep", "swap" or "recompute"
    policies: tuple[str, ...]
    #: per unit: where the checkpoint of a recompute segment starting there lives ("device" or "host"), else ""
    starts: tuple[str, ...]

    def blocks(self) -> tuple[Block, ...]:
        """One block per kept or swapped unit (each copy issued on its own) and per recompute segment."""
        out: list[Block] = []
        for j, (policy, start) in enumerate(zip(self.policies, self.starts, strict=True)):
            if policy == "recompute" and not start:
                out[-1] = Block(out[-1].start, j + 1, policy, out[-1].checkpoint)
            else:
                out.append(Block(j, j + 1, policy, start or "device"))
        return tuple(out)


#: Branch-and-bound nodes per weight layout: a work limit, so that the bound is the same number on a loaded
#: and an idle machine (a time limit made it depend on the machine's speed).
NODES = 100


def lower_bound(profile: Profile, hw: Hardware, capacity: float | None = None, nodes: int = NODES) -> float:
    """Seconds: no feasible plan of (profile, hw, capacity) is faster (see the module docstring).

    Each layout's LP relaxation first; then, in the order of their relaxations, the mixed-integer
    program of every layout whose relaxation is below the least bound so far, its solver stopped after
    `nodes` branch-and-bound nodes (0: the relaxations alone). A stopped solver's dual bound is still a
    lower bound, and a layout whose relaxation is above another's bound cannot hold the minimum, so it
    is not solved. Deterministic: the same value on every machine with the same HiGHS.
    """
    capacity = hw.device_memory if capacity is None else capacity
    layouts = [case for case in (_case(profile, hw, capacity, w, o) for w, o in LAYOUTS) if case is not None]
    relaxed = sorted(((case.relaxed(), k) for k, case in enumerate(layouts)), key=lambda pair: pair[0])
    best = min((value for value, _ in relaxed), default=math.inf)
    if nodes > 0:
        best = math.inf
        for value, k in relaxed:
            if value < best:
                best = min(best, max(value, layouts[k].integral(nodes)))
    return best * (1 - 1e-6)


def schedules(profile: Profile, hw: Hardware, capacity: float | None = None, nodes: int = NODES) -> list[Schedule]:
    """Each weight layout's `Schedule` (the layouts where no unit's backward alone overflows and HiGHS finds
    an incumbent within `nodes` nodes), fastest first."""
    capacity = hw.device_memory if capacity is None else capacity
    found = []
    for weights, optimizer in LAYOUTS:
        case = _case(profile, hw, capacity, weights, optimizer)
        schedule = case.schedule(nodes, weights, optimizer) if case is not None else None
        if schedule is not None:
            found.append(schedule)
    return sorted(found, key=lambda s: s.value)

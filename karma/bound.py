"""A lower bound on the iteration time of every feasible plan (the physical limit).

Claim: for a Profile P, Hardware H and capacity M, every plan of our plan space
(karma/plan.py) that the simulator accepts takes at least ``lower_bound(P, H, M)``.

Proof. Take a feasible plan with iteration time T; let t_b be the moment the
last unit's backward starts (the end of the forward phase). For unit j let
s_j be its own saved bytes (a tensor shared with unit j-1 counted there),
f_j its forward time; let x_j be the bytes of unit j that are swapped at any
time of the iteration, x'_j <= x_j those that are away (copied out and not
yet back) at t_b, and y_j those that are recomputed; x_j + y_j <= s_j.

1. Memory at each backward. When unit i's backward starts, every earlier
   unit j < i still holds its own bytes on the device unless they are away
   (swapped) or dropped (recomputed, which happens just before j's backward,
   later); unit i holds all of s_i; the static bytes (buffers; plus weights
   and optimizer state when resident), the weight gradients of units >= i
   (resident; streamed: unit i's weights and gradients) and unit i's
   transients (output and input gradients, workspace) are there too. A
   feasible plan fits, so for every i:
   sum_{j<i} (s_j - x_j - y_j) <= M - static - grads_i - s_i - transient_i,
   and at t_b the same holds with x' in place of x.
2. Forward phase: every forward runs before t_b and the bytes away at t_b
   were copied out before it: t_b >= F and t_b >= X' / bw_d2h (streamed: the
   forward uploads W / bw_h2d too; half duplex: one queue carries both).
   A unit's bytes can leave only after its forward, so for every j:
   t_b >= (forwards of units <= j) + (x' of units >= j) / bw_d2h. And the
   device must hold, when unit i's forward ends (at t_i >= t_{i-1} + f_i),
   the static bytes, unit i's workspace (and streamed weights) and every
   earlier unit's bytes except the recomputed ones and a_i <= sum_{k<i} x_k
   already copied out, at most bw_d2h (t_i - t_0) bytes since the first
   forward ended.
3. Backward phase: every backward, the recompute of the y bytes (their
   forward time, sum f_j y_j / s_j), the device optimizer step S (resident)
   run after t_b, and the bytes away at t_b come back after it:
   T - t_b >= B + R + S and T - t_b >= X' / bw_h2d (streamed: + W / bw_h2d
   uploads, and unit 0's gradient download and host update come after the
   last compute, unit 0's backward). Unit j's backward needs the bytes of
   units >= j back, after which the backward of units <= j and the recompute
   of units < j still run: for every j, T - t_b >= (x' of units >= j) /
   bw_h2d + (backwards of units <= j) + (recompute of units < j) + S.
   The device-to-host queue copies swapped blocks out in forward order and a
   block is prefetched only after its copy out ended, so unit j's backward
   starts after (x of units <= j) / bw_d2h + x_j / bw_h2d and after
   t_j + x_j / bw_d2h + x_j / bw_h2d. Bytes of units < i prefetched before
   unit i's backward (p_i) count in its memory, and all prefetched bytes
   arrive after the forward ends, at the link's rate.
4. Whole iteration: every swapped byte crosses the link out and back, and
   streamed weights go up twice and their gradients down once; the host
   runs every update: T >= each queue's total work.
A unit's bytes all follow its block's policy, so x_j, x'_j, y_j are each
0 or s_j. The minimum of t_1 + t_2 (t_1 >= the phase 1 terms, t_2 >= the
phase 2 terms, t_1 + t_2 >= the whole-iteration terms) over this mixed-
integer program is <= T for every feasible plan (the times a_i and t_i stay
real: relaxing them only lowers the minimum). HiGHS (scipy.optimize.milp)
solves it; if its time limit is reached we take its dual bound (or the LP
relaxation's minimum), both below the optimum. We return the smaller of the resident and streamed cases,
less 1e-6 relative for the solver's tolerance. QED.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from karma.hardware import Hardware
from karma.profile import Profile, backward_transient
from karma.simulate import optimizer_traffic_bytes

GB = 1e9


def _case(profile: Profile, hw: Hardware, capacity: float, streamed: bool, time_limit: float) -> float:
    units = profile.units
    n = len(units)
    own = np.array([u.saved_bytes - (profile.shared_boundary_bytes(i - 1) if i else 0)
                    for i, u in enumerate(units)], dtype=float) / GB
    params = profile.param_bytes()
    weights = np.array([u.param_bytes for u in units], dtype=float) / GB
    static = sum(u.buffer_bytes for u in units)
    half = hw.link_duplex == "half"
    d2h, h2d = hw.d2h_bw / GB, hw.h2d_bw / GB  # GB/s
    f = np.array([u.forward_time for u in units])
    b = np.array([u.backward_time for u in units])
    up = down = host = step = tail = 0.0
    if streamed:
        up, down = params / hw.h2d_bw, params / hw.d2h_bw
        host = optimizer_traffic_bytes(params, profile.optimizer) / hw.host_update_bw
        tail = weights[0] / d2h + optimizer_traffic_bytes(units[0].param_bytes, profile.optimizer) / hw.host_update_bw
        grads = [2 * u.param_bytes for u in units]
    else:
        static += sum(u.param_bytes + u.optimizer_bytes for u in units)
        step = optimizer_traffic_bytes(params, profile.optimizer) / hw.memory_bw
        grads = list(np.cumsum([u.param_bytes for u in units][::-1])[::-1])
    cap = np.array([(capacity - static - grads[i] - backward_transient(units, i)) / GB - own[i]
                    for i in range(n)])
    if (cap < 0).any():  # some unit's backward alone does not fit
        return math.inf
    rate = f / np.where(own > 0, own, 1.0)  # recompute seconds per GB freed
    prefix = np.concatenate([[0.0], np.cumsum(own)])

    # variables: x, y (n each: GB swapped / recomputed), t1 (end of forward), t2 (rest),
    # tf (end of each forward), a (GB away then), tau (start of each backward), p (GB prefetched early)
    X, Y, T1, T2 = 0, n, 2 * n, 2 * n + 1
    TF, A, TAU, P = 2 * n + 2, 3 * n + 2, 4 * n + 2, 5 * n + 2
    nv = 6 * n + 2
    rows, rhs = [], []

    def row(entries, bound):
        r = np.zeros(nv)
        for idx, val in entries:
            r[idx] += val
        rows.append(r)
        rhs.append(bound)

    for j in range(n):
        row([(X + j, 1), (Y + j, 1)], own[j])
    # forward phase: compute in order; bytes leave at most at the link's rate, only swapped ones
    row([(TF, -1)], -f[0])
    for i in range(1, n):
        row([(TF + i - 1, 1), (TF + i, -1)], -f[i])
        row([(A + i, 1), (TF + i, -d2h), (TF, d2h)], 0.0)
        row([(A + i, 1)] + [(X + k, -1) for k in range(i)], 0.0)
    row([(TF + n - 1, 1), (T1, -1)], 0.0)
    row([(T1, -1)], -up)
    for i in range(n):
        transient = units[i].workspace_bytes + (units[i].param_bytes if streamed else 0)
        row([(Y + k, -1) for k in range(i)] + [(A + i, -1)], (capacity - static - transient) / GB - own[i] - prefix[i])
    # backward phase: in reverse order, each after its prefetches and the recompute before it
    row([(T1, 1), (TAU + n - 1, -1)], 0.0)
    for i in range(n - 1, 0, -1):
        row([(TAU + i, 1), (TAU + i - 1, -1), (Y + i - 1, rate[i - 1])], -b[i])
    row([(TAU + n - 1, -1), (Y + n - 1, rate[n - 1]), (T1, 1)], 0.0)
    for i in range(n):
        later_weights = weights[i:].sum() if streamed else 0.0
        row([(X + j, 1) for j in range(i, n)] + [(P + i, 1), (TAU + i, -h2d), (T1, h2d)], -later_weights)
        row([(P + i, 1)] + [(X + j, -1) for j in range(i)], 0.0)
        row([(X + j, -1) for j in range(i)] + [(Y + j, -1) for j in range(i)] + [(P + i, 1)], cap[i] - prefix[i])
    # swap-outs leave in forward order through one queue, and a unit's bytes come back only
    # after they left: unit j's backward waits for every swapped byte of units <= j to leave
    for j in range(n):
        row([(X + k, 1 / d2h) for k in range(j + 1)] + [(X + j, 1 / h2d), (TAU + j, -1)], 0.0)
        row([(TF + j, 1), (X + j, 1 / d2h + 1 / h2d), (TAU + j, -1)], 0.0)
    row([(TAU, 1), (T1, -1), (T2, -1)], -(b[0] + step + tail))
    row([(Y + j, rate[j]) for j in range(n)] + [(T2, -1)], -(b.sum() + step + tail))
    row([(T2, -1)], -down)
    row([(T2, -1)], -host)
    # whole iteration: each queue's total work
    if half:
        row([(X + j, 1 / d2h + 1 / h2d) for j in range(n)] + [(T1, -1), (T2, -1)], -(2 * up + down))
    else:
        row([(X + j, 1 / d2h) for j in range(n)] + [(T1, -1), (T2, -1)], -down)
        row([(X + j, 1 / h2d) for j in range(n)] + [(T1, -1), (T2, -1)], -2 * up)
    c = np.zeros(nv)
    c[T1] = c[T2] = 1.0
    # A unit's bytes all follow its block's policy: x and y are 0/1 choices scaled by its bytes.
    scale = np.ones(nv)
    scale[X:X + n] = scale[Y:Y + n] = own
    matrix = np.array(rows) * scale
    lower, upper = np.zeros(nv), np.full(nv, np.inf)
    upper[: 2 * n] = 1.0
    integrality = np.zeros(nv)
    integrality[: 2 * n] = 1
    constraints = LinearConstraint(sparse.csr_matrix(matrix), -np.inf, np.array(rhs))
    relaxed = milp(c, bounds=Bounds(lower, upper), constraints=constraints)
    if relaxed.status == 2:  # infeasible even fractionally: no plan can fit
        return math.inf
    if relaxed.status != 0:
        raise RuntimeError(f"lower bound LP failed: {relaxed.message}")
    bound = relaxed.fun
    if time_limit > 0:
        res = milp(c, integrality=integrality, bounds=Bounds(lower, upper), constraints=constraints,
                   options={"time_limit": time_limit})
        if res.status == 2:
            return math.inf
        found = res.fun if res.status == 0 else res.get("mip_dual_bound")
        if found is not None and math.isfinite(found):
            bound = max(bound, found)
    return bound * (1 - 1e-6)


def lower_bound(profile: Profile, hw: Hardware, capacity: float | None = None, time_limit: float = 1.0) -> float:
    """Seconds: no feasible plan of (profile, hw, capacity) is faster (see the module docstring).

    `time_limit` (s, per case) caps the MILP solver; past it, its dual bound is
    returned, which is still a valid (if looser) lower bound.
    """
    capacity = hw.device_memory if capacity is None else capacity
    return min(_case(profile, hw, capacity, False, time_limit), _case(profile, hw, capacity, True, time_limit))

"""A lower bound on the iteration time of every feasible plan (the physical limit).

Claim: for a Profile P, Hardware H and capacity M, every plan of our plan space
(karma/plan.py) that the simulator accepts takes at least ``lower_bound(P, H, M)``.

Proof. Take a feasible plan with iteration time T, and let t_b be the moment
the last unit's backward starts (the end of the forward phase).

1. Memory at t_b. Every unit that is neither swapped nor recomputed still
   holds its own saved bytes on the device (freed only by its backward), as
   do the static bytes (buffers; plus weights and optimizer state when
   resident) and the last unit's transients (output and input gradients,
   workspace, its weight gradients). A feasible plan fits at t_b, so the own
   bytes of units that are swapped out and not yet back (X) or recomputed
   (Y) add up to at least E = A + static + transient_last - M, with A the
   chain's activation bytes (a tensor shared by two units once; freeing it
   needs both, so this is a relaxation).
2. Forward phase. The compute queue runs every forward before t_b, and the
   d2h queue copies X out before t_b (bytes leave only when their copy ends):
   t_b >= F and t_b >= X / bw_d2h (streamed weights: also the forward uploads
   W / bw_h2d; half duplex: one queue carries both).
3. Backward phase. After t_b the compute queue runs every backward, the
   recomputation of the Y bytes (at least R(Y), below) and the device
   optimizer step S (resident weights); the h2d queue brings X back (and
   streamed weights again, W); the d2h queue takes streamed gradients down
   and the host runs their update U: T >= t_b + max(B + R(Y) + S,
   X / bw_h2d + W / bw_h2d, ...). Streamed: unit 0's backward is the last
   compute, so its gradient download and host update come after all of it:
   T >= t_b + B + R(Y) + w_0 / bw_d2h + update(w_0).
4. Recomputing unit i frees at most its own bytes s_i at the cost of its
   forward time f_i; allowing fractions of units gives R(Y), the fractional
   knapsack that recomputes the cheapest f_i / s_i first: convex and
   piecewise linear in Y.
So T >= min over 0 <= Y <= E (X = E - Y) of phase1(X) + phase2(X, Y). Both
phases are maxima of linear or convex piecewise-linear functions of Y, so the
sum is convex and piecewise linear: its minimum lies at a breakpoint, which we
enumerate exactly (knots of R, and where the terms of each max cross on each
linear piece). The bound is the smaller of the resident and streamed cases.
Each step relaxes the feasible set, so no feasible plan is faster. QED.
"""

from __future__ import annotations

import math

from karma.hardware import Hardware
from karma.profile import Profile
from karma.simulate import optimizer_traffic_bytes


def _knapsack(profile: Profile) -> list[tuple[float, float]]:
    """(rate s/byte, bytes) per unit, cheapest recompute per freed byte first."""
    units = profile.units
    own = [u.saved_bytes - (profile.shared_boundary_bytes(i - 1) if i else 0) for i, u in enumerate(units)]
    return sorted((u.forward_time / b, b) for u, b in zip(units, own, strict=True) if b > 0)


def _case(profile: Profile, hw: Hardware, capacity: float, streamed: bool) -> float:
    units = profile.units
    last = units[-1]
    params = profile.param_bytes()
    static = sum(u.buffer_bytes for u in units)
    fwd, bwd = profile.forward_time(), profile.backward_time()
    half = hw.link_duplex == "half"
    up1 = up2 = down2 = host = step = tail = 0.0
    if streamed:
        up1 = up2 = params / hw.h2d_bw
        down2 = params / hw.d2h_bw
        host = optimizer_traffic_bytes(params, profile.optimizer) / hw.host_update_bw
        first = units[0].param_bytes
        tail = first / hw.d2h_bw + optimizer_traffic_bytes(first, profile.optimizer) / hw.host_update_bw
        transient_weights = 2 * last.param_bytes
    else:
        static += sum(u.param_bytes + u.optimizer_bytes for u in units)
        step = optimizer_traffic_bytes(params, profile.optimizer) / hw.memory_bw
        transient_weights = last.param_bytes
    transient = last.output_bytes + last.input_bytes + last.workspace_bytes + transient_weights
    if static + transient > capacity:
        return math.inf
    excess = max(0.0, profile.activation_bytes() + static + transient - capacity)
    items = _knapsack(profile)

    def phase1(x: float) -> float:
        out = x / hw.d2h_bw
        return max(fwd, up1 + out if half else max(up1, out))

    def phase2(x: float, y: float, rec: float) -> float:
        back = up2 + x / hw.h2d_bw
        link = back + down2 if half else max(back, down2)
        return max(bwd + rec + step + tail, link, host)

    # Pieces of R(Y): on [knot, knot + nbytes] R grows at `rate` from `base`.
    candidates = [0.0]
    pieces = []
    knot = base = 0.0
    for rate, nbytes in items:
        if knot >= excess:
            break
        pieces.append((knot, min(knot + nbytes, excess), base, rate))
        base += rate * (min(knot + nbytes, excess) - knot)
        knot += nbytes
    if knot < excess:  # cannot recompute more than every unit's bytes
        pieces.append((knot, excess, math.inf, 0.0))
    best = math.inf
    for lo, hi, b0, rate in pieces:
        points = [lo, hi]
        if b0 != math.inf:
            # phase1 switches where X / bw_d2h reaches the other term; phase2 where compute meets the link.
            for x_star in (fwd * hw.d2h_bw, (fwd - up1) * hw.d2h_bw if half else fwd * hw.d2h_bw):
                points.append(excess - x_star)
            # bwd + step + b0 + rate (y - lo) = up2 + (excess - y) / bw_h2d
            k = 1 / hw.h2d_bw
            denom = rate + k
            if denom > 0:
                points.append((up2 + excess * k - bwd - step - tail - b0 + rate * lo) / denom)
        for y in points + candidates:
            if lo <= y <= hi:
                rec = math.inf if b0 == math.inf else b0 + rate * (y - lo)
                best = min(best, phase1(excess - y) + phase2(excess - y, y, rec))
    if not pieces:
        best = phase1(0.0) + phase2(0.0, 0.0, 0.0)
    return best


def lower_bound(profile: Profile, hw: Hardware, capacity: float | None = None) -> float:
    """Seconds: no feasible plan of (profile, hw, capacity) is faster (see the module docstring)."""
    capacity = hw.device_memory if capacity is None else capacity
    return min(_case(profile, hw, capacity, streamed=False), _case(profile, hw, capacity, streamed=True))

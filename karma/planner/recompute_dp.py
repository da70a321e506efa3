"""Exact recompute-only sub-plans for KARMA's planner, by dynamic programming over the chain.

KARMA's concurrency analysis says that when the link cannot hide a block's
copy, the block is recomputed; the cheapest set of recompute segments under a
memory budget is then a shortest-path problem over segment boundaries, solved
exactly here rather than searched. The planner uses its answer, under each
weight layout's memory left after the static bytes, as one more seed of its
unit-level search (karma/planner/planner.py), which then moves block edges, trades
recompute for swaps and picks depth and layout by simulation.

Plans: a tiling of the units into kept units and recompute segments (the
checkpoint on the device), nothing swapped. State of the program at a boundary:
whether the block before is kept (a kept neighbour shares its boundary tensor
with the next block, as karma/sim/simulate.py counts it) and the bytes retained for
the backward so far. Every block's peak is that retained total plus a term of
the block alone (its forward; its recompute with the gradients of later
units; its backward), karma/sim/simulate.py's memory model for this subspace with
resident weights. Per boundary only the states that no cheaper, smaller state
beats are kept; past `BUCKETS` candidates, memory is bucketed (`BUCKETS` per
budget) and only the cheapest state per bucket is considered.
The memory model of other layouts differs (gradients leave the device,
streamed weights come and go), so the planner simulates the result and, if it
is over capacity, solves again with the budget lowered by the excess.
"""

from __future__ import annotations

import bisect

import numpy as np

from karma.profile.profile import GradientBytes, Profile, backward_transient, output_gradient_bytes

BUCKETS = 250


class Chain:
    """Per-unit memory terms of karma/sim/simulate.py for recompute-only plans."""

    def __init__(self, profile: Profile, host_gradients: bool = False):
        units = profile.units
        n = self.n = len(units)
        self.units = units
        self.last = [u.recompute_time(True) for u in units]  # the last of its segment
        self.inner = [u.recompute_time(False) for u in units]  # inside it
        self.saved = [float(u.saved_bytes) for u in units]
        self.forward = np.concatenate([[0.0], np.cumsum([u.forward_time for u in units])])  # prefix sums
        self.shared = [float(profile.shared_boundary_bytes(i)) for i in range(n)]  # between i and i+1
        self.ws = [float(u.workspace_bytes) for u in units]
        self.trans = [float(backward_transient(units, i)) for i in range(n)]
        grads = [0.0] * n
        made = GradientBytes()
        for i in range(n - 1, -1, -1):
            grads[i] = float(made(units[i]))
        if host_gradients:  # gradients leave after each block's backward: only the largest one waits
            self.gsuf = np.full(n + 1, max(grads, default=0.0))
        else:
            self.gsuf = np.concatenate([np.cumsum(grads[::-1])[::-1], [0.0]])

    def keep(self, i: int, prev_keep: bool) -> tuple[float, float]:
        """(peak term, retained bytes) of unit i kept."""
        own = self.saved[i] - (self.shared[i - 1] if prev_keep and i else 0.0)
        return own + max(self.ws[i], self.trans[i] + self.gsuf[i]), own

    def swapped(self, a: int, b: int) -> float:
        """Peak term of a swap block [a, b): its own saved bytes while it runs forward (and back
        once prefetched) with each unit's workspace or backward transient; it retains nothing."""
        cum, peak = 0.0, 0.0
        for j in range(a, b):
            cum += self.saved[j] - (self.shared[j - 1] if j > a else 0.0)
            peak = max(peak, cum + max(self.ws[j], self.trans[j] + self.gsuf[j]))
        return peak

    def segments(self, a: int, prev_keep: bool, budget: float, stop: int | None = None):
        """(b, peak term, retained bytes, recompute time) of segment [a, b) for growing b <= `stop`,
        while it can fit."""
        u = self.units
        ckpt = float(u[a].input_bytes) - (self.shared[a - 1] if prev_keep and a else 0.0)
        cum, fwd_peak, rec_peak, bwd_peak, time = 0.0, 0.0, 0.0, 0.0, 0.0  # time: of the units inside
        for j in range(a, self.n if stop is None else stop):
            own = self.saved[j] - (min(u[j].saved_input_bytes, u[j].input_bytes) if j == a else self.shared[j - 1])
            last_ws = self.ws[j]
            if j < self.n - 1 and not u[j].saved_output_bytes:  # checkpoint's early stop
                last_ws = max(last_ws - u[j].output_bytes, 0.0)
            before = cum
            cum += own
            fwd_peak = max(fwd_peak, own + self.ws[j])
            bwd_peak = max(bwd_peak, cum + self.trans[j] + self.gsuf[j])
            b = j + 1
            waiting = float(output_gradient_bytes(u, j)) if b < self.n else 0.0
            recompute = max(rec_peak, before + own + last_ws) + waiting + self.gsuf[b]
            yield b, ckpt + max(fwd_peak, recompute, bwd_peak), ckpt, time + self.last[j]
            time += self.inner[j]
            rec_peak = max(rec_peak, before + own + self.ws[j])
            if ckpt + cum > budget:
                return


def _front(parts, width: float):
    """Merge the candidate parts (prefixes of earlier fronts, shifted by (bytes, seconds)) into the
    states no cheaper-and-smaller state beats. Up to BUCKETS candidates are all kept (the exact front:
    a state dropped only for a cheaper one of a few bytes more can be the one that fits later, as a
    3-unit chain with 1 MB boundaries and 2.6 MB buckets showed); past that, the cheapest per memory
    bucket (rotor's discretisation, Sec. 5) first."""
    counts = [p[3] for p in parts]
    retained = np.concatenate([p[0][:p[3]] for p in parts]) + np.repeat([p[4] for p in parts], counts)
    cost = np.concatenate([p[1][:p[3]] for p in parts]) + np.repeat([p[5] for p in parts], counts)
    parent = np.concatenate([p[2][:p[3]] for p in parts])
    if len(retained) <= BUCKETS:
        order = np.lexsort((cost, retained))  # retained ascending, the cheapest first at equal bytes
    else:
        bucket = np.floor(retained / width).astype(np.int64)
        bucket -= bucket.min()
        # the cheapest state per bucket (the first of equal ones), without sorting all of them
        least = np.full(bucket.max() + 1, np.inf)
        np.minimum.at(least, bucket, cost)
        cheapest = np.flatnonzero(cost == least[bucket])
        _, first = np.unique(bucket[cheapest], return_index=True)
        order = cheapest[first]  # bucket ascending
    running = np.minimum.accumulate(cost[order])
    better = np.ones(len(order), bool)
    better[1:] = cost[order][1:] < running[:-1]
    order = order[better]
    return retained[order], cost[order], parent[order]  # retained ascending


def _push(parts: list, front, room: float, add: float, time: float) -> None:
    """Hand the states of `front` that leave `room` for a block on, shifted by (add bytes, time)
    (retained is ascending: the states that fit are a prefix)."""
    retained, cost, index = front
    count = int(np.searchsorted(retained, room, side="right"))
    if count:
        parts.append((retained, cost, index, count, add, time))


def solve(chain: Chain, budget: float, swaps: tuple[tuple[int, int], ...] = (),
          host_checkpoints: bool = False, copy_rate: float | None = None,
          longest: int | None = None) -> list[tuple[int, int, str]] | None:
    """Blocks (start, stop, kind) of least recompute time whose modelled peak fits `budget`
    bytes (the device memory less the layout's static bytes), or None. Kinds: 'K' (one block
    per kept unit), 'R'; with `host_checkpoints`, 'r' (the checkpoint on the host: it retains
    nothing, its copy is taken as hidden). `swaps`: (start, stop) blocks pinned as 'S', which
    retain nothing (their copies are taken as hidden; the planner simulates the result).
    `copy_rate` (bytes/s to the host): an 'r' segment only where its checkpoint's copy out takes no
    longer than the segment's forward, which it overlaps (the simulator's forward `depth` blocks on
    waits for it). `longest`: segments of at most that many units (see karma/planner/retile.py)."""
    n = chain.n
    if budget <= 0:
        return None
    pinned = dict(swaps)
    walls = sorted(list(pinned) + [n])
    width = budget / BUCKETS
    # after-block kinds: the flag is the kind of the block that ends at the boundary
    kinds = ("R", "K", "S", "r")
    pending = [[[] for _ in kinds] for _ in range(n + 1)]
    fronts = [[None for _ in kinds] for _ in range(n + 1)]
    bases, owners = [], []  # the first parent index of each front, and its (boundary, flag)
    count = 0
    pending[0][0].append((np.zeros(1), np.zeros(1), np.array([-1]), 1, 0.0, 0.0))
    for a in range(n + 1):
        for flag in range(len(kinds)):
            if not pending[a][flag]:
                continue
            retained, cost, _ = fronts[a][flag] = _front(pending[a][flag], width)
            pending[a][flag] = None
            if a == n:
                continue
            bases.append(count)
            owners.append((a, flag))
            front = (retained, cost, np.arange(count, count + len(retained)))
            count += len(retained)

            def push(b, to, peak, add, time, front=front):
                _push(pending[b][to], front, budget - peak, add, time)

            if a in pinned:
                push(pinned[a], 2, chain.swapped(a, pinned[a]), 0.0, 0.0)
                continue
            peak, kept = chain.keep(a, flag == 1)
            push(a + 1, 1, peak, kept, 0.0)
            stop = walls[bisect.bisect_right(walls, a)]
            if longest is not None:
                stop = min(stop, a + longest)
            for b, peak, ckpt, time in chain.segments(a, flag == 1, budget, stop):
                push(b, 0, peak, ckpt, time)
                if host_checkpoints and (copy_rate is None or ckpt / copy_rate <= chain.forward[b] - chain.forward[a]):
                    push(b, 3, peak, 0.0, time)
    ends = [(f[1].min(), flag, int(f[1].argmin())) for flag, f in enumerate(fronts[n]) if f is not None]
    if not ends:
        return None
    _, flag, k = min(ends)
    blocks, pos = [], n
    while pos > 0:
        index = int(fronts[pos][flag][2][k])
        at = bisect.bisect_right(bases, index) - 1
        (a, prev_flag), prev_k = owners[at], index - bases[at]
        kind = kinds[flag]
        blocks += [(i, i + 1, "K") for i in range(pos - 1, a - 1, -1)] if kind == "K" else [(a, pos, kind)]
        pos, flag, k = a, prev_flag, prev_k
    return blocks[::-1]

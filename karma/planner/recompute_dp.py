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
from numba import njit

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
        # the same numbers as arrays, for the compiled program (`solve`)
        self.arrays = (
            np.array(self.saved, dtype=float), np.array(self.shared, dtype=float), np.array(self.ws, dtype=float),
            np.array(self.trans, dtype=float), np.asarray(self.gsuf, dtype=float),
            np.array(self.last, dtype=float), np.array(self.inner, dtype=float), self.forward,
            np.array([float(u.input_bytes) for u in units]),
            np.array([float(min(u.saved_input_bytes, u.input_bytes)) for u in units]),
            np.array([float(not u.saved_output_bytes) for u in units]),
            np.array([float(u.output_bytes) for u in units]),
            np.array([float(output_gradient_bytes(units, j)) for j in range(n)]))

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


def solve_reference(chain: Chain, budget: float, swaps: tuple[tuple[int, int], ...] = (),
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


def solve(chain: Chain, budget: float, swaps: tuple[tuple[int, int], ...] = (),
          host_checkpoints: bool = False, copy_rate: float | None = None,
          longest: int | None = None) -> list[tuple[int, int, str]] | None:
    """`solve_reference`'s answer, computed by the compiled program `_solve`: the same candidates in the
    same order, the same IEEE operations, so the same blocks (tests/planner/test_plan_dp.py compares them
    over random chains). The planner and rotor solve it dozens of times per plan; in Python it was most
    of a long chain's planning time."""
    n = chain.n
    if budget <= 0:
        return None
    pinned = np.full(n + 1, -1, dtype=np.int64)
    for a, b in swaps:
        pinned[a] = b
    walls = sorted([a for a, _ in swaps] + [n])
    stops = np.array([walls[bisect.bisect_right(walls, a)] for a in range(n)], dtype=np.int64)
    if longest is not None:
        stops = np.minimum(stops, np.arange(n) + longest)
    ok, found = _solve(*chain.arrays, pinned, stops, float(budget), bool(host_checkpoints),
                       -1.0 if copy_rate is None else float(copy_rate), BUCKETS)
    if not ok:
        return None
    kinds = ("R", "K", "S", "r")
    blocks: list[tuple[int, int, str]] = []
    for a, b, flag in found:
        blocks += [(i, i + 1, "K") for i in range(a, b)] if kinds[flag] == "K" else [(int(a), int(b), kinds[flag])]
    return blocks


def compile_now() -> None:
    """Compile `_solve` now, or load it from numba's cache (seconds once per installation; tests/conftest.py
    calls it before the test workers start, as karma.sim.compiled.compile_now)."""
    one = np.ones(1)
    _solve(one, one, one, one, np.ones(2), one, one, np.ones(2), one, one, one, one, one,
           np.full(2, -1, dtype=np.int64), np.ones(1, dtype=np.int64), 1e9, True, -1.0, BUCKETS)


@njit(cache=True)
def _grow(array, size):
    out = np.empty(max(size, 2 * array.shape[0]), dtype=array.dtype)
    out[: array.shape[0]] = array
    return out


@njit(cache=True)
def _solve(saved, shared, ws, trans, gsuf, last, inner, forward, inp, saved_in, no_saved_out, output, out_grad,
           pinned, stops, budget, host_ckpt, copy_rate, buckets):
    """`solve_reference` on arrays: fronts are stored one after another in entry arrays (retained bytes,
    cost, parent entry, boundary, flag); a pending part (a prefix of an earlier front shifted by bytes and
    seconds) is linked into its target's list in the order `solve_reference` appends it. Returns (found,
    blocks): rows of (start, stop, flag) in order, a kept run as one row."""
    n = saved.shape[0]
    width = budget / buckets
    slots = 4 * (n + 1)
    # entries; entry 0 is the root's parent (boundary -1)
    e_ret, e_cost = np.empty(1024), np.empty(1024)
    e_par, e_pos, e_flag = (np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64),
                            np.empty(1024, dtype=np.int64))
    e_ret[0], e_cost[0], e_par[0], e_pos[0], e_flag[0] = 0.0, 0.0, -1, -1, -1
    ne = 1
    f_start, f_len = np.full(slots, -1, dtype=np.int64), np.zeros(slots, dtype=np.int64)
    # parts: source entries [start, start + count), shifted by (add, time); linked per target slot
    p_start, p_count, p_next = (np.empty(1024, dtype=np.int64), np.empty(1024, dtype=np.int64),
                                np.empty(1024, dtype=np.int64))
    p_add, p_time = np.empty(1024), np.empty(1024)
    head, tail = np.full(slots, -1, dtype=np.int64), np.full(slots, -1, dtype=np.int64)
    p_start[0], p_count[0], p_add[0], p_time[0], p_next[0] = 0, 1, 0.0, 0.0, -1
    head[0] = tail[0] = 0
    npart = 1
    # the moves out of one front: (target boundary, target flag, peak, add, time)
    t_b, t_flag = np.empty(2 * n + 2, dtype=np.int64), np.empty(2 * n + 2, dtype=np.int64)
    t_peak, t_add, t_time = np.empty(2 * n + 2), np.empty(2 * n + 2), np.empty(2 * n + 2)
    for a in range(n + 1):
        for flag in range(4):
            slot = a * 4 + flag
            if head[slot] < 0:
                continue
            total = 0
            part = head[slot]
            while part >= 0:
                total += p_count[part]
                part = p_next[part]
            ret, cost, par = np.empty(total), np.empty(total), np.empty(total, dtype=np.int64)
            k = 0
            part = head[slot]
            while part >= 0:
                for j in range(p_start[part], p_start[part] + p_count[part]):
                    ret[k] = e_ret[j] + p_add[part]
                    cost[k] = e_cost[j] + p_time[part]
                    par[k] = j
                    k += 1
                part = p_next[part]
            if total <= buckets:  # retained ascending, the cheapest first at equal bytes (np.lexsort)
                by_cost = np.argsort(cost, kind="mergesort")
                order = by_cost[np.argsort(ret[by_cost], kind="mergesort")]
            else:  # the cheapest (the first of equal ones) per memory bucket, bucket ascending
                bucket = np.floor(ret / width).astype(np.int64)
                bucket -= bucket.min()
                nb = bucket.max() + 1
                least = np.full(nb, np.inf)
                for i in range(total):
                    if cost[i] < least[bucket[i]]:
                        least[bucket[i]] = cost[i]
                first = np.full(nb, -1, dtype=np.int64)
                for i in range(total):
                    if first[bucket[i]] < 0 and cost[i] == least[bucket[i]]:
                        first[bucket[i]] = i
                order = first[first >= 0]
            if ne + order.shape[0] > e_ret.shape[0]:
                size = ne + order.shape[0]
                e_ret, e_cost, e_par = _grow(e_ret, size), _grow(e_cost, size), _grow(e_par, size)
                e_pos, e_flag = _grow(e_pos, size), _grow(e_flag, size)
            f_start[slot] = ne
            running = np.inf
            for i in order:  # the states no cheaper-and-smaller one beats
                if ne == f_start[slot] or cost[i] < running:
                    e_ret[ne], e_cost[ne], e_par[ne], e_pos[ne], e_flag[ne] = ret[i], cost[i], par[i], a, flag
                    ne += 1
                    running = min(running, cost[i])
            f_len[slot] = ne - f_start[slot]
            if a == n:
                continue
            moves = 0
            if pinned[a] >= 0:
                b = pinned[a]
                cum, peak = 0.0, 0.0
                for j in range(a, b):
                    cum += saved[j] - (shared[j - 1] if j > a else 0.0)
                    peak = max(peak, cum + max(ws[j], trans[j] + gsuf[j]))
                t_b[0], t_flag[0], t_peak[0], t_add[0], t_time[0] = b, 2, peak, 0.0, 0.0
                moves = 1
            else:
                keep = flag == 1
                own = saved[a] - (shared[a - 1] if keep and a else 0.0)
                t_b[0], t_flag[0], t_peak[0], t_add[0], t_time[0] = (a + 1, 1, own + max(ws[a], trans[a] + gsuf[a]),
                                                                     own, 0.0)
                moves = 1
                ckpt = inp[a] - (shared[a - 1] if keep and a else 0.0)
                cum, fwd_peak, rec_peak, bwd_peak, time = 0.0, 0.0, 0.0, 0.0, 0.0
                for j in range(a, stops[a]):
                    own = saved[j] - (saved_in[j] if j == a else shared[j - 1])
                    last_ws = ws[j]
                    if j < n - 1 and no_saved_out[j] != 0.0:  # checkpoint's early stop
                        last_ws = max(last_ws - output[j], 0.0)
                    before = cum
                    cum += own
                    fwd_peak = max(fwd_peak, own + ws[j])
                    bwd_peak = max(bwd_peak, cum + trans[j] + gsuf[j])
                    b = j + 1
                    waiting = out_grad[j] if b < n else 0.0
                    recompute = max(rec_peak, before + own + last_ws) + waiting + gsuf[b]
                    peak = ckpt + max(max(fwd_peak, recompute), bwd_peak)
                    t_b[moves], t_flag[moves], t_peak[moves], t_add[moves], t_time[moves] = (b, 0, peak, ckpt,
                                                                                             time + last[j])
                    moves += 1
                    if host_ckpt and (copy_rate < 0 or ckpt / copy_rate <= forward[b] - forward[a]):
                        t_b[moves], t_flag[moves], t_peak[moves], t_add[moves], t_time[moves] = (b, 3, peak, 0.0,
                                                                                                 time + last[j])
                        moves += 1
                    time += inner[j]
                    rec_peak = max(rec_peak, before + own + ws[j])
                    if ckpt + cum > budget:
                        break
            start, length = f_start[slot], f_len[slot]
            for m in range(moves):  # the prefix of the front that leaves room for the move (retained ascending)
                room = budget - t_peak[m]
                lo, hi = start, start + length
                while lo < hi:
                    mid = (lo + hi) // 2
                    if e_ret[mid] <= room:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo == start:
                    continue
                if npart >= p_start.shape[0]:
                    p_start, p_count = _grow(p_start, npart + 1), _grow(p_count, npart + 1)
                    p_next = _grow(p_next, npart + 1)
                    p_add, p_time = _grow(p_add, npart + 1), _grow(p_time, npart + 1)
                target = t_b[m] * 4 + t_flag[m]
                p_start[npart], p_count[npart], p_add[npart], p_time[npart], p_next[npart] = (start, lo - start,
                                                                                              t_add[m], t_time[m], -1)
                if head[target] < 0:
                    head[target] = npart
                else:
                    p_next[tail[target]] = npart
                tail[target] = npart
                npart += 1
    best, end = np.inf, -1
    for flag in range(4):
        slot = n * 4 + flag
        if f_start[slot] < 0:
            continue
        for e in range(f_start[slot], f_start[slot] + f_len[slot]):
            if e_cost[e] < best:
                best, end = e_cost[e], e
    blocks = np.empty((n, 3), dtype=np.int64)
    if end < 0:
        return False, blocks[:0]
    count, pos, e = 0, n, end
    while pos > 0:
        parent = e_par[e]
        blocks[count, 0], blocks[count, 1], blocks[count, 2] = e_pos[parent], pos, e_flag[e]
        count += 1
        pos, e = e_pos[parent], parent
    return True, blocks[:count][::-1]

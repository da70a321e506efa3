"""Optimal recompute-only checkpointing for chains, after rotor (Herrmann,
Beaumont, Eyraud-Dubois, Hermann, Shilova, "Optimal checkpointing for
heterogeneous chains: how to train deep neural networks with limited memory",
arXiv:1911.13214, 2019), restricted to our plan space.

Rotor's dynamic program (Sec. 4) finds, for a chain with per-stage forward and
backward costs and activation sizes and a memory limit, the recompute schedule
of least time. Its schedules are *nested*: while recomputing a segment it may
store further checkpoints inside it and recompute sub-segments again, so a
stage's forward can run any number of times (Revolve-like).

Our restriction (karma/plan.py has no nested recompute, and the runtime runs
what the Plan says): a plan is a tiling of the units into kept units and
recompute segments; a segment keeps its input (on the device) during the
forward pass and re-runs its forward once, saving everything, right before its
backward. So every unit's forward runs at most twice: rotor's schedules with
at most one level of checkpoints (no checkpoint is written during a
recomputation). Weights stay resident, nothing is swapped. Among those plans
this finds the one of least recompute time whose peak memory fits, which,
with nothing else on the link, is the fastest one.

The dynamic program runs left to right over segment boundaries. State: the
position, whether the block before is kept (a kept neighbour shares its
boundary tensor with the next block, as karma/simulate.py counts it), and the
bytes retained so far for the backward (kept activations and checkpoints).
Every block's peak is that retained total plus a term of the block alone (its
forward, its recompute with the gradients of later units, its backward), the
memory model of karma/simulate.py for this subspace. Memory is discretised
(rotor's discretisation of the memory slots, Sec. 5): per position only the
cheapest state per memory bucket is kept, with its exact bytes, and dominated
states are dropped; vectorised with numpy, ResNet-1001 (335 units) plans in
a few seconds. The plan is then checked with the simulator; if it does not fit
(the memory model of the simulator has moved on), the budget is lowered by the
excess and the program run again. When nothing fits, every unit its own
segment (the most frugal recompute-only plan) is returned.
"""

from __future__ import annotations

import numpy as np

from baselines._choose import Frugal, judge, named
from karma.plan import from_policies
from karma.profile import GradientBytes, backward_transient

#: memory buckets per capacity (rotor's discretisation)
BUCKETS = 500
#: tries with a lowered budget when the simulator finds the plan over capacity
RETRIES = 4


class _Chain:
    """The per-unit terms of karma/simulate.py's memory model for recompute-only, resident plans."""

    def __init__(self, profile):
        units = profile.units
        n = self.n = len(units)
        self.units = units
        self.fwd = np.array([u.forward_time for u in units])
        self.saved = [float(u.saved_bytes) for u in units]
        self.shared = [float(profile.shared_boundary_bytes(i)) for i in range(n)]  # between i and i+1
        self.ws = [float(u.workspace_bytes) for u in units]
        self.trans = [float(backward_transient(units, i)) for i in range(n)]
        grads = [0.0] * n
        made = GradientBytes()
        for i in range(n - 1, -1, -1):
            grads[i] = float(made(units[i]))
        self.gsuf = np.concatenate([np.cumsum(grads[::-1])[::-1], [0.0]])
        self.static = float(sum(u.buffer_bytes + u.param_bytes + u.optimizer_bytes for u in units))

    def keep(self, i: int, prev_keep: bool) -> tuple[float, float]:
        """(peak term, retained bytes) of unit i kept."""
        own = self.saved[i] - (self.shared[i - 1] if prev_keep and i else 0.0)
        return own + max(self.ws[i], self.trans[i] + self.gsuf[i]), own

    def segments(self, a: int, prev_keep: bool, budget: float):
        """(b, peak term, retained bytes, recompute time) of segment [a, b) for growing b, while it can fit."""
        u = self.units
        ckpt = float(u[a].input_bytes) - (self.shared[a - 1] if prev_keep and a else 0.0)
        cum, fwd_peak, rec_peak, bwd_peak, time = 0.0, 0.0, 0.0, 0.0, 0.0
        for j in range(a, self.n):
            own = self.saved[j] - (min(u[j].saved_input_bytes, u[j].input_bytes) if j == a else self.shared[j - 1])
            last_ws = self.ws[j]
            if j < self.n - 1 and not u[j].saved_output_bytes:  # checkpoint's early stop (karma/simulate.py)
                last_ws = max(last_ws - u[j].output_bytes, 0.0)
            before = cum
            cum += own
            time += self.fwd[j]
            fwd_peak = max(fwd_peak, own + self.ws[j])
            bwd_peak = max(bwd_peak, cum + self.trans[j] + self.gsuf[j])
            b = j + 1
            waiting = float(u[j].output_bytes) if b < self.n else 0.0
            recompute = max(rec_peak, before + own + last_ws) + waiting + self.gsuf[b]
            peak = ckpt + max(fwd_peak, recompute, bwd_peak)
            yield b, peak, ckpt, time
            rec_peak = max(rec_peak, before + own + self.ws[j])
            if ckpt + cum > budget:
                return


def _front(parts, width: float):
    """Merge candidate states: the cheapest per memory bucket, then only those no cheaper-and-smaller state beats."""
    retained = np.concatenate([p[0] for p in parts])
    cost = np.concatenate([p[1] for p in parts])
    parent = np.concatenate([p[2] for p in parts])
    bucket = np.floor(retained / width)
    order = np.lexsort((cost, bucket))
    first = np.ones(len(order), bool)
    first[1:] = bucket[order][1:] != bucket[order][:-1]
    order = order[first]
    running = np.minimum.accumulate(cost[order])
    better = np.ones(len(order), bool)
    better[1:] = cost[order][1:] < running[:-1]
    order = order[better]
    return retained[order], cost[order], parent[order]


def solve(profile, budget: float):
    """Labels and segment starts of the cheapest recompute-only plan whose modelled peak fits `budget` bytes
    (device memory less the static bytes), or None."""
    chain = _Chain(profile)
    n = chain.n
    width = max(budget, 1.0) / BUCKETS
    # states[position][flag]: list of candidate (retained, cost, parent) arrays; parent = (a, flag, index, keep)
    pending = [[[], []] for _ in range(n + 1)]
    fronts = [[None, None] for _ in range(n + 1)]
    parents = []
    pending[0][0].append((np.zeros(1), np.zeros(1), np.array([-1])))
    for a in range(n + 1):
        for flag in (0, 1):
            if not pending[a][flag]:
                continue
            retained, cost, parent = fronts[a][flag] = _front(pending[a][flag], width)
            pending[a][flag] = None
            if a == n:
                continue
            base = len(parents)
            parents.extend((a, flag, k) for k in range(len(retained)))
            index = np.arange(base, base + len(retained))
            peak, kept = chain.keep(a, bool(flag))
            ok = retained + peak <= budget
            if ok.any():
                pending[a + 1][1].append((retained[ok] + kept, cost[ok], index[ok]))
            for b, peak, ckpt, time in chain.segments(a, bool(flag), budget):
                ok = retained + peak <= budget
                if ok.any():
                    pending[b][0].append((retained[ok] + ckpt, cost[ok] + time, index[ok]))
    ends = [(f[1].min(), flag, int(f[1].argmin())) for flag, f in enumerate(fronts[n]) if f is not None]
    if not ends:
        return None
    _, flag, k = min(ends)
    labels, starts, pos = [None] * n, [], n
    while pos > 0:
        a, prev_flag, prev_k = parents[fronts[pos][flag][2][k]]
        labels[a:pos] = ["keep" if flag else "recompute"] * (pos - a)
        starts.append(a)
        pos, flag, k = a, prev_flag, prev_k
    return labels, sorted(starts)


def build(profile, labels, starts):
    plan = from_policies(profile.model, profile.batch, labels, segments=starts, strategy="rotor")
    return named(plan, "rotor")


def plan(profile, hw, capacity):
    n = len(profile.units)
    frugal = Frugal()
    fallback = build(profile, ["recompute"] * n, list(range(n)))
    frugal.see(fallback, judge(profile, fallback, hw, capacity))
    budget = capacity - _Chain(profile).static
    for _ in range(RETRIES + 1):
        if budget <= 0:
            break
        found = solve(profile, budget)
        if found is None:
            break
        candidate = build(profile, *found)
        result = judge(profile, candidate, hw, capacity)
        if result.feasible:
            return named(candidate, "rotor", budget_bytes=budget)
        frugal.see(candidate, result)
        budget -= result.peak_bytes - capacity
    return frugal.plan

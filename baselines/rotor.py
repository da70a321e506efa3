"""Optimal recompute-only checkpointing for chains, after rotor (Herrmann,
Beaumont, Eyraud-Dubois, Hermann, Shilova, "Optimal checkpointing for
heterogeneous chains: how to train deep neural networks with limited memory",
arXiv:1911.13214, 2019), restricted to our plan space.

Rotor's dynamic program (Sec. 4) finds, for a chain with per-stage forward and
backward costs and activation sizes and a memory limit, the recompute schedule
of least time. Its schedules are *nested*: while recomputing a segment it may
store further checkpoints inside it and recompute sub-segments again, so a
stage's forward can run any number of times (Revolve-like).

Our restriction (karma/plan/plan.py has no nested recompute, and the runtime runs
what the Plan says): a plan is a tiling of the units into kept units and
recompute segments; a segment keeps its input (on the device) during the
forward pass and re-runs its forward once, saving everything, right before its
backward. So every unit's forward runs at most twice: rotor's schedules with
at most one level of checkpoints (no checkpoint is written during a
recomputation). Weights stay resident, nothing is swapped. Among those plans
this finds the one of least recompute time whose peak memory fits, which,
with nothing else on the link, is the fastest one.

The dynamic program is karma/planner/recompute_dp.py (one implementation, which
KARMA's planner also uses as an exact sub-solver of its search); it runs left
to right over segment boundaries. State: the
position, whether the block before is kept (a kept neighbour shares its
boundary tensor with the next block, as karma/sim/simulate.py counts it), and the
bytes retained so far for the backward (kept activations and checkpoints).
Every block's peak is that retained total plus a term of the block alone (its
forward, its recompute with the gradients of later units, its backward), the
memory model of karma/sim/simulate.py for this subspace. Dominated states are
dropped; where a position has more candidate states than the program's
buckets, memory is discretised (rotor's discretisation of the memory slots,
Sec. 5): only the cheapest state per memory bucket is kept, with its exact
bytes, so the plan is optimal in this space wherever no position has more
than BUCKETS (250) candidates (every chain of the tests), and up to that
discretisation beyond; vectorised with numpy, ResNet-1001 (335 units) plans in
a few seconds. The plan is then checked with the simulator; if it does not fit
(the memory model of the simulator has moved on), the budget is lowered by the
excess and the program run again. When nothing fits, every unit its own
segment (the most frugal recompute-only plan) is returned.
"""

from __future__ import annotations

from baselines._choose import Frugal, judge, named
from karma.plan.plan import from_policies
from karma.planner.recompute_dp import Chain, solve

#: tries with a lowered budget when the simulator finds the plan over capacity
RETRIES = 4


def _static(profile) -> float:
    """Bytes on the device for the whole iteration with resident weights: buffers, weights, optimizer state."""
    return float(sum(u.buffer_bytes + u.param_bytes + u.optimizer_bytes for u in profile.units))


def build(profile, blocks):
    """A plan from the program's blocks: (start, stop, 'K' kept unit or 'R' recompute segment)."""
    labels, starts = [], []
    for a, b, kind in blocks:
        labels += ["keep" if kind == "K" else "recompute"] * (b - a)
        starts.append(a)
    plan = from_policies(profile.model, profile.batch, labels, segments=starts, strategy="rotor")
    return named(plan, "rotor")


def plan(profile, hw, capacity):
    n = len(profile.units)
    frugal = Frugal()
    fallback = build(profile, [(i, i + 1, "R") for i in range(n)])
    frugal.see(fallback, judge(profile, fallback, hw, capacity))
    chain = Chain(profile)
    budget = capacity - _static(profile)
    for _ in range(RETRIES + 1):
        if budget <= 0:
            break
        found = solve(chain, budget)
        if found is None:
            break
        candidate = build(profile, found)
        result = judge(profile, candidate, hw, capacity)
        if result.feasible:
            return named(candidate, "rotor", budget_bytes=budget)
        frugal.see(candidate, result)
        budget -= result.peak_bytes - capacity
    return frugal.plan

"""The processor's speed during a measured repeat, as the performance model sees it.

A runtime table's plans are planned and predicted on a profile measured once, before the runs.
On this shared machine the processor's speed then drifts 10-25% by the time a repeat runs
(docs/machine.md), and it drifts only what the processor does: the units' compute and the optimizer
steps (device and host). The emulated link does not (a copy ends at a deadline set by the link's
bandwidth, karma/runtime/link.py), nor does a real one. So drift moves a plan bound by compute
(recompute, keep) and one bound by the link (vDNN's swaps) apart: a slower processor leaves
recompute plans slower than predicted and vDNN's on time, and so KARMA's measured speedup over vDNN
below its prediction, which a uniform scale of every plan's prediction cannot tell from a model error
(docs/measurements/README.md).

`fit_speed` finds, per repeat, the factor f on compute times (and 1/f on the optimizer rates) at
which the median over the strategies of measured / predicted is 1: the drift, in the model's own
terms. Each strategy's step is then judged against its prediction at that speed
(karma/runtime/emulation.py), and KARMA's predicted speedups are given at it too. The link's
bandwidth is the one rate held fixed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace

from karma.core.hardware import Hardware
from karma.plan.plan import Plan
from karma.profile.profile import Profile
from karma.sim.simulate import simulate

#: The speed factors searched: a repeat 1.6 times slower or faster than its profile is not drift
#: (docs/machine.md: 10-25%; a busy, oversubscribed machine moves steps by half).
SLOWEST, FASTEST = 1.6, 1 / 1.6
#: Bisection steps on the factor (its log): 2^-30 of the range, far below the measurements' spread.
STEPS = 30


def at_speed(profile: Profile, hw: Hardware, factor: float) -> tuple[Profile, Hardware]:
    """`profile` and `hw` with the processor `factor` times slower (below 1: faster): compute times
    times `factor`, the optimizer steps' rates (device and host, both run by the processor) over it."""
    units = tuple(replace(u, forward_time=u.forward_time * factor, backward_time=u.backward_time * factor,
                          recompute_extra_time=u.recompute_extra_time * factor,
                          recompute_inner_extra_time=u.recompute_inner_extra_time * factor,
                          forward_spread=u.forward_spread * factor, backward_spread=u.backward_spread * factor,
                          holdout=tuple(t * factor for t in u.holdout))
                  for u in profile.units)
    return (replace(profile, units=units),
            replace(hw, memory_bw=hw.memory_bw / factor, host_update_bw=hw.host_update_bw / factor))


def predictor(profile: Profile, hw: Hardware, capacity: float, plans: dict[str, Plan]) -> Callable:
    """predict(factor) -> {strategy: simulated seconds at that speed}, memoised per factor."""
    memo: dict[float, dict[str, float]] = {}

    def predict(factor: float) -> dict[str, float]:
        if factor not in memo:
            p, h = at_speed(profile, hw, factor)
            memo[factor] = {name: simulate(p, plan, h, capacity, record=False).makespan
                            for name, plan in plans.items()}
        return memo[factor]

    return predict


def fit_speed(predict: Callable, measured: dict[str, float]) -> float | None:
    """The factor at which the median over the strategies of measured / predicted is 1 (every
    prediction grows with the factor, so the median falls: bisection on its log); None where no
    factor in [FASTEST, SLOWEST] gets there: strategies all bound by the link hardly move with the
    processor (the reach case's one plan that fits, swapping at 100 MB/s, needed 1.3-1.4 for a step
    5% over its prediction), so their drift is not a speed, and the caller falls back to one scale."""
    if not measured:
        return None

    def median_ratio(factor: float) -> float:
        times = predict(factor)
        return statistics.median(measured[name] / times[name] for name in measured)

    lo, hi = FASTEST, SLOWEST
    if median_ratio(hi) >= 1 or median_ratio(lo) <= 1:
        return None
    for _ in range(STEPS):
        mid = (lo * hi) ** 0.5
        if median_ratio(mid) > 1:
            lo = mid
        else:
            hi = mid
    return (lo * hi) ** 0.5

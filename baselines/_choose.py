"""How a baseline picks among its own configurations under a capacity.

Every baseline here is run as its authors would run it (docs/design.md, Fair
comparison): given the capacity, it tries the configurations its published
rule allows and keeps the one its rule prefers among those that fit, judged by
the same simulator that judges KARMA. When none fits it returns its most
frugal configuration (lowest simulated peak), so that tables print OOM with
the simulator's reason instead of a plan the method would never run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from karma.plan.plan import Plan
from karma.sim.simulate import SimResult, simulate


def judge(profile, plan: Plan, hw, capacity: float) -> SimResult:
    """The simulator's verdict on one configuration (no timeline: baselines only need time and peak)."""
    return simulate(profile, plan, hw, capacity, record=False)


def fits(profile, plan: Plan, hw, capacity: float) -> bool:
    return judge(profile, plan, hw, capacity).feasible


class Frugal:
    """Remembers the configuration with the lowest peak, the fallback when nothing fits."""

    def __init__(self):
        self.peak = None
        self.plan = None

    def see(self, plan: Plan, result: SimResult) -> None:
        if self.peak is None or result.peak_bytes < self.peak:
            self.peak, self.plan = result.peak_bytes, plan


def fastest(profile, hw, capacity: float, plans: Iterable[Plan]) -> Plan:
    """The fastest configuration that fits, else the most frugal one."""
    best_time, best = None, None
    frugal = Frugal()
    for plan in plans:
        result = judge(profile, plan, hw, capacity)
        frugal.see(plan, result)
        if result.feasible and (best_time is None or result.time < best_time):
            best_time, best = result.time, plan
    if best is None and frugal.plan is None:
        raise ValueError("a baseline offered no configuration")
    return best if best is not None else frugal.plan


def first_fit(profile, hw, capacity: float, plans: Iterable[Plan]) -> Plan:
    """The first configuration (in the rule's order of preference) that fits, else the most frugal one."""
    frugal = Frugal()
    for plan in plans:
        result = judge(profile, plan, hw, capacity)
        if result.feasible:
            return plan
        frugal.see(plan, result)
    if frugal.plan is None:
        raise ValueError("a baseline offered no configuration")
    return frugal.plan


def named(plan: Plan, strategy: str, **notes) -> Plan:
    """The plan under the strategy's name, with the configuration it chose in its notes."""
    return replace(plan, strategy=strategy, notes={**plan.notes, **notes})

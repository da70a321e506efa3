"""The long search: the reference KARMA's default plan is held to (karma/experiments/planner_gap.py), and who is to
blame for a plan far from the lower bound (the speedup tables' `over_bound_blame`, karma/experiments/speedups.py).
Profile-agnostic: it takes profiles, so the jobs that import it need not import torch."""

from __future__ import annotations

import math
import time
from dataclasses import replace

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.planner.config import PlannerConfig
from karma.planner.planner import plan
from karma.profile.profile import Profile
from karma.sim.simulate import simulate

#: The targets: percent over the long search, plan / bound.
GAP_TARGET = 0.5
BOUND_TARGET = 1.05


def planned(profile: Profile, hw: Hardware, capacity: float | None = None,
            config: PlannerConfig | None = None) -> tuple[float, float]:
    """(simulated iteration time, CPU seconds to plan) of `plan(profile, ..., config=config)`; inf if nothing fits."""
    capacity = hw.device_memory if capacity is None else capacity
    start = time.process_time()
    try:
        result = plan(profile, hw, capacity, config=config)
    except KarmaError:  # no plan fits
        return math.inf, time.process_time() - start
    seconds = time.process_time() - start
    sim = simulate(profile, result, hw, capacity, record=False)
    assert sim.feasible, f"{profile.model}: the planner returned a plan the simulator refuses ({sim.reason})"
    return sim.time, seconds


def long_search(profile: Profile, hw: Hardware, capacity: float | None = None) -> float:
    """Simulated seconds of the faster of two long searches (ten times the budget, coarse to fine and
    unit by unit): the reference the default planner is held to, and what says whether a plan far
    from the bound is the search's fault."""
    long = PlannerConfig().longer(10)
    return min(planned(profile, hw, capacity, long)[0],
               planned(profile, hw, capacity, replace(long, groups=len(profile.units)))[0])


def blame(over_bound: float, long_over_bound: float) -> str:
    """For a plan more than BOUND_TARGET of the bound: the search, if a long search's plan is within
    it, else the bound or the plan space (nothing found near the bound)."""
    if over_bound <= BOUND_TARGET:
        return "-"
    return "search" if long_over_bound <= BOUND_TARGET else "bound or plan space"

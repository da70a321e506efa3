"""One interface for KARMA's planner and every baseline (AlgoPerf style).

A strategy is a function ``(profile, hw, capacity) -> Plan | None`` (None: the
strategy has no plan for this case, e.g. in-core when it does not fit is
still a plan, which the simulator then rejects as OOM). Strategies are found
by name: ``karma`` is KARMA's planner (karma/planner/planner.py); any other name
``x-y`` is the module ``baselines/x_y.py`` and its ``plan`` function. So
adding a baseline is one file in baselines/ plus its name in the config;
``register`` adds one from code (tests, notebooks).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import baselines
from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.plan.plan import Plan
from karma.planner.config import PlannerConfig
from karma.planner.planner import plan as karma_plan
from karma.profile.profile import Profile
from karma.sim.simulate import SimResult, simulate

Strategy = Callable[[Profile, Hardware, float], Plan | None]
_REGISTERED: dict[str, Strategy] = {}


def register(name: str, fn: Strategy) -> None:
    _REGISTERED[name] = fn


def available() -> list[str]:
    found = {m.name.replace("_", "-") for m in pkgutil.iter_modules(baselines.__path__) if not m.name.startswith("_")}
    return sorted({"karma", *found, *_REGISTERED})


def get(name: str) -> Strategy:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name == "karma":
        return karma_plan
    try:
        module = importlib.import_module(f"baselines.{name.replace('-', '_')}")
    except ModuleNotFoundError:
        raise KarmaError(f"unknown strategy '{name}'; valid: {', '.join(available())}") from None
    if not hasattr(module, "plan"):
        raise KarmaError(f"baselines/{name.replace('-', '_')}.py has no plan(profile, hw, capacity) function")
    return module.plan


@dataclass
class Outcome:
    """A strategy's plan and what the simulator says of it."""

    strategy: str
    plan: Plan | None
    result: SimResult | None
    error: str = ""

    @property
    def time(self) -> float | None:
        return self.result.time if self.result else None

    @property
    def status(self) -> str:
        if self.plan is None:
            return "no plan"
        return "ok" if self.result.feasible else "OOM"


def run_strategy(name: str, profile: Profile, hw: Hardware, capacity: float | None = None,
                 config: PlannerConfig | None = None) -> Outcome:
    """Plan with strategy `name` and simulate the plan; the plan records its prediction. `config`: KARMA's
    planner settings (karma only; None: the defaults)."""
    capacity = hw.device_memory if capacity is None else capacity
    if config is not None and name != "karma":
        raise KarmaError(f"planner settings are KARMA's; strategy '{name}' has none")
    plan = karma_plan(profile, hw, capacity, config=config) if config is not None else get(name)(profile, hw, capacity)
    if plan is None:
        return Outcome(name, None, None)
    result = simulate(profile, plan, hw, capacity)
    plan = plan.with_prediction(result.time, result.peak_bytes)
    return Outcome(name, plan, result)

"""`karma run`: train a model from the zoo for a few steps under a plan, here, and check the model.

The plan comes from a strategy (planned on a measured profile of this machine)
or from a plan file. Before anything runs, the simulator checks the plan on
the measured profile: a plan it rejects is refused with its reason, and
nothing is run or written. Every number printed says it was measured on the
emulated device with its link bandwidth.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from karma.core.errors import KarmaError
from karma.plan.plan import Plan
from karma.profile.measured import measured_profile
from karma.runtime import cuda
from karma.runtime.emulation import default_link_bandwidth, emulated_hardware, run_steps
from karma.runtime.execute import StepReport
from karma.runtime.rates import cpu_rates, cuda_rates
from karma.sim.simulate import SimResult, in_core_peak_bytes, simulate
from karma.strategies import get
from models.registry import build


@dataclass
class RunResult:
    plan: Plan
    predicted: SimResult
    memory: StepReport  # the tracked step: every tensor counted (peak)
    reports: list[StepReport]  # the timed steps
    label: str

    @property
    def median_time(self) -> float:
        return statistics.median(r.time for r in self.reports)


def run_plan(model: str, size: str, batch: int | None, *, strategy: str | None = None, plan: Plan | None = None,
             capacity_fraction: float | None = 0.5, capacity_bytes: float | None = None, steps: int = 3,
             link_bw: float | None = None, device: str = "cpu", headroom: float = 0.05,
             precision: str = "fp32", options: dict | None = None) -> RunResult:
    """Plan for the capacity less `headroom` (the memory model's few-percent error must not
    turn a planned fit into an OOM), check the plan with the simulator, run it under the
    full capacity. `precision`: fp32, or mixed precision bf16 / fp16 (autocast, fp32 masters);
    `options`: a model spec's options (models/specs.py)."""
    if device not in ("cpu", "cuda"):
        raise KarmaError(f"device must be cpu or cuda, got {device!r}")
    if steps < 1:
        raise KarmaError(f"steps must be a positive integer, got {steps}")
    gpu = None
    if device == "cuda":
        gpu = cuda.require_cuda()
    chain = build(model, size, batch, seed=1, device=gpu or "cpu", precision=precision, overrides=options)
    profile = measured_profile(build(model, size, batch, seed=1, device=gpu or "cpu", precision=precision,
                                     overrides=options), reps=2, holdout=True)
    if gpu is not None:
        rates = cuda_rates(gpu, chain.optimizer, chain)
    else:
        rates = cpu_rates(link_bw or default_link_bandwidth(profile), chain.optimizer, chain)
    if capacity_bytes is None:
        if not capacity_fraction or capacity_fraction <= 0:
            raise KarmaError("give a positive capacity (fraction of the in-core footprint, or bytes)")
        capacity_bytes = in_core_peak_bytes(profile) * capacity_fraction
    planned = capacity_bytes * (1 - headroom)
    hw = emulated_hardware(profile, rates, planned)
    if gpu is not None:
        hw = replace(hw, name=f"cuda (link {rates.h2d / 1e9:.1f} GB/s measured)")
    if plan is None:
        plan = get(strategy or "karma")(profile, hw, planned)
    elif plan.units != len(chain) or plan.model != model or plan.batch != chain.batch:
        raise KarmaError(f"the plan is for {plan.model} batch {plan.batch} with {plan.units} units; this model is "
                         f"{model} batch {chain.batch} with {len(chain)} units")
    predicted = simulate(profile.held_out(), plan, hw, capacity_bytes)  # not on the times it was chosen on
    if not predicted.feasible:
        raise KarmaError(f"the simulator rejects this plan at {capacity_bytes / 1e6:.1f} MB: {predicted.reason}")
    if gpu is not None:
        cuda.cap_memory(capacity_bytes, gpu)
        memory, reports = cuda.run_cuda_steps(chain, plan, steps, gpu)
        return RunResult(plan, predicted, memory, reports, f"measured on {reports[0].device}")
    memory, reports = run_steps(chain, plan, capacity_bytes, rates.h2d, steps)
    return RunResult(plan, predicted, memory, reports, f"measured on {hw.name}")

"""The emulated device's Hardware and the check of the performance model against the runtime.

DESIGN.md, "Measured versus simulated": the CPU computes two orders of magnitude
slower than a V100, so the emulated link is slowed by the same factor to keep
the paper's regime: link = PCIe bandwidth of the reference x (this CPU's achieved
FLOP rate / the reference's sustained rate), from a measured profile.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from karma.hardware import Hardware, load
from karma.plan import Plan
from karma.profile import Profile
from karma.runtime.execute import StepReport, make_optimizer, train_step
from karma.runtime.ledger import DeviceOOM, Ledger
from karma.runtime.link import EmulatedLink, emulated_label
from karma.runtime.rates import Rates
from karma.runtime.streamed import HostWeights
from karma.simulate import simulate
from karma.strategy import get
from models.chain import ChainModel


def achieved_flops(profile: Profile) -> float:
    work = sum(u.forward_flops + u.backward_flops for u in profile.units)
    return work / (profile.forward_time() + profile.backward_time())


def default_link_bandwidth(profile: Profile, reference: str = "v100-abci") -> float:
    """Bytes/s of the emulated link that keep the reference machine's compute-to-link ratio."""
    ref = load(reference)
    return ref.h2d_bw * achieved_flops(profile) / ref.flops


def emulated_hardware(profile: Profile, rates: Rates, capacity: float) -> Hardware:
    """The machine a run happens on, as the simulator's Hardware: the reference's network and
    kernel-free compute at this profile's achieved rate, with the rates measured here."""
    ref = load("v100-abci")
    name = emulated_label(rates.h2d) if rates.link == "emulated" else "this machine"
    return replace(ref, name=name, device_memory=capacity, flops=achieved_flops(profile), memory_bw=rates.memory_bw,
                   h2d_bw=rates.h2d, d2h_bw=rates.d2h, host_update_bw=rates.host_update, kernel_launch=0.0,
                   description=f"this machine as the device: {rates.describe()}")


def run_steps(chain, plan, capacity: float, link_bw: float, steps: int) -> tuple[StepReport, list[StepReport]]:
    """A memory step (also the warm-up), `steps` timed steps and a second memory step of `chain`
    under `plan` on the emulated device; returns (the memory step with the higher peak, timed steps).

    Memory steps put every tensor they create on the ledger: the peak is the measured peak, and
    they raise DeviceOOM past the capacity. The timed steps run the same computation without that
    per-tensor accounting (a Python dispatch mode, 5-20% of a step on this CPU, which a GPU's
    allocator does not cost); they still account weights and what swapped blocks save.
    """
    reports = []
    optimizer = None
    try:
        with EmulatedLink(link_bw, link_bw) as link:
            # a host optimizer with resident weights sends the updated weights back up over the link
            optimizer = HostWeights(chain, plan, link=link) if plan.host_optimizer else make_optimizer(chain)
            for s in range(steps + 2):
                reports.append(train_step(chain, plan, optimizer, chain.make_batch(seed=s), Ledger(capacity), link,
                                          track=s in (0, steps + 1)))
    finally:
        if isinstance(optimizer, HostWeights):
            optimizer.close()
    return max(reports[0], reports[-1], key=lambda r: r.peak_bytes), reports[1:-1]


@dataclass(frozen=True)
class EmulatedRunner:
    """Runs a plan on the emulated device: this CPU, the ledger as its memory, the emulated link."""

    chain_factory: Callable[[], ChainModel]
    capacity: float
    link_bw: float
    steps: int = 3

    def where(self) -> str:
        return emulated_label(self.link_bw)

    def __call__(self, plan: Plan) -> tuple[StepReport, list[StepReport]]:
        return run_steps(self.chain_factory(), plan, self.capacity, self.link_bw, self.steps)


def validate(profile: Profile, strategies: list[str], capacity: float, rates: Rates, runner,
             headroom: float = 0.05) -> pd.DataFrame:
    """Plan every strategy on the measured profile, simulate it and run it; one row per strategy.

    Plans are made for `capacity` less `headroom` (the memory model's error, a few percent, must
    not turn a planned fit into an OOM), simulated with the machine's `rates`
    (karma/runtime/rates.py) and run under the full `capacity` by `runner(plan)` -> (the memory
    step, the timed steps): an EmulatedRunner here, a karma.runtime.cuda.CudaRunner on a GPU
    (which caps the memory in the process it runs in). Every strategy's run starts from a freshly
    built chain.
    """
    planned = capacity * (1 - headroom)
    hw = replace(emulated_hardware(profile, rates, planned), name=runner.where())
    rows = []
    for name in strategies:
        plan = get(name)(profile, hw, planned)
        sim = simulate(profile, plan, hw, planned)
        row = {"model": profile.model, "batch": profile.batch, "strategy": name, "plan": plan.policies(),
               "predicted_s": sim.time, "predicted_peak_MB": sim.peak_bytes / 1e6,
               "capacity_MB": capacity / 1e6, "measured_s": None, "measured_peak_MB": None,
               "status": "ok" if sim.feasible else "OOM (simulated)",
               "rates": rates.describe(),
               "source": f"measured on {hw.name}; predicted by the simulator on the measured profile and the "
                         f"rates measured on this machine (column rates)"}
        if sim.feasible:
            try:
                memory, timed = runner(plan)
                row.update(measured_s=statistics.median(r.time for r in timed),
                           measured_peak_MB=memory.peak_bytes / 1e6)
            except DeviceOOM as err:
                row["status"] = f"OOM (measured): {err}"
        rows.append(row)
    df = pd.DataFrame(rows)
    df["measured_over_predicted"] = df.measured_s / df.predicted_s
    df["peak_measured_over_predicted"] = df.measured_peak_MB / df.predicted_peak_MB
    karma = df[df.strategy == "karma"]
    if len(karma):
        # ratios from this one run (the machine is noisy across runs, FACTS.md)
        df["karma_speedup_measured"] = df.measured_s / karma.measured_s.iloc[0]
        df["karma_speedup_predicted"] = df.predicted_s / karma.predicted_s.iloc[0]
    return df

"""Replay a runtime table's plan from the profile its run saved (workflow/rules/runtime.smk).

A runtime row's plan is planned on a profile measured in that run, so a plan that ran out of the
emulated device or missed its prediction cannot be re-made from the code alone: the rule keeps the
profile (`<model>.profile.json`) and the table the exact rates and planned capacity. This plans the
strategy again (the planner is deterministic), checks it is the plan the table ran, and runs its
memory steps on the emulated device, printing the peak of each against the prediction.

    python -m karma.runtime.replay results/runtime_reach/resnet50.csv --strategy karma --steps 3
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from karma.core.errors import KarmaError
from karma.plan.plan import Plan
from karma.profile.profile import Profile
from karma.runtime.emulation import emulated_hardware, run_steps
from karma.runtime.ledger import DeviceOOM
from karma.runtime.rates import Rates
from karma.sim.simulate import simulate
from karma.strategies import get
from models import build

LAYER = "-layer"  # the reach case's model suffix: the chain at layer granularity (validate_reach.py)


def row_of(table: pd.DataFrame, strategy: str) -> pd.Series:
    rows = table[table.strategy == strategy]
    if not len(rows):
        raise KarmaError(f"no row for strategy {strategy!r}; the table has {', '.join(table.strategy)}")
    row = rows.iloc[0]
    if "h2d_Bps" not in row or pd.isna(row.h2d_Bps):
        raise KarmaError("the table predates the exact rates (columns h2d_Bps...): rerun its rule")
    return row


def replan(profile: Profile, row: pd.Series) -> tuple[Plan, float, float]:
    """(plan, predicted seconds, predicted peak bytes) of the row's strategy on the run's profile."""
    rates = Rates(row.h2d_Bps, row.d2h_Bps, row.device_optimizer_Bps, row.host_optimizer_Bps, "emulated")
    planned = float(row.planned_capacity_bytes)
    hw = emulated_hardware(profile, rates, planned)
    plan = get(row.strategy)(profile, hw, planned)
    if plan.policies() != row.plan:
        raise KarmaError(f"the replanned {row.strategy} plan differs from the one the table ran:\n"
                         f"  {plan.policies()}\n  {row.plan}")
    sim = simulate(profile.held_out(), plan, hw, float(row.capacity_MB) * 1e6)  # predicted as validate predicts it
    return plan, sim.makespan, sim.peak_bytes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="a runtime table (results/runtime/<model>.csv or results/runtime_reach/...)")
    parser.add_argument("--strategy", default="karma")
    parser.add_argument("--steps", type=int, default=3, help="memory steps to run")
    args = parser.parse_args(argv)
    table = pd.read_csv(args.table)
    row = row_of(table, args.strategy)
    profile = Profile.from_json(Path(args.table).with_suffix(".profile.json"))
    plan, seconds, peak = replan(profile, row)
    print(f"{row.model} {row.strategy}: {plan.policies()}\npredicted {seconds:.3f} s, peak {peak / 1e6:.2f} MB "
          f"of {row.capacity_MB:.2f} MB (simulated on the run's profile and rates)")
    model = row.model.removesuffix(LAYER)
    options = {"granularity": "layer"} if row.model.endswith(LAYER) else {}
    if isinstance(row.get("build"), str):  # what the rule built: an own model's spec, a zoo model's overrides
        built = json.loads(row.build)
        model, options = built["model"], {"overrides": built["overrides"]}
    for step in range(args.steps):
        try:
            memory, _ = run_steps(build(model, profile.size, int(row.batch), seed=1, **options), plan,
                                  row.capacity_MB * 1e6, row.h2d_Bps, 0)
            print(f"step {step}: peak {memory.peak_bytes / 1e6:.2f} MB ({memory.peak_bytes / peak:.3f} of the "
                  f"prediction), waited {memory.memory_wait:.3f} s for copies (measured on {memory.device})")
        except DeviceOOM as err:
            print(f"step {step}: out of memory: {err}")


if __name__ == "__main__":
    main()

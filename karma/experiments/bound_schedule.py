"""What the lower bound's own schedule costs as a plan: whether a plan / bound gap lies in the plan space.

The bound (karma/sim/bound.py) is the optimum of a mixed-integer program that relaxes the simulator: its
copies back may start at any moment and only the memory of its rows is counted. Each weight layout's
solution of that program (`bound.schedules`: its swap, recompute and checkpoint decisions) is made a plan
here, one block per kept or swapped unit and one per recompute segment, and simulated at every prefetch
depth, at the case's capacity and without one. Where the program's value is reached only by plans over
the capacity, the gap between KARMA's plan and the bound lies in what a plan can express (one prefetch
depth counted in blocks, each copy back issued as a block's backward starts, its memory held from then),
not in the search; where a plan of the schedule fits near that value, the search missed it.

    python -m karma.experiments.bound_schedule --cases wrn28-10,resnet50 --out schedules.csv

Cases are karma/experiments/cases.py's; simulated on their hardware (analytic profiles).
planner_cases puts `verdict` of each case over the bound target in its `bound_schedule` column.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import pandas as pd

from karma.core.hardware import Hardware, load
from karma.experiments.cases import CASES
from karma.experiments.planner_gap import write_rows
from karma.plan.plan import Plan
from karma.planner.planner import plan
from karma.profile.profile import Profile
from karma.sim.bound import lower_bound, schedules
from karma.sim.simulate import simulate

#: Prefetch depths each schedule is simulated at (0: on demand).
DEPTHS = range(7)
GB = 1e9

COLUMNS = ["case", "layout", "karma_s", "bound_s", "schedule_s", "depth", "fits", "time_s", "unlimited_time_s",
           "unlimited_peak_GB", "capacity_GB", "source"]


def schedule_rows(name: str, profile: Profile, hw: Hardware, capacity: float, karma_s: float,
                  bound_s: float) -> list[dict]:
    """One row per (layout's schedule, depth) of the case `name`: the schedule's plan simulated at `capacity`
    and without a limit, beside KARMA's plan (`karma_s`) and the bound (`bound_s`)."""
    rows = []
    for schedule in schedules(profile, hw, capacity):
        base = Plan(model=profile.model, batch=profile.batch, units=len(profile.units), blocks=schedule.blocks(),
                    weights=schedule.weights, prefetch_depth=0, optimizer=schedule.optimizer,
                    strategy="bound-schedule")
        for depth in DEPTHS:
            candidate = replace(base, prefetch_depth=depth)
            limited = simulate(profile, candidate, hw, capacity, record=False)
            free = simulate(profile, candidate, hw, float("inf"), record=False)
            rows.append({"case": name, "layout": f"{schedule.weights}, optimizer on the {schedule.optimizer}",
                         "karma_s": karma_s, "bound_s": bound_s, "schedule_s": schedule.value, "depth": depth,
                         "fits": limited.feasible, "time_s": limited.time if limited.feasible else None,
                         "unlimited_time_s": free.time, "unlimited_peak_GB": free.peak_bytes / GB,
                         "capacity_GB": capacity / GB,
                         "source": f"simulated on {hw.name} (analytic profile); the schedule: HiGHS's incumbent"})
    return rows


def summary(rows: list[dict]) -> pd.DataFrame:
    """Per case: KARMA's plan and the fastest plan of the bound's schedules that fits, over the bound, and
    the least memory a plan of them needs to run within 1% of its schedule's value (GB; the capacity beside)."""
    frame = pd.DataFrame(rows, columns=COLUMNS)
    out = []
    for case, at in frame.groupby("case", sort=False):
        bound, fits = at.bound_s.iloc[0], at[at.fits]
        near = at[at.unlimited_time_s <= at.schedule_s * 1.01]
        out.append({"case": case, "karma_over_bound": at.karma_s.iloc[0] / bound,
                    "schedule_fitting_over_bound": fits.time_s.min() / bound if len(fits) else None,
                    "schedule_at_its_value_GB": near.unlimited_peak_GB.min() if len(near) else None,
                    "capacity_GB": at.capacity_GB.iloc[0]})
    return pd.DataFrame(out)


def verdict(rows: list[dict]) -> str:
    """`summary` of one case's rows in words (planner_cases' `bound_schedule` column)."""
    if not rows:
        return "the program has no schedule"
    line = summary(rows).iloc[0]
    fits = (f"its plans fit at {line.schedule_fitting_over_bound:.3f}x the bound at best"
            if pd.notna(line.schedule_fitting_over_bound) else "no plan of it fits at any depth")
    value = (f"they reach its value with {line.schedule_at_its_value_GB:.1f} GB of {line.capacity_GB:.0f}"
             if pd.notna(line.schedule_at_its_value_GB) else "none comes within 1% of its value")
    return f"{fits}; {value}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True, help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--out", help="also write the rows as CSV here")
    args = parser.parse_args(argv)
    names = args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        raise SystemExit(f"unknown case '{unknown[0]}'; valid: {', '.join(CASES)}")
    rows = []
    for name in names:
        print(f"{name}: planning, bounding and simulating the bound's schedules", flush=True)
        case = CASES[name]
        hw = load(case.hardware)
        profile, capacity = case.profile(hw), case.capacity_gb * GB
        karma = simulate(profile, plan(profile, hw, capacity), hw, capacity, record=False).time
        rows += schedule_rows(name, profile, hw, capacity, karma, lower_bound(profile, hw, capacity))
    print(pd.DataFrame(rows, columns=COLUMNS).drop(columns=["source"]).to_markdown(index=False, floatfmt=".4g"))
    print(summary(rows).to_markdown(index=False, floatfmt=".4g"))
    if args.out:
        write_rows(args.out, rows, COLUMNS)


if __name__ == "__main__":
    main()

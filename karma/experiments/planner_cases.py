"""How good KARMA's planner is beyond the six models it was developed on (docs/planner.md, *How good it is*).

Per case (karma/experiments/cases.py: the six paper models, the tuning set, and held-out cases no setting was
chosen on): KARMA's simulated time, the deterministic lower bound (karma/sim/bound.py), plan / bound, the
fastest baseline's simulated time and KARMA over it, and the planner's CPU seconds.

Targets (issue 36): plan / bound at most `BOUND_TARGET` on every case, KARMA never slower than a baseline,
at most 1 CPU s per paper model (10 s on ResNet-1001's layer chain). A case over the bound target is
checked twice for who is to blame. It is planned again with every budget ten times as large, coarse to
fine and unit by unit (`karma.experiments.planner_gap.long_search`): a search that converges. And every
plan that differs from KARMA's in one window of `WINDOW` units is simulated
(karma/experiments/window_check.py): an exact check. The plan is to blame where either finds a faster
plan (by how much, and where); what neither closes is the bound's, or needs a change to more than
`WINDOW` units at once; the `bound_schedule` column says what that rest is made of: the bound program's own
solution made plans (karma/experiments/bound_schedule.py), whether they fit and at what memory they reach the
program's value. The cases are karma/experiments/cases.py's. A report, not a test: tests never judge
wall-clock time.

    python -m karma.experiments.planner_cases [--cases NAME,...] [--out cases.csv]
"""

from __future__ import annotations

import argparse
import time

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware, load
from karma.experiments.bound_schedule import schedule_rows, verdict
from karma.experiments.cases import CASES, RESNET1001_LAYERS, Case
from karma.experiments.long_search import long_search
from karma.experiments.planner_gap import write_rows
from karma.experiments.window_check import WindowCheck, check
from karma.plan.plan import Plan
from karma.planner.planner import plan
from karma.profile.profile import Profile
from karma.sim.bound import lower_bound
from karma.sim.simulate import simulate
from karma.strategies import available, get

BOUND_TARGET = 1.03
#: Units of the window check's windows (4 * 5^5 plans per window at 6).
WINDOW = 6
GB = 1e9


COLUMNS = ["case", "held_out", "model", "batch", "precision", "capacity_GB", "units", "karma_s", "bound_s",
           "plan_over_bound", "long_search_over_bound", "window_best_over_bound", "blame", "bound_schedule",
           "fastest_baseline",
           "baseline_s", "karma_over_baseline", "planning_cpu_s", "on_target", "source"]



def _baselines(profile: Profile, hw: Hardware, capacity: float) -> tuple[str, float]:
    """The fastest baseline that fits: (name, simulated s); ('', inf) if none does."""
    best = ("", float("inf"))
    for name in available():
        if name == "karma":
            continue
        try:
            p = get(name)(profile, hw, capacity)
        except KarmaError:
            continue
        if p is None:
            continue
        result = simulate(profile, p, hw, capacity, record=False)
        if result.feasible and result.time < best[1]:
            best = (name, result.time)
    return best


def run_case(case: Case, planner=plan) -> dict:
    """One row: KARMA's plan (by `planner`) against the bound and the fastest baseline."""
    hw = load(case.hardware)
    capacity = case.capacity_gb * GB
    profile = case.profile(hw)
    start = time.process_time()
    try:
        found: Plan | None = planner(profile, hw, capacity)
    except KarmaError:
        found = None
    seconds = time.process_time() - start
    karma = simulate(profile, found, hw, capacity, record=False).time if found else float("inf")
    bound = lower_bound(profile, hw, capacity)
    baseline, baseline_s = _baselines(profile, hw, capacity)
    over = karma / bound
    long_over = window_over = blamed = scheduled = ""
    if over > BOUND_TARGET and found is not None:
        long_s = long_search(profile, hw, capacity)
        window = check(profile, hw, capacity, found, WINDOW)
        long_over, window_over = f"{long_s / bound:.4f}", f"{window.best_s / bound:.4f}"
        blamed = blame(karma, bound, long_s, window)
        scheduled = verdict(schedule_rows(case.name, profile, hw, capacity, karma, bound))
    return {
        "case": case.name, "held_out": case.held_out, "model": case.model, "batch": profile.batch,
        "precision": case.precision, "capacity_GB": case.capacity_gb, "units": len(profile.units),
        "karma_s": f"{karma:.5f}", "bound_s": f"{bound:.5f}", "plan_over_bound": f"{over:.4f}",
        "long_search_over_bound": long_over, "window_best_over_bound": window_over, "blame": blamed,
        "bound_schedule": scheduled,
        "fastest_baseline": baseline, "baseline_s": f"{baseline_s:.5f}",
        "karma_over_baseline": f"{karma / baseline_s:.4f}" if baseline else "",
        "planning_cpu_s": f"{seconds:.2f}",
        "on_target": "yes" if over <= BOUND_TARGET and (not baseline or karma <= baseline_s * (1 + 1e-9)) else "no",
        "source": f"simulated on {hw.name} (analytic profile); planning CPU s measured on this machine",
    }


def blame(karma: float, bound: float, long_s: float, window: WindowCheck) -> str:
    """Who is to blame for plan / bound over the target: the plan, by what the long search or the window
    check (karma/experiments/window_check.py) found faster; the bound (or a wider change) for the rest."""
    best = min(long_s, window.best_s)
    parts = []
    if best < karma * (1 - 1e-9):
        if window.best_s > long_s:
            how = "a ten-times-longer search"
        elif window.window:
            how = f"units {window.window[0]}-{window.window[1] - 1} changed"
        else:
            how = "another depth or layout"
        parts.append(f"plan, {karma / best - 1:.1%} ({how})")
    if best / bound > BOUND_TARGET:
        parts.append(f"bound or a change wider than {window.width} units, {best / bound - 1:.1%}")
    return "; ".join(parts)


def markdown(rows: list[dict]) -> str:
    head = ("| case | held out | units | KARMA, s | bound, s | plan / bound | long search / bound | "
            "best in a window / bound | blame | the bound's schedule as plans | fastest baseline | KARMA / it | "
            "planning, CPU s | on target |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        lines.append(f"| {r['case']} | {'yes' if r['held_out'] else 'no'} | {r['units']} | {r['karma_s']} | "
                     f"{r['bound_s']} | {r['plan_over_bound']} | {r['long_search_over_bound'] or '-'} | "
                     f"{r['window_best_over_bound'] or '-'} | "
                     f"{r['blame'] or '-'} | {r['bound_schedule'] or '-'} | {r['fastest_baseline'] or '-'} | "
                     f"{r['karma_over_baseline'] or '-'} | "
                     f"{r['planning_cpu_s']} | {r['on_target']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help=f"comma-separated, of: {', '.join(CASES)}, {RESNET1001_LAYERS.name}")
    parser.add_argument("--out", help="also write the rows as CSV here")
    args = parser.parse_args(argv)
    known = {**CASES, RESNET1001_LAYERS.name: RESNET1001_LAYERS}
    names = args.cases.split(",") if args.cases else list(CASES)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown case '{unknown[0]}'; valid: {', '.join(known)}")
    print(f"simulated (analytic profiles); planning in CPU s of this machine; target plan / bound <= {BOUND_TARGET}")
    rows = []
    for name in names:
        rows.append(run_case(known[name]))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print(markdown(rows))
    if args.out:
        write_rows(args.out, rows, COLUMNS)


if __name__ == "__main__":
    main()

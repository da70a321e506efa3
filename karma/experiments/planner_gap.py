"""How far the default planner is from a long search and from the lower bound, and how long it plans
(docs/planner.md, *How good it is*).

Per model: the simulated time of the default plan (`karma.planner.planner.plan`) for each seed, its planning
time (CPU seconds of this process, which other work on the machine disturbs less than wall-clock
time), the reference (the faster of two long searches: ten times the budget coarse to fine, and ten
times the budget unit by unit) and the sound lower bound (karma/sim/bound.py). The targets are a gap under
0.5% for every seed, in under 5 s each, and a plan within 1.05 of the bound. Where the best plan
found (default or long) is itself more than 1.05 of the bound, the long searches found nothing near
the bound: the `blame` column says so ("bound or plan space"); where the default misses the best
found, or a seed's plan is over 1.05 of the bound where the best found is not, the search is to
blame ("search"). A report, not a test: tests never judge wall-clock time.

    python -m karma.experiments.planner_gap [--models resnet200,megatron-1.2b] [--seeds 0,1,2,3,4,5] [--no-long]
                                [--out gap.csv]
"""

from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import dataclass

from karma.core.hardware import Hardware, load
from karma.experiments.long_search import BOUND_TARGET, GAP_TARGET, blame, long_search, planned
from karma.planner.config import PlannerConfig
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from karma.sim.bound import lower_bound
from models import build
from models.registry import PAPER_SIX


@dataclass
class Gap:
    """One model's default plans against the reference long search and the lower bound."""

    model: str
    times: list[float]
    seconds: list[float]
    reference: float | None
    bound: float | None = None

    def gaps(self) -> list[float]:
        """Per seed, percent slower than the reference (negative: faster)."""
        return [] if self.reference is None else [100 * (t / self.reference - 1) for t in self.times]

    def best(self) -> float:
        """The fastest plan found, by any seed or the long searches."""
        return min(self.times + ([self.reference] if self.reference is not None else []))

    def blame(self) -> str:
        """What keeps the default plans from the targets: the search (a seed misses the best plan found
        by more than the target, or is more than BOUND_TARGET of the bound where the best found is
        not), the bound or the plan space (even the best plan found is more than BOUND_TARGET of the
        bound), both, or nothing."""
        out = []
        if self.reference is not None and max(self.gaps()) > GAP_TARGET:
            out.append("search")
        if self.bound:
            worst = blame(max(self.times) / self.bound, self.best() / self.bound)
            if worst != "-" and worst not in out:
                out.append(worst)
        return " + ".join(out) or "-"


def measure(profile: Profile, hw: Hardware, seeds: list[int], long: bool = True, bound: bool = False) -> Gap:
    runs = [planned(profile, hw, config=PlannerConfig(seed=s)) for s in seeds]
    reference = long_search(profile, hw) if long else None
    return Gap(profile.model, [t for t, _ in runs], [s for _, s in runs], reference,
               lower_bound(profile, hw, hw.device_memory) if bound else None)


COLUMNS = ["model", "seeds", "time_s_per_seed", "long_search_s", "gap_pct_per_seed", "gap_pct_max",
           "seeds_within_target", "planning_cpu_s_median", "planning_cpu_s_min", "planning_cpu_s_max",
           "bound_s", "default_over_bound_max", "best_over_bound", "blame", "source"]


def record(gap: Gap, seeds: list[int], hw: Hardware) -> dict:
    """One row of the CSV (times in seconds, simulated on `hw`; planning in CPU seconds of this machine)."""
    gaps = gap.gaps()

    def fmt(values, digits=5):
        return " ".join(f"{v:.{digits}f}" for v in values)

    return {
        "model": gap.model, "seeds": " ".join(map(str, seeds)), "time_s_per_seed": fmt(gap.times),
        "long_search_s": "" if gap.reference is None else f"{gap.reference:.5f}",
        "gap_pct_per_seed": fmt(gaps, 2), "gap_pct_max": f"{max(gaps):.2f}" if gaps else "",
        "seeds_within_target": f"{sum(g <= GAP_TARGET for g in gaps)}/{len(gaps)}" if gaps else "",
        "planning_cpu_s_median": f"{statistics.median(gap.seconds):.1f}",
        "planning_cpu_s_min": f"{min(gap.seconds):.1f}", "planning_cpu_s_max": f"{max(gap.seconds):.1f}",
        "bound_s": "" if gap.bound is None else f"{gap.bound:.5f}",
        "default_over_bound_max": "" if not gap.bound else f"{max(gap.times) / gap.bound:.4f}",
        "best_over_bound": "" if not gap.bound else f"{gap.best() / gap.bound:.4f}",
        "blame": gap.blame(),
        "source": f"simulated on {hw.name}; planning CPU s measured on this machine",
    }


def row(gap: Gap) -> str:
    times = " ".join(f"{t:.5f}" for t in gap.times)
    ref = "-" if gap.reference is None else f"{gap.reference:.5f}"
    gaps = " ".join(f"{g:+.2f}" for g in gap.gaps()) or "-"
    secs = " ".join(f"{s:.1f}" for s in gap.seconds)
    bound = "-" if not gap.bound else f"{gap.best() / gap.bound:.3f}"
    return f"| {gap.model} | {times} | {ref} | {gaps} | {secs} | {bound} | {gap.blame()} |"


def write_rows(path: str, rows: list[dict], columns: list[str]) -> None:
    """`rows` as a CSV file with a header of `columns` (the experiments' --out)."""
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(PAPER_SIX))
    parser.add_argument("--seeds", default="0,1,2,3,4,5")
    parser.add_argument("--hardware", default="v100-abci")
    parser.add_argument("--no-long", action="store_true", help="skip the reference long searches")
    parser.add_argument("--out", help="also write the rows as CSV here")
    args = parser.parse_args(argv)
    hw = load(args.hardware)
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"simulated on {hw.name}; planning in CPU s of this machine; targets: gap <= {GAP_TARGET}% per seed, "
          f"plan / bound <= {BOUND_TARGET}")
    print("| model | default time, s (per seed) | long search, s | gap, % | planning, CPU s | best / bound | blame |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name in args.models.split(","):
        profile = analytic_profile(build(name, "paper", device="meta"), hw)
        gap = measure(profile, hw, seeds, long=not args.no_long, bound=True)
        rows.append(record(gap, seeds, hw))
        print(row(gap), flush=True)
    if args.out:
        write_rows(args.out, rows, COLUMNS)


if __name__ == "__main__":
    main()

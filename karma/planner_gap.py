"""How far the default planner is from a long search, and how long it plans (issue 12).

Per model: the simulated time of the default plan (`karma.planner.plan`) for
each seed, its planning time (CPU seconds of this process, which other work
on the machine disturbs less than wall-clock time), and the reference: the
faster of two long searches, ten times the budget coarse to fine and ten times
the budget unit by unit. The target is a gap under 0.5% for every seed, in
under 5 s each. A report, not a test: tests never judge wall-clock time.

    python -m karma.planner_gap [--models resnet200,megatron-1.2b] [--seeds 0,1,2] [--no-long]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from karma.hardware import Hardware, load
from karma.planner import plan
from karma.profile import Profile
from karma.simulate import simulate


@dataclass
class Gap:
    """One model's default plans against the reference long search."""

    model: str
    times: list[float]
    seconds: list[float]
    reference: float | None

    def gaps(self) -> list[float]:
        """Per seed, percent slower than the reference (negative: faster)."""
        return [] if self.reference is None else [100 * (t / self.reference - 1) for t in self.times]


def planned(profile: Profile, hw: Hardware, **options) -> tuple[float, float]:
    """(simulated iteration time, CPU seconds to plan) of `plan(profile, ...)`."""
    start = time.process_time()
    result = plan(profile, hw, hw.device_memory, **options)
    seconds = time.process_time() - start
    sim = simulate(profile, result, hw, hw.device_memory, record=False)
    assert sim.feasible, f"{profile.model}: the planner returned a plan the simulator refuses ({sim.reason})"
    return sim.time, seconds


def measure(profile: Profile, hw: Hardware, seeds: list[int], long: bool = True) -> Gap:
    runs = [planned(profile, hw, seed=s) for s in seeds]
    reference = None
    if long:
        reference = min(planned(profile, hw, work=10)[0],
                        planned(profile, hw, groups=len(profile.units), work=10)[0])
    return Gap(profile.model, [t for t, _ in runs], [s for _, s in runs], reference)


def row(gap: Gap) -> str:
    times = " ".join(f"{t:.5f}" for t in gap.times)
    ref = "-" if gap.reference is None else f"{gap.reference:.5f}"
    gaps = " ".join(f"{g:+.2f}" for g in gap.gaps()) or "-"
    secs = " ".join(f"{s:.1f}" for s in gap.seconds)
    return f"| {gap.model} | {times} | {ref} | {gaps} | {secs} |"


def main(argv: list[str] | None = None) -> None:
    from karma.profile_analytic import analytic_profile
    from models import build
    from models.registry import PAPER_SIX

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(PAPER_SIX))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--hardware", default="v100-abci")
    parser.add_argument("--no-long", action="store_true", help="skip the reference long searches")
    args = parser.parse_args(argv)
    hw = load(args.hardware)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| model | default time, s (per seed) | long search, s | gap, % | planning, CPU s |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        profile = analytic_profile(build(name, "paper", device="meta"), hw)
        print(row(measure(profile, hw, seeds, long=not args.no_long)), flush=True)


if __name__ == "__main__":
    main()

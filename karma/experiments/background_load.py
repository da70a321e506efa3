"""Does a job at the lowest CPU priority on the other core move the emulated device's step times?

The pipeline runs a measured job (compute on one torch thread, the emulated link's copies on the other core)
beside simulated jobs at `nice 19` (workflow/scripts/_log.py). This check runs four plans of one small model
on the emulated device in sessions kept open, and times their steps alone and with a planner loop at
`nice 19` beside them, interleaved: pairs of conditions in alternating order, one step per plan each.

    python -m karma.experiments.background_load resnet50 --batch 64 [--pairs 4]

Prints, per plan, the median step (s) and range in each condition and their ratio (measured, emulated device).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import torch

from karma.profile.measured import measured_profile
from karma.runtime.emulation import EmulatedRunner, emulated_hardware
from karma.runtime.rates import cpu_rates
from karma.sim.simulate import in_core_peak_bytes
from karma.strategies import get
from models import build

STRATEGIES = ("checkpoint", "superneurons", "zero-offload", "karma")
#: The background job: KARMA's planner on ResNet-200, over and over, at the lowest priority.
LOAD = ("from karma.core.hardware import load\n"
        "from karma.experiments.cases import CASES\n"
        "from karma.planner.planner import plan\n"
        "hw = load('v100-abci')\n"
        "profile = CASES['resnet200'].profile(hw)\n"
        "while True:\n"
        "    plan(profile, hw, 16e9)\n")


def step_times(model: str, batch: int, pairs: int, link: float = 100e6, fraction: float = 0.6,
               headroom: float = 0.05, settle_s: float = 4.0) -> dict[tuple[str, str], list[float]]:
    """{(strategy, 'alone' or 'loaded'): step seconds, one per pair}. The plans are made as the pipeline's
    (karma.runtime.emulation.validate): for the capacity less `headroom`, run under the full capacity."""
    torch.set_num_threads(1)
    chain = build(model, "small", batch, device="cpu")
    profile = measured_profile(chain, reps=3)
    capacity = in_core_peak_bytes(profile) * fraction
    rates = cpu_rates(link, profile.optimizer, chain)
    runner = EmulatedRunner(lambda: build(model, "small", batch, seed=1), capacity, link, 1)
    planned = capacity * (1 - headroom)
    hw = replace(emulated_hardware(profile, rates, planned), name=runner.where())
    sessions = {name: runner.open(get(name)(profile, hw, planned)) for name in STRATEGIES}
    times: dict[tuple[str, str], list[float]] = {(n, c): [] for n in STRATEGIES for c in ("alone", "loaded")}
    try:
        for session in sessions.values():
            session.step(track=True)  # the warm-up
        for pair in range(pairs):
            for condition in ("alone", "loaded") if pair % 2 == 0 else ("loaded", "alone"):
                load = None
                if condition == "loaded":
                    load = subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", LOAD])
                    time.sleep(settle_s)  # past its imports and compilation
                try:
                    for name, session in sessions.items():
                        times[name, condition].append(session.step(track=False).time)
                finally:
                    if load is not None:
                        load.kill()
                        load.wait()
    finally:
        for session in sessions.values():
            session.close()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a zoo model (its small preset)")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--pairs", type=int, default=4, help="pairs of conditions (default 4)")
    args = parser.parse_args(argv)
    times = step_times(args.model, args.batch, args.pairs)
    print(f"{args.model} small batch {args.batch}, emulated device (measured): step s, median (range)")
    for name in STRATEGIES:
        alone, loaded = times[name, "alone"], times[name, "loaded"]
        print(f"{name:14s} alone {statistics.median(alone):.3f} ({min(alone):.3f}-{max(alone):.3f})  "
              f"beside nice 19 {statistics.median(loaded):.3f} ({min(loaded):.3f}-{max(loaded):.3f})  "
              f"ratio {statistics.median(loaded) / statistics.median(alone):.3f}")


if __name__ == "__main__":
    main()

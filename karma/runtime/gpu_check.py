"""The GPU check of the runtime: one command, a few minutes, measured vs predicted on a real GPU.

    python -m karma.runtime.gpu_check            # V100-like: the allocator capped at 16 GB

For each model (default: ResNet-50 and WRN-28-10 at paper size, whose in-core footprint is
2-3x 16 GB) it measures the profile on this GPU and the machine's rates (pinned copies each way,
device memory bandwidth, the host optimizer: karma/runtime/rates.py), plans every strategy for
the capped memory (less 5% headroom), simulates each plan and runs it for real with the CUDA path
(copy streams, pinned buffers, events; karma/runtime/cuda.py), each run in a process of its own:
step time and allocator peak, measured vs predicted, and KARMA's speedup over each baseline from
the same run. Writes the table as CSV if asked.
Without a GPU it exits with one line. Not part of CI (no GPU there).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from karma.core.errors import KarmaError
from karma.profile.measured import measured_profile
from karma.runtime import cuda
from karma.runtime.emulation import validate
from karma.runtime.rates import cuda_rates
from models.registry import build

STRATEGIES = ["checkpoint", "superneurons", "vdnn", "karma"]
SHOWN = ["model", "strategy", "plan", "predicted_s", "measured_s", "measured_over_predicted", "predicted_peak_MB",
         "measured_peak_MB", "peak_measured_over_predicted", "karma_speedup_measured", "karma_speedup_predicted",
         "status"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m karma.runtime.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["resnet50", "wrn28-10"])
    p.add_argument("--size", default="paper")
    p.add_argument("--capacity-gb", type=float, default=16.0, help="cap of the caching allocator (default 16)")
    p.add_argument("--strategies", nargs="+", default=STRATEGIES)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--out", help="write the table here (CSV)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1 (a warm-up step runs before them)")
    start = time.perf_counter()
    try:
        device = cuda.require_cuda()
        capacity = args.capacity_gb * 1e9
        if capacity > torch.cuda.get_device_properties(device).total_memory:
            raise KarmaError(f"--capacity-gb {args.capacity_gb} exceeds this GPU's memory")
        print(f"{torch.cuda.get_device_name(device)}: each run in a process of its own, its allocator capped at "
              f"{args.capacity_gb:.1f} GB", flush=True)
        tables = []
        for model in args.models:
            # Profile one unit at a time without the cap (a profile is not the run); the runs are capped.
            try:
                profile = measured_profile(build(model, args.size, seed=1, device=device), reps=2, holdout=True)
            except torch.cuda.OutOfMemoryError:
                print(f"{model}: a unit does not fit the whole GPU to be profiled; skipped", flush=True)
                continue
            finally:
                gc.collect()
                torch.cuda.empty_cache()
            print(f"{model}: profiled ({time.perf_counter() - start:.0f} s)", flush=True)
            rates = cuda_rates(device, profile.optimizer, build(model, args.size, device="meta"))  # uncapped
            print(f"{model}: {rates.describe()}", flush=True)
            runner = cuda.CudaRunner(model, args.size, None, capacity, args.steps)
            table = validate(profile, args.strategies, capacity, rates, runner)
            print(table[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
            print(f"{model}: ran {len(args.strategies)} strategies ({time.perf_counter() - start:.0f} s)", flush=True)
            tables.append(table)
            gc.collect()
            torch.cuda.empty_cache()
    except KarmaError as err:
        print(f"gpu_check: error: {err}", file=sys.stderr)
        return 2
    if not tables:
        return 1
    table = pd.concat(tables, ignore_index=True)
    print(f"[{table.source.iloc[0]}] in {time.perf_counter() - start:.0f} s")
    if args.out:
        table.to_csv(Path(args.out), index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Snakemake script: the reach case run for real (docs/reach.md). A small-preset batch on a capacity below what
any plan of its residual-block units needs (one block's backward alone does not fit), trained at layer
granularity on the emulated device, measured against predicted like the other runtime rows."""

import sys
from pathlib import Path

from karma.sim.simulate import in_core_peak_bytes

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
import torch  # noqa: E402
from _log import logged  # noqa: E402

from karma.profile.measured import measured_profile  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402
from karma.runtime.emulation import EmulatedRunner, validate  # noqa: E402
from karma.runtime.rates import cpu_rates  # noqa: E402
from models import build  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    torch.set_num_threads(1)  # compute on one core, the link's workers on the other (docs/machine.md)
    model, batch, below = sm.wildcards.model, sm.params.batch, sm.params.below
    blocks = measured_profile(build(model, "small", batch), reps=3)
    floor = blocks.unit_floor_bytes()
    capacity = floor * below
    chain = build(model, "small", batch, granularity="layer")
    profile = measured_profile(chain, reps=3, holdout=True)
    rates = cpu_rates(sm.params.link_mbs * 1e6, profile.optimizer, chain)
    print(f"{model} small batch {batch}: no plan of its {len(blocks.units)} block units fits under "
          f"{floor / 1e6:.1f} MB (one block's backward alone); capacity {capacity / 1e6:.1f} MB ({below} of it), "
          f"{len(profile.units)} layer units; in-core {in_core_peak_bytes(blocks) / 1e6:.1f} MB; {rates.describe()}")
    runner = EmulatedRunner(lambda: build(model, "small", batch, seed=1, granularity="layer"), capacity,
                            sm.params.link_mbs * 1e6, sm.params.steps)
    profile.to_json(sm.output.profile)  # to replay its plans (karma/runtime/replay.py); before the runs
    table = validate(profile, list(sm.params.strategies), capacity, rates, runner, repeats=sm.params.repeats)
    table["model"] = f"{model}-layer"
    table.to_csv(sm.output.csv, index=False)
    print(to_markdown(table.drop(columns=["source"])))

"""Snakemake script: measured profile, then every strategy simulated and run on the emulated device."""

import json
import sys
from pathlib import Path

from karma.sim.simulate import in_core_peak_bytes

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
import torch  # noqa: E402
from _log import logged  # noqa: E402

from karma.profile.measured import measured_profile  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402
from karma.runtime import cuda  # noqa: E402
from karma.runtime.emulation import EmulatedRunner, default_link_bandwidth, validate  # noqa: E402
from karma.runtime.rates import cpu_rates, cuda_rates  # noqa: E402
from models import build  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    torch.set_num_threads(1)  # compute on one core, the link's workers on the other (docs/machine.md)
    model, batch = sm.wildcards.model, sm.params.batch or None
    target, overrides = sm.params.build["model"], sm.params.build["overrides"] or None
    device = sm.params.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    where = "cpu"
    if device == "cuda":
        where = cuda.require_cuda()
    chain = build(target, "small", batch, device=where, overrides=overrides)
    profile = measured_profile(chain, reps=3, holdout=True)
    capacity = in_core_peak_bytes(profile) * sm.params.fraction
    if device == "cuda":
        rates = cuda_rates(where, profile.optimizer, chain)
        runner = cuda.CudaRunner(target, "small", batch, capacity, sm.params.steps, overrides)
    else:
        link = sm.params.link_mbs * 1e6 if sm.params.link_mbs else default_link_bandwidth(profile)
        rates = cpu_rates(link, profile.optimizer, chain)
        runner = EmulatedRunner(lambda: build(target, "small", batch, seed=1, overrides=overrides), capacity, link,
                                sm.params.steps)
    print(f"{model} small batch {profile.batch}: {rates.describe()}; capacity {capacity / 1e6:.1f} MB "
          f"({sm.params.fraction} of the in-core {in_core_peak_bytes(profile) / 1e6:.1f} MB)")
    profile.to_json(sm.output.profile)  # to replay its plans (karma/runtime/replay.py); before the runs
    table = validate(profile, list(sm.params.strategies), capacity, rates, runner, repeats=sm.params.repeats)
    table["model"] = model  # an own model's name, not its spec
    table["build"] = json.dumps(sm.params.build)  # what was built (karma/runtime/replay.py builds it again)
    table.to_csv(sm.output.csv, index=False)
    print(to_markdown(table.drop(columns=["source"])))

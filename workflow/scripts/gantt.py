"""Snakemake script: the simulated timeline of one model under every strategy."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.plan.plan import Plan  # noqa: E402
from karma.profile.profile import Profile  # noqa: E402
from karma.report.figures import gantt_figure  # noqa: E402
from karma.sim.simulate import simulate  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    profile = Profile.from_json(sm.input.profile)
    hw = load(sm.params.hardware)
    timelines = {}
    for name in sm.params.strategies:
        path = Path(sm.input.plans) / f"{name}.json"
        result = simulate(profile, Plan.from_json(path), hw) if path.exists() else None
        timelines[name] = result.timeline if result is not None and result.feasible else None
        print(f"{name}: {'OOM' if timelines[name] is None else f'{result.time:.4f} s'}")
    title = (f"{profile.model} batch {profile.batch}, one iteration per strategy "
             f"(simulated on {hw.name}, {hw.device_memory / 1e9:.0f} GB)")
    gantt_figure(timelines, title, Path(sm.output[0]))

"""Snakemake script: weak scaling of one model (KARMA pipelined / naive, in-core data parallel)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.scaling import sweep  # noqa: E402
from karma.plan.plan import Plan  # noqa: E402
from karma.profile.analytic import analytic_profile  # noqa: E402
from karma.profile.profile import Profile  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402
from models.registry import build  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    hw = load(sm.params.hardware)
    big = Profile.from_json(sm.input.profile)
    one = analytic_profile(build(big.model, big.size, 1, device="meta"), hw)
    karma = Plan.from_json(Path(sm.input.plans) / "karma.json")
    gpus = [1] + [n * hw.gpus_per_node for n in sm.params.nodes]
    table = sweep(one, big, karma, hw, gpus)
    table.to_csv(sm.output[0], index=False)
    print(to_markdown(table.drop(columns=["source"])))

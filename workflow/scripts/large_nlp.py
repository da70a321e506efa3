"""Snakemake script: one large NLP model, KARMA data parallel vs Megatron layouts, across node counts."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.large_nlp import compare  # noqa: E402
from karma.plan.plan import Plan  # noqa: E402
from karma.profile.profile import Profile  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    hw = load(sm.params.hardware)
    profile = Profile.from_json(sm.input.profile)
    karma = Plan.from_json(Path(sm.input.plans) / "karma.json")
    table = compare(profile, karma, hw, sm.params.nodes, progress=lambda n: print(f"{n} nodes done", flush=True))
    out = Path(sm.output[0])
    table.to_csv(out.with_suffix(".tmp"), index=False)
    out.with_suffix(".tmp").replace(out)
    print(to_markdown(table.drop(columns=["source", "layout"])))

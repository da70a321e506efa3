"""Snakemake script: the large-NLP comparison on other machines (each model profiled and planned anew)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
import pandas as pd  # noqa: E402
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.large_nlp import compare  # noqa: E402
from karma.profile.analytic import analytic_profile  # noqa: E402
from karma.strategies import run_strategy  # noqa: E402
from models.registry import build  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    tables = []
    for name in sm.params.hardware:
        hw = load(name)
        for model in sm.params.models:
            # Megatron-LM's own half layer on both sides in mixed precision (karma/experiments/large_nlp.py)
            profile = analytic_profile(build(model, "paper", device="meta", precision=sm.params.precision), hw,
                                       policy="megatron")
            outcome = run_strategy("karma", profile, hw)
            if outcome.plan is None:
                print(f"{name} {model}: KARMA found no plan ({outcome.error}); skipped")
                continue
            tables.append(compare(profile, outcome.plan, hw, sm.params.nodes))
            print(f"{name} {model}: done", flush=True)
    out = Path(sm.output[0])
    pd.concat(tables, ignore_index=True).to_csv(out.with_suffix(".tmp"), index=False)
    out.with_suffix(".tmp").replace(out)

"""Snakemake script: plan and simulate every configured strategy on one profile."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.speedups import compare  # noqa: E402
from karma.profile.profile import Profile  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    profile = Profile.from_json(sm.input.profile)
    hw = load(sm.params.hardware)
    table, outcomes = compare(profile, hw, list(sm.params.strategies))
    plans = Path(sm.output.plans)
    plans.mkdir(parents=True, exist_ok=True)
    for name, outcome in outcomes.items():
        if outcome.plan is not None:
            outcome.plan.to_json(plans / f"{name}.json")
    table.to_csv(sm.output.csv, index=False)
    print(to_markdown(table.drop(columns=["plan", "source"])))

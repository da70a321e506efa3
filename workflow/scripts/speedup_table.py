"""Snakemake script: KARMA's simulated speedups over every baseline, per model, with the paper's claim."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.experiments.speedups import error_bands, headline, summary, with_margins  # noqa: E402
from karma.report.figures import speedup_figure  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = pd.concat([pd.read_csv(p) for p in sm.input.strategies], ignore_index=True)
    summ = summary(table)
    # your own models (config extra_models) get rows, but the headline and the paper's claims are the paper's models'
    paper = list(getattr(sm.params, "paper_models", summ.model))
    summ["experiment"] = ["paper" if m in paper else "extra model" for m in summ.model]
    runtime = getattr(sm.input, "runtime", [])
    runtime = [runtime] if isinstance(runtime, str) else list(runtime)
    summ = with_margins(summ, error_bands(pd.read_csv(runtime[0])) if runtime else {})
    head = headline(table[table.model.isin(paper)], summ[summ.experiment == "paper"])
    table.to_csv(sm.output.csv, index=False)
    summ.to_csv(sm.output.summary, index=False)
    hw = sm.params.hardware
    precision = sm.params.precision
    lines = [
        f"# KARMA vs out-of-core baselines (simulated on `{hw}`, {precision})",
        "",
        f"Precision: {precision}"
        + (" (KARMA's paper: PyTorch 1.2 models in FP32; config `precision: paper`)." if precision == "fp32" else
           " mixed precision (16-bit activations and GEMMs, fp32 masters; config `precision: paper_variant`), "
           "the same batches, baselines and planner as the FP32 table (results/tables/speedups.md)."),
        "",
        "Every number is simulated: the performance model (karma/sim/simulate.py) on analytic profiles at paper size.",
        "Speedup = baseline time / KARMA time from the same simulation; OOM = the plan does not fit in the "
        "device memory (never reported as a time). Every baseline plans for the capacity within its own "
        "published rules (baselines/*.py cite them); KARMA's plan comes from its own search only. "
        "`karma_over_bound` = KARMA's time / the lower bound no feasible plan beats (karma/sim/bound.py, "
        "tested against exhaustive search).",
        "",
        "## Headline",
        "",
        "* geometric-mean speedup over the strongest baseline that fits, per model: "
        f"**{head['geomean_speedup_over_strongest_baseline']:.3f}x**"
        f" (paper: {head['paper_average_speedup']}x average over state-of-the-art out-of-core methods)",
        f"* geometric-mean speedup over every feasible baseline but vDNN (whose offload-everything policies are "
        f"2-9x slower and would inflate it): {head['geomean_speedup_over_feasible_baselines_without_vdnn']:.3f}x",
        f"* worst KARMA plan / sound lower bound: {head['worst_karma_over_bound']:.3f} (target <= 1.05; over it: "
        f"{head['models_over_bound_target'] or 'none'})",
        f"* models where KARMA is slower than a baseline: {head['models_where_karma_is_not_fastest']}",
        f"* verdicts, a margin within the model's error measured on this machine being a tie (column "
        f"`model_error_measured`: the worst |measured / predicted - 1| of any strategy's step on that model, "
        f"results/tables/measured_vs_predicted.md): {head['verdicts']}",
        "",
        "## Per model",
        "",
        to_markdown(summ.drop(columns=["source"])),
        "",
        "## Every strategy",
        "",
        to_markdown(table.drop(columns=["plan", "source", "reason"])),
        "",
    ]
    Path(sm.output.md).write_text("\n".join(lines))
    speedup_figure(table, hw, Path(sm.output.figure))
    print("\n".join(lines))

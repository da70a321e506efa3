"""Snakemake script: measured vs predicted (table and scatter plot) for every runtime run."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.report.figures import measured_vs_predicted_figure  # noqa: E402
from karma.report.markdown import markdown_report  # noqa: E402
from karma.report.regress import PEAK_BELOW_TARGET, PEAK_TARGET, STEP_SCALE_TARGET, STEP_TIME_TARGET  # noqa: E402
from karma.report.tables import step_terms_markdown, step_terms_rows  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True)
    table.to_csv(sm.output.csv, index=False)
    ran = table[table.measured_s.notna()]
    worst = (ran.measured_over_predicted - 1).abs().max() if len(ran) else float("nan")
    within = (ran.measured_over_predicted_rel - 1).abs().max() if len(ran) else float("nan")
    scales = table.groupby("model", sort=False).repeat_scale.first()
    peak_worst = (ran.peak_measured_over_predicted - 1).abs().max() if len(ran) else float("nan")
    text = markdown_report("The performance model against the runtime (this machine, emulated device)", [
        "Each strategy is planned on a measured profile of the small preset (for the capacity less 5%",
        "headroom), simulated (predicted) and run for real by the runtime on the CPU with an emulated device",
        "and link (measured). The runtime's peak counts every tensor the step creates until it dies, plus",
        "weights, optimizer state and prefetched copies.",
        "",
        f"Worst |measured / predicted - 1| of the step time within its repeat (predicted at the processor's speed "
        f"in that repeat, the speed at which their median is 1: columns processor_speed, karma/runtime/drift.py, "
        f"as drift moves compute and not the link; columns measured_over_predicted_rel): {within:.3f} (target "
        f"{STEP_TIME_TARGET}); the repeats' scale, the median of measured / predicted at the profile's speed "
        f"(columns repeat_scale), per model: "
        + ", ".join(f"{model} {scale:.3f}" for model, scale in scales.items())
        + f" (target {STEP_SCALE_TARGET}: this machine drifts 10-25% between the profile and a run, docs/machine.md); "
        f"absolute, reported: {worst:.3f}. Of the peak: "
        f"{peak_worst:.3f} (target: {PEAK_TARGET} above, {PEAK_BELOW_TARGET} below, where copies ending early lower "
        "it). All but the absolute step enforced by `karma compare --strict` (karma/report/regress.py).",
        "Measured times are the median of repeated runs, the strategies interleaved (columns _min, _max: the",
        "range); KARMA's measured speedups are taken within each repeat.",
        "",
        "Rates of this machine the predictions use (karma/runtime/rates.py), per model's run:",
        "",
        *[f"* {model}: {rates}" for model, rates in table.groupby("model", sort=False).rates.first().items()],
    ], table.drop(columns=["rates", "terms_processor_speed", *(c for c in table if c.endswith(("_measured_s",
                                                                                            "_predicted_s")))]))
    Path(sm.output.md).write_text(text)
    measured_vs_predicted_figure(table, Path(sm.output.figure))
    terms = step_terms_rows(table)
    terms.to_csv(sm.output.terms_csv, index=False)
    Path(sm.output.terms_md).write_text(step_terms_markdown(terms))
    print(text)

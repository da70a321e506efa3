"""Snakemake script: reach (the largest batch each strategy fits, and its speed there), simulated, beside
the published reach of other systems; table (CSV + Markdown) and figure."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.reach import reach_table  # noqa: E402
from karma.experiments.reach_granularity import COLUMNS, case_rows  # noqa: E402
from karma.report.reach_figure import reach_figure  # noqa: E402
from karma.report.reach_report import (  # noqa: E402
    granularity_markdown,  # noqa: E402
    markdown,
    published,
)

sm = snakemake  # noqa: F821
with logged(sm):
    hw = load(sm.params.hardware)
    cfg = sm.params.reach
    table = reach_table(list(cfg["models"]), hw, list(sm.params.strategies), granularities=cfg["granularity"],
                        multiples=cfg["multiples"], limit_factor=cfg["limit_factor"], work=cfg["karma_work"],
                        precision=sm.params.precision, confirm=cfg["karma_confirm"], log=print,
                        layer_models=cfg.get("layer_models"), own_models=cfg.get("own_models", []))
    theirs = published()
    table.to_csv(sm.output.csv, index=False)
    text = markdown(table, theirs, hw, cfg["limit_factor"], cfg["karma_work"])
    case = cfg.get("granularity_case")
    if case:
        rows = case_rows(case["model"], case["batch"], case.get("precisions", [sm.params.precision]), hw, table,
                         sm.params.precision)
        text += "\n" + granularity_markdown(rows, hw)
    else:
        rows = pd.DataFrame(columns=COLUMNS)
    rows.to_csv(sm.output.granularity_csv, index=False)
    Path(sm.output.md).write_text(text)
    reach_figure(table, theirs, hw.name, Path(sm.output.figure))
    print(text)

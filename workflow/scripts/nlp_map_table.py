"""Snakemake script: the map of the fourth claim, its table and figure."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.experiments.nlp_map import region  # noqa: E402
from karma.report.figures import nlp_map_figure  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True)
    table.to_csv(sm.output.csv, index=False)
    nlp_map_figure(table, sm.params.hardware, Path(sm.output.figure))
    regions = pd.DataFrame([{"model": m, "precision": p, "KARMA faster (ratio > 1)": region(g, list(sm.params.nodes))}
                            for (m, p), g in table.groupby(["model", "precision"], sort=False)])
    wide = table.pivot_table(index=["model", "precision", "batch_per_gpu"], columns="nodes",
                             values="karma_over_best_mp").round(2)
    wide.columns = [f"{n} nodes" for n in wide.columns]
    text = "\n".join([
        f"# Where data parallel out-of-core beats model parallelism (simulated on `{sm.params.hardware}`)",
        "",
        "The paper's fourth claim over a grid instead of one point: KARMA's sequences/s over the best Megatron",
        "layout (hybrid tensor x data parallel or ZeRO-1, its fastest configuration) at the same global batch,",
        "per-GPU batch x node count, both sides in the precision named. KARMA plans the model anew at each",
        "batch; the batch doubles until KARMA's plan no longer fits (or the config's `large_nlp: map:",
        "max_batch`). Empty: one side does not fit there. karma/experiments/nlp_map.py.",
        "",
        "## Where the claim holds",
        "",
        to_markdown(regions),
        "",
        "## KARMA / best Megatron layout (throughput)",
        "",
        to_markdown(wide.reset_index()),
        "",
        f"Source: {table.source.iloc[0]}.",
        "",
    ])
    Path(sm.output.md).write_text(text)
    print(text)

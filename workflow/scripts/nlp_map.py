"""Snakemake script: one large NLP model in one precision, KARMA over the best Megatron layout across per-GPU
batch and node count (karma/experiments/nlp_map.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.experiments.nlp_map import map_rows  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = map_rows(sm.wildcards.model, sm.wildcards.precision, load(sm.params.hardware), list(sm.params.nodes),
                     sm.params.max_batch, progress=lambda line: print(line, flush=True))
    out = Path(sm.output[0])
    table.to_csv(out.with_suffix(".tmp"), index=False)
    out.with_suffix(".tmp").replace(out)
    print(to_markdown(table.drop(columns=["source", "karma_plan", "best_mp_layout"])))

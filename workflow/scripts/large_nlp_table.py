"""Snakemake script: the large-NLP table, summary, what-if and tensor-parallel validation; two figures."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import figure_sources  # noqa: E402
from karma.experiments.large_nlp import ratios, summary  # noqa: E402
from karma.report.figures import large_nlp_figure, whatif_figure  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = pd.concat([pd.read_csv(p) for p in sm.input.tables], ignore_index=True)
    whatif = pd.read_csv(sm.input.whatif)
    validation = pd.concat([pd.read_csv(p) for p in sm.input.validation], ignore_index=True)
    summ = summary(table)
    table.to_csv(sm.output.csv, index=False)
    summ.to_csv(sm.output.summary, index=False)
    validation.to_csv(sm.output.validation, index=False)
    what = summary(whatif)
    error = (validation.tp_over_dp_measured / validation.tp_over_dp_predicted - 1).abs().max()
    ok = table[table.status == "ok"]
    best = ok.loc[ok.groupby(["model", "nodes"]).sequences_per_s.idxmax()]
    text = [
        f"# Large NLP models: out-of-core data parallel vs Megatron model parallel (simulated on "
        f"`{sm.params.hardware}`)",
        "",
        "The paper (Sec. VI-D) claims KARMA's data parallel out-of-core training is faster than hybrid model",
        "parallelism for Megatron-LM 2.5B and 8.3B and Turing-NLG 17B. Same global batch (the model's paper batch",
        "per GPU) on every node count; Megatron gets its best layout (tensor-parallel degree dividing the heads,",
        "micro-batch with gradient accumulation, activation checkpointing or not, data-parallel all-reduce",
        "overlapped with the backward); ZeRO-1 partitions its optimizer state. TFLOP/s per GPU count the",
        "recomputed forwards too (Megatron-LM's convention: the FLOPs the GPU executes);",
        "`model_tflops_per_gpu` counts the model's forward and backward only. Precision: "
        f"{', '.join(sorted(set(table.precision)))} on both sides (config `precision: large_nlp`; in fp16 both",
        "run Megatron-LM's own half layer, as it trained); the what-if in "
        f"{', '.join(sorted(set(whatif.precision)))} (`precision: whatif`). karma/experiments/large_nlp.py,",
        "karma/parallel/megatron_model.py; the cost model against Megatron-LM's published numbers:",
        "results/tables/calibration.md.",
        "",
        "## KARMA's throughput over the best Megatron layout",
        "",
        "`*_min_nodes`: the smallest node count (of those simulated) where the strategy fits.",
        "",
        to_markdown(summ.drop(columns=["source"])),
        "",
        "## Fastest strategy at each node count",
        "",
        to_markdown(best[["model", "nodes", "gpus", "strategy", "layout", "sequences_per_s", "tflops_per_gpu",
                          "model_tflops_per_gpu"]]),
        "",
        "## What-if: newer machines (each model profiled and planned on the preset)",
        "",
        to_markdown(what.drop(columns=["source"])),
        "",
        "## The cost model against real tensor-parallel runs (this machine)",
        "",
        "Same global batch as pure data parallel (tp=1) and pure tensor parallel (tp=N) over N MPI ranks,",
        "in core; predicted by karma/parallel/megatron_model.py on each rank's measured shard profile with the",
        f"all-reduce timed on these ranks. Worst |measured tp/dp ratio / predicted - 1|: {error:.3f} (target 0.15).",
        "",
        to_markdown(validation.drop(columns=["source"])),
        "",
        "## Every point",
        "",
        to_markdown(table.drop(columns=["source"])),
        "",
        f"Sources: {'; '.join(sorted(set(table.source)))}. Measured rows: {validation.source.iloc[0]}.",
        "KARMA's host memory per node (`host_gb_per_node`: weights and gradients as uploaded, 16-bit in mixed",
        "precision, plus fp32 masters and optimizer state, one copy per node) must fit the node's DRAM",
        "(ABCI: 384 GiB); not checked by the simulator.",
        "",
        "## Hardware figures and their sources (from karma/presets/*.yaml)",
    ]
    for name in dict.fromkeys([sm.params.hardware, *whatif.hardware]):
        text += ["", f"### {name}", "", to_markdown(pd.DataFrame(figure_sources(name, tensor_cores=True)))]
    Path(sm.output.md).write_text("\n".join(text) + "\n")
    large_nlp_figure(table, sm.params.hardware, Path(sm.output.figure))
    whatif_figure(ratios(whatif), Path(sm.output.whatif))
    print("\n".join(text[:20]))

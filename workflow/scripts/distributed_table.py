"""Snakemake script: real MPI runs against the data parallel performance model."""

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.report.markdown import markdown_report  # noqa: E402
from karma.report.regress import DP_RATIO_TARGET  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = pd.concat([pd.read_csv(p) for p in sm.input], ignore_index=True)
    table.to_csv(sm.output.csv, index=False)
    per_model = table[table.order == "pipelined"]
    error = (per_model.ratio_measured_over_predicted - 1).abs()
    agree = ((per_model.naive_over_pipelined_measured - 1) * (per_model.naive_over_pipelined_predicted - 1) > 0)
    verdict = (f"The measured and predicted ratios agree in sign for every model and within {error.max():.3f} "
               f"(target {DP_RATIO_TARGET})." if agree.all() and error.max() <= DP_RATIO_TARGET else
               f"Not shown on this machine: the measured ratio disagrees with the prediction "
               f"(sign agrees for {int(agree.sum())} of {len(agree)} models, worst error {error.max():.3f}, target "
               f"{DP_RATIO_TARGET}); the measured number does not support the claim that pipelining is faster here.")
    lines = [f"* {r.model}: naive/pipelined measured {r.naive_over_pipelined_measured:.3f} "
             f"(range {r.naive_over_pipelined_measured_min:.3f}-{r.naive_over_pipelined_measured_max:.3f} over "
             f"{r.repeats} interleaved repeats), predicted {r.naive_over_pipelined_predicted:.3f} "
             f"({r.naive_over_pipelined_predicted_min:.3f}-{r.naive_over_pipelined_predicted_max:.3f}); measured / "
             f"predicted {r.ratio_measured_over_predicted:.3f} (median of the repeats' own)"
             for r in per_model.itertuples()]
    text = markdown_report("Data parallel: real MPI ranks against the performance model (this machine)", [
        "Each rank trains its shard with streamed weights and host updates; gradients are all-reduced per block",
        "(pipelined) or after the backward (naive). On this machine the ranks' compute takes every core, so a real",
        "all-reduce or host update overlapped with the backward would only take cores from it (on a GPU cluster",
        "they run on the NIC and the host's own cores): the network and the host optimizer are emulated, as the",
        "host link is, at the reference machine's ratios to its link (done for real, then they wait out their",
        "time; columns network_MBs, host_update_MBs). Predicted: the simulator on each rank's measured profile",
        "with those rates, re-measured in every repeat. Compare the naive/pipelined ratios: each repeat runs both",
        "orders back to back.",
        "",
        *lines,
        "",
        verdict,
    ], table)
    Path(sm.output.md).write_text(text)
    print(text)

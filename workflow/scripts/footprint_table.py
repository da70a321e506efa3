"""Snakemake script: footprint table (CSV + Markdown), the table of every profile the run measured, and figures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.core.hardware import load  # noqa: E402
from karma.profile.profile import Profile  # noqa: E402
from karma.report.figures import footprint_figure, memory_vs_batch_figure  # noqa: E402
from karma.report.markdown import to_markdown  # noqa: E402
from karma.report.tables import footprint_rows, measured_rows, memory_vs_batch  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    hw = load(sm.params.hardware)
    paper = footprint_rows([Profile.from_json(p) for p in sm.input.analytic], hw)
    measured = measured_rows([Profile.from_json(p) for p in sm.input.measured])
    paper.to_csv(sm.output.csv, index=False)
    measured.to_csv(sm.output.measured, index=False)
    Path(sm.output.md).write_text(
        f"# Memory of plain training at paper size\n\n"
        f"Simulated: analytic profiles (meta device, roofline times) on `{hw.name}` "
        f"({hw.device_memory / 1e9:.0f} GB usable). `times_over_capacity` = in-core peak / device memory; "
        f"`fwd_bwd_s` is one iteration's compute time if memory were unlimited.\n\n"
        f"{to_markdown(paper)}\n\n"
        f"# Profiles measured on this machine\n\nThe runtime validation's (each model at its runtime batch) and "
        f"`measured.models`' (config/README.md).\n\n{to_markdown(measured)}\n"
    )
    footprint_figure(paper, hw.name, Path(sm.output.figure))
    curves = memory_vs_batch([Profile.from_json(p) for p in sm.input.analytic], hw)
    curves.to_csv(sm.output.batch_csv, index=False)
    memory_vs_batch_figure(curves, hw.name, hw.device_memory / 1e9, Path(sm.output.batch_figure))
    print(to_markdown(paper))

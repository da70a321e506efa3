"""Snakemake script: the paper's claims side by side with this run's numbers."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

from karma.report.claims import claims  # noqa: E402
from karma.report.markdown import markdown_report  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    table = claims(Path(sm.input.speedups).parent)
    table.to_csv(sm.output.csv, index=False)
    text = markdown_report("The paper's claims and ours", [
        "Claims from the abstract of Wahib et al. SC'20 (docs/paper.md); its per-model numbers are not",
        "available, so the verdict is on the shape of each claim. Every number names its source.",
    ], table)
    Path(sm.output.md).write_text(text)
    print(text)

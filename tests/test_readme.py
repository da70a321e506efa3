"""The README's results come from the committed reference run, never typed by hand."""

from pathlib import Path

import pandas as pd

from karma.readme import render

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_results_table_matches_the_reference_run():
    readme = (ROOT / "README.md").read_text()
    metrics = pd.read_csv(ROOT / "results" / "reference" / "metrics.csv")
    assert render(readme, metrics) == readme, "README is stale: run python -m karma.readme"

"""The README's results come from the committed reference run, never typed by hand."""

import re
import subprocess
from pathlib import Path

import pandas as pd

from karma.report.readme import render
from models.registry import MODELS, spec

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_results_table_matches_the_reference_run():
    readme = (ROOT / "README.md").read_text()
    metrics = pd.read_csv(ROOT / "results" / "reference" / "metrics.csv")
    assert render(readme, metrics) == readme, "README is stale: run python -m karma.report.readme"


def test_the_zoo_table_gives_each_models_paper_batch():
    rows = dict(re.findall(r"^\| ([a-z0-9.-]+) \| .* \| ([0-9]+) \|$", (ROOT / "docs/models.md").read_text(), re.M))
    assert {m: int(rows[m]) for m in MODELS} == {m: spec(m).batch["paper"] for m in MODELS}


def test_nothing_refers_to_a_design_file_outside_the_repository():
    """The design, the paper's summary and the machine's facts live in docs/; a clone has nothing else."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    outside = re.compile(r"\.\./shared|(?<![\w/])(DESIGN|FACTS|PAPER)\.md")
    hits = [f for f in files if (ROOT / f).is_file() and f != "tests/report/test_readme.py"
            and outside.search((ROOT / f).read_text(errors="replace"))]
    assert hits == []
    for page in ("design", "machine", "paper"):
        assert (ROOT / "docs" / f"{page}.md").is_file()

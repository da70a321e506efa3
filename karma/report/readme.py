"""The README's results table, generated from the committed reference run (no hand-typed numbers).

`python -m karma.report.readme` rewrites the block between the README's ``speedups`` markers from
results/reference/metrics.csv (what `karma compare` checks every pipeline run against);
tests/test_readme.py fails when the README and the reference disagree.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from karma.experiments.speedups import EXCLUDED_FROM_MEAN, geomean

BEGIN, END = "<!-- speedups:begin -->", "<!-- speedups:end -->"


def results_table(metrics: pd.DataFrame) -> str:
    """Markdown: per model KARMA's simulated time, the strongest baseline that fits, the speedup, plan / bound."""
    sims = metrics[metrics.metric.str.startswith("speedups/")]
    parts = sims.metric.str.split("/", expand=True)
    sims = sims.assign(model=parts[1], strategy=parts[2], field=parts[3])
    lines = ["| model | KARMA (s) | strongest baseline (s) | speedup | KARMA / bound | vDNN-free geomean |",
             "|---|---|---|---|---|---|"]
    speedups = []
    for model, df in sims.groupby("model", sort=False):
        times = df[df.field == "time_s"].set_index("strategy").value
        karma = times.get("karma")
        bound = df[(df.strategy == "karma") & (df.field == "time_over_bound")].value
        others = times.drop("karma", errors="ignore")
        if karma is None or others.empty:
            continue
        best = others.idxmin()
        speedups.append(others[best] / karma)
        rest = others.drop([s for s in EXCLUDED_FROM_MEAN if s in others.index])
        lines.append(f"| {model} | {karma:.3f} | {best} {others[best]:.3f} | {others[best] / karma:.3f}x | "
                     f"{bound.iloc[0]:.3f} | {geomean(rest / karma):.2f}x |")
    lines.append("")
    lines.append(f"Geometric mean over the strongest baseline per model: **{geomean(speedups):.3f}x** (the paper "
                 "reports 1.52x on average over its baselines). Simulated on `v100-abci`, 16 GB.")
    return "\n".join(lines)


def render(readme: str, metrics: pd.DataFrame) -> str:
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{results_table(metrics)}\n{END}{tail}"


def main(root: str = ".") -> None:
    root_path = Path(root)
    metrics = pd.read_csv(root_path / "results" / "reference" / "metrics.csv")
    path = root_path / "README.md"
    path.write_text(render(path.read_text(), metrics))


if __name__ == "__main__":
    main(*sys.argv[1:])

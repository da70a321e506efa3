"""Where a pipeline run's time went: each rule's jobs and seconds, from the benchmark file Snakemake writes
for every job (`benchmark:` in workflow/rules/*.smk, https://snakemake.readthedocs.io/en/stable/snakefiles/rules.html#benchmark-rules).

The Snakefile's `onsuccess` handler prints the table and writes it to logs/rule_times.md at the end of
every run; `karma`-independent, it reads only the benchmark files.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def rule_times(root: str | Path) -> pd.DataFrame:
    """One row per rule (the first folder under `root`, or the file's name): jobs, their total and longest wall
    time (s) and the largest resident memory (MB), slowest rule first. Empty when no job wrote a benchmark."""
    rows = []
    for path in sorted(Path(root).rglob("*.tsv")):
        table = pd.read_csv(path, sep="\t")
        if table.empty or "s" not in table:
            continue
        rss = pd.to_numeric(table.get("max_rss", pd.Series(dtype=float)), errors="coerce")
        parts = path.relative_to(root).parts  # rule/wildcards.tsv, or rule.tsv for a rule without wildcards
        rows.append({"rule": parts[0] if len(parts) > 1 else path.stem, "s": float(table["s"].iloc[-1]),
                     "max_rss_mb": float(rss.iloc[-1]) if len(rss) else float("nan")})
    if not rows:
        return pd.DataFrame(columns=["rule", "jobs", "total_s", "longest_s", "max_rss_mb"])
    jobs = pd.DataFrame(rows)
    out = jobs.groupby("rule").agg(jobs=("s", "size"), total_s=("s", "sum"), longest_s=("s", "max"),
                                   max_rss_mb=("max_rss_mb", "max")).reset_index()
    return out.sort_values("total_s", ascending=False, ignore_index=True)


def summary(root: str | Path) -> str:
    """The table as markdown, with the jobs' total: CPU-parallel jobs overlap, so the run's wall time is less."""
    table = rule_times(root)
    if table.empty:
        return "no rule wrote a benchmark"
    total = table.total_s.sum()
    lines = ["Seconds per rule (wall time of its jobs, from their benchmark files; jobs in parallel overlap)", "",
             table.to_markdown(index=False, floatfmt=".1f"), "",
             f"{int(table.jobs.sum())} jobs, {total:.0f} s of job time in all"]
    return "\n".join(lines)

"""The reach figure: throughput relative to in-core training against the batch, per model.

One panel per model, a line per strategy (and line style per unit granularity) through its
throughput at the multiples of the largest in-core batch it reaches and at its reach (the end
of the line, a dot); published reach (karma/data/published_reach.csv) as black stars, labelled
as their system on their hardware. Every line is simulated (karma/experiments/reach.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

# matplotlib and seaborn are imported inside the drawing functions: heavy optional dependencies of the
# figures alone (the Agg backend is chosen before pyplot loads).


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return plt


def curve(row: pd.Series) -> tuple[list[int], list[float]]:
    """(batches, throughput over in-core's) of one table row: the multiples it reaches, then its reach."""
    points = {}
    for column, value in row.items():
        if column.startswith("vs_incore_") and column.endswith("x") and pd.notna(value):
            points[int(column[len("vs_incore_"):-1]) * int(row.incore_batch)] = float(value)
    if pd.notna(row.reach_batch) and pd.notna(row.vs_incore):
        points[int(row.reach_batch)] = float(row.vs_incore)
    batches = sorted(points)
    return batches, [points[b] for b in batches]


def reach_figure(table: pd.DataFrame, published: pd.DataFrame, hardware: str, out: Path) -> None:
    plt = _pyplot()
    import seaborn as sns
    from matplotlib.ticker import NullFormatter

    models = list(dict.fromkeys(table.model))
    strategies = list(dict.fromkeys(table.strategy))
    styles = dict(zip(dict.fromkeys(table.granularity), ["-", "--", ":", "-."], strict=False))
    palette = dict(zip(strategies, sns.color_palette("tab20", len(strategies)), strict=True))
    cols = min(3, len(models))
    rows = math.ceil(len(models) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        part = table[table.model == model]
        incore = part.incore_batch.dropna()
        if incore.empty:
            reached = part[part.reach_batch.notna()].sort_values("reach_batch", ascending=False)
            listing = "\n".join(f"{r.strategy}: {int(r.reach_batch)}" for r in reached.itertuples())
            ax.text(0.5, 0.5, f"in-core training does not fit\neven at batch 1: no reference\n\nlargest batch:\n"
                    f"{listing or 'none fits'}", ha="center", va="center", fontsize=7, transform=ax.transAxes)
            ax.set_title(model, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        for r in part.itertuples():
            batches, values = curve(pd.Series(r._asdict()))
            if not batches:
                continue
            ax.plot(batches, values, styles[r.granularity], color=palette[r.strategy],
                    lw=2.0 if r.strategy == "karma" else 1.2,
                    label=r.strategy if r.granularity == next(iter(styles)) else None)
            ax.plot(batches[-1:], values[-1:], ">" if r.limit_hit else "o", color=palette[r.strategy], ms=4)
        theirs = published[published.our_model == model].dropna(subset=["batch", "throughput_vs_incore"])
        for p in theirs.itertuples():
            ax.plot([p.batch], [p.throughput_vs_incore], "*", color="black", ms=10, zorder=4)
            ax.annotate(f"{p.system}\n(their system, their hardware)", (p.batch, p.throughput_vs_incore),
                        textcoords="offset points", xytext=(0, -8), ha="center", va="top", fontsize=6)
        ax.set_xscale("log")
        base = int(incore.iloc[0])
        top = max([base, *part.reach_batch.dropna(), *theirs.batch])
        ticks = [base * 2**k for k in range(8) if base * 2**k <= top * 1.05]
        if top > ticks[-1] * 1.25:  # the longest reach, where no power of two is near it
            ticks.append(int(top))
        ax.set_xticks(ticks, [f"{t}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0, max(1.1, ax.get_ylim()[1]))
        ax.set_title(f"{model} (largest in-core batch {int(incore.iloc[0])})", fontsize=9)
        ax.set_xlabel("batch (log; ticks at 1, 2, 4, ... x the largest in-core batch)", fontsize=7)
        ax.set_ylabel("throughput / in-core's at its largest batch", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], marker="*", color="black", ls="", ms=9))
    labels.append("published reach (their system on their hardware)")
    if table.limit_hit.any():
        handles.append(Line2D([], [], marker=">", color="grey", ls="", ms=5))
        labels.append("search limit hit (the reach is at least this)")
    if len(styles) > 1:
        for granularity, style in styles.items():
            handles.append(Line2D([], [], ls=style, color="grey"))
            labels.append(f"{granularity} units")
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.03 * math.ceil(len(labels) / 6)))
    fig.suptitle(f"Reach: throughput relative to in-core training against the batch (simulated on {hardware}; "
                 f"a dot: the largest batch that fits)", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)

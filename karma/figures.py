"""Figures the pipeline draws (seaborn on matplotlib's Agg backend, no screen needed)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return plt


def footprint_figure(df: pd.DataFrame, hardware: str, out: Path, split_at_GB: float = 100.0) -> None:
    """Stacked bars per model: weights+gradients+optimizer state, then activations, vs the device line.

    The peak (black tick) can be below the stack: while activations peak at the
    start of backward, the gradients of most layers do not exist yet.

    Linear scales (stacks on a log scale mislead); models whose footprint is over
    `split_at_GB` go to a second panel with its own scale.
    """
    plt = _pyplot()
    small = df[df.in_core_peak_GB <= split_at_GB]
    large = df[df.in_core_peak_GB > split_at_GB]
    panels = [part for part in (small, large) if len(part)]
    fig, axes = plt.subplots(1, len(panels), figsize=(9, 4),
                             gridspec_kw={"width_ratios": [len(p) for p in panels]}, squeeze=False)
    capacity = df.device_GB.iloc[0]
    for ax, part in zip(axes[0], panels, strict=True):
        labels = [f"{m}\n(batch {b})" for m, b in zip(part.model, part.batch, strict=True)]
        ax.bar(labels, part.weights_grads_optimizer_GB, label="weights + grads + optimizer state")
        ax.bar(labels, part.activations_GB, bottom=part.weights_grads_optimizer_GB,
               label="activations saved for backward")
        ax.axhline(capacity, color="black", linestyle="--", linewidth=1,
                   label=f"{hardware} device memory ({capacity:.0f} GB)")
        top = part.weights_grads_optimizer_GB + part.activations_GB
        ax.scatter(range(len(part)), part.in_core_peak_GB, marker="_", s=500, color="black", zorder=3,
                   label="in-core peak (x = peak / device memory)")
        for i, (height, times) in enumerate(zip(top, part.times_over_capacity, strict=True)):
            ax.text(i, height, f"{times:.1f}x", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, top.max() * 1.12)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    axes[0][0].set_ylabel("in-core training memory (GB)")
    axes[0][0].legend(loc="lower left", fontsize=7, framealpha=0.9)
    fig.suptitle(f"Memory of plain training at paper size "
                 f"(simulated: analytic profiles on {hardware})", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)

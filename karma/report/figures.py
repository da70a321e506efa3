"""Figures the pipeline draws (seaborn on matplotlib's Agg backend, no screen needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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


#: One colour per kind of operation in the Gantt charts.
OP_COLOURS = {
    "forward": "#4C72B0", "backward": "#55A868", "recompute": "#C44E52", "optimizer step": "#8172B2",
    "swap out": "#DD8452", "prefetch": "#DD8452", "offload checkpoint": "#937860",
    "prefetch checkpoint": "#937860", "upload weights": "#DA8BC3", "download gradients": "#DA8BC3",
}
RESOURCES = ["compute", "h2d", "d2h", "link", "host"]


def gantt_figure(timelines: dict, title: str, out: Path) -> None:
    """One panel per strategy: its simulated timeline on each resource (seconds)."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    names = list(timelines)
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 1.3 * len(names) + 0.8), sharex=True, squeeze=False)
    horizon = max((e.end for tl in timelines.values() if tl for e in tl), default=1.0)
    for ax, name in zip(axes[:, 0], names, strict=True):
        events = timelines[name]
        used = [r for r in RESOURCES if any(e.resource == r for e in events or [])]
        for row, resource in enumerate(used):
            mine = [e for e in events if e.resource == resource]
            for wide in (False, True):  # white separators only where they do not hide the op
                part = [e for e in mine if ((e.end - e.start) > 0.004 * horizon) == wide]
                ax.broken_barh([(e.start, e.end - e.start) for e in part], (row - 0.4, 0.8),
                               facecolors=[OP_COLOURS.get(e.op, "grey") for e in part],
                               edgecolor="white" if wide else "none", linewidth=0.3 if wide else 0)
        ax.set_yticks(range(len(used)), used, fontsize=7)
        ax.set_ylim(-0.6, max(len(used), 1) - 0.4)
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        if not events:
            ax.text(horizon / 2, 0, "OOM: no feasible plan", ha="center", va="center", fontsize=8)
        ax.grid(axis="y", visible=False)
    axes[-1, 0].set_xlabel("time in one iteration (s)")
    kinds = ["forward", "backward", "recompute", "swap out", "offload checkpoint", "upload weights",
             "optimizer step"]
    handles = [Patch(color=OP_COLOURS[k], label=k.replace("swap out", "swap out / prefetch")
                     .replace("offload checkpoint", "checkpoint copies").replace("upload weights", "weights / grads"))
               for k in kinds]
    fig.legend(handles=handles, loc="upper center", ncol=7, fontsize=7, frameon=False, bbox_to_anchor=(0.5, 1.0))
    fig.suptitle(title, fontsize=9, y=1.04)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)


def speedup_figure(table: pd.DataFrame, hardware: str, out: Path) -> None:
    """Time per iteration of every strategy per model, normalised to KARMA (OOM marked)."""
    plt = _pyplot()
    import seaborn as sns

    models = list(dict.fromkeys(table.model))
    strategies = [s for s in dict.fromkeys(table.strategy) if s != "karma"] + ["karma"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
    width = 0.8 / len(strategies)
    palette = sns.color_palette("deep", len(strategies))
    for j, strategy in enumerate(strategies):
        for i, model in enumerate(models):
            row = table[(table.model == model) & (table.strategy == strategy)]
            x = i + (j - (len(strategies) - 1) / 2) * width
            if row.empty:
                continue
            if row.status.iloc[0] != "ok":
                ax.text(x, 1.02, "OOM", rotation=90, ha="center", va="bottom", fontsize=6, color=palette[j])
                continue
            ax.bar(x, row.karma_speedup.iloc[0], width, color=palette[j])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(models)), [f"{m}\n(batch {table[table.model == m].batch.iloc[0]})" for m in models],
                  fontsize=7)
    ax.set_ylabel("time / KARMA's time (higher: KARMA faster)")
    ax.set_yscale("log")
    ticks = [t for t in (1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16) if t <= max(2.0, table.karma_speedup.max() * 1.1)]
    ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(0.9, ticks[-1] * 1.1)
    ax.set_title(f"Simulated time per iteration relative to KARMA on {hardware} (OOM: plan does not fit)",
                 fontsize=9)
    from matplotlib.patches import Patch

    ax.legend([Patch(color=palette[j]) for j in range(len(strategies))], strategies, fontsize=7,
              ncol=len(strategies), loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)


def measured_vs_predicted_figure(table: pd.DataFrame, out: Path) -> None:
    """Scatter of measured against predicted step time (one point per model and strategy)."""
    plt = _pyplot()
    import seaborn as sns

    ran = table[table.measured_s.notna()]
    fig, ax = plt.subplots(figsize=(5, 4.5))
    sns.scatterplot(data=ran, x="predicted_s", y="measured_s", hue="strategy", style="model", s=60, ax=ax)

    top = max(ran.predicted_s.max(), ran.measured_s.max()) * 1.3 if len(ran) else 1.0
    low = min(ran.predicted_s.min(), ran.measured_s.min()) / 1.3 if len(ran) else 0.1
    line = np.geomspace(low, top, 50)
    ax.plot(line, line, color="black", linewidth=0.8, label="measured = predicted")
    ax.fill_between(line, line * 0.85, line * 1.15, color="grey", alpha=0.15, label="+-15%")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ticks = [t for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 50) if low <= t <= top]
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("predicted step time (s, simulator on the measured profile)")
    ax.set_ylabel("measured step time (s, runtime on cpu-emulated device)")
    ax.set_title("Performance model vs runtime (this machine)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    plt.close(fig)


def scaling_figure(table: pd.DataFrame, hardware: str, out: Path) -> None:
    """Weak scaling: efficiency against GPUs, one panel per model, a line per strategy."""
    plt = _pyplot()
    import seaborn as sns

    data = table[table.efficiency.notna()]
    grid = sns.relplot(data=data, x="gpus", y="efficiency", hue="strategy", col="model", col_wrap=3, kind="line",
                       marker="o", height=2.4, aspect=1.3, facet_kws={"sharey": True})
    grid.set(xscale="log", ylim=(0, 1.05))
    grid.set_axis_labels("GPUs (4 per node)", "scaling efficiency")
    grid.figure.suptitle(f"Weak scaling of out-of-core data parallel training (simulated on {hardware})",
                         fontsize=9, y=1.02)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.figure.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(grid.figure)


def large_nlp_figure(table: pd.DataFrame, hardware: str, out: Path) -> None:
    """Throughput against nodes, one panel per model, a line per strategy (missing: does not fit)."""
    plt = _pyplot()
    import seaborn as sns

    data = table[table.sequences_per_s.notna()]
    grid = sns.relplot(data=data, x="nodes", y="sequences_per_s", hue="strategy", style="strategy", col="model",
                       kind="line", marker="o", height=2.6, aspect=1.1, facet_kws={"sharey": False})
    grid.set(xscale="log", yscale="log")
    grid.set_axis_labels(f"nodes ({table.gpus.iloc[0] // table.nodes.iloc[0]} GPUs each)", "sequences / s")
    grid.figure.suptitle(f"Large NLP models, same global batch: out-of-core data parallel vs Megatron model "
                         f"parallel (simulated on {hardware}; no point = no layout fits)", fontsize=9, y=1.03)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.figure.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(grid.figure)


def whatif_figure(ratios: pd.DataFrame, out: Path) -> None:
    """KARMA's throughput over the best Megatron layout against GPUs, a line per machine."""
    plt = _pyplot()
    import seaborn as sns

    grid = sns.relplot(data=ratios, x="gpus", y="karma_over_best_mp", hue="hardware", style="hardware",
                       col="model", kind="line", marker="o", height=2.6, aspect=1.1)
    grid.set(xscale="log", yscale="log")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    for ax in grid.axes.flat:
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_yticks([0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3])
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    grid.set_axis_labels("GPUs", "KARMA / best Megatron (throughput)")
    grid.figure.suptitle("What-if: where out-of-core data parallel beats model parallel (>1), simulated; "
                         "missing points: Megatron does not fit", fontsize=9, y=1.03)
    out.parent.mkdir(parents=True, exist_ok=True)
    grid.figure.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(grid.figure)


def _crossing(ax, values: np.ndarray) -> None:
    """The line where a grid's ratio crosses 1: the cell edges between neighbours on either side of it (cells
    without a value draw none)."""
    rows, cols = values.shape
    for y in range(rows):
        for x in range(cols):
            here = values[y, x]
            for dy, dx in ((0, 1), (1, 0)):
                if y + dy < rows and x + dx < cols:
                    there = values[y + dy, x + dx]
                    if np.isfinite(here) and np.isfinite(there) and (here > 1) != (there > 1):
                        if dx:
                            ax.plot([x + 0.5, x + 0.5], [y - 0.5, y + 0.5], color="black", lw=1.5)
                        else:
                            ax.plot([x - 0.5, x + 0.5], [y + 0.5, y + 0.5], color="black", lw=1.5)


def nlp_map_figure(table: pd.DataFrame, hardware: str, out: Path) -> None:
    """KARMA over the best Megatron layout on a grid of per-GPU batch (x) and node count (y), one panel per
    model (columns) and precision (rows), the ratio as colour on a log scale centred on 1 and written in each
    cell, and the line where it crosses 1 along the cells' edges."""
    plt = _pyplot()
    from matplotlib.colors import LogNorm  # heavy optional dependency, loaded after _pyplot chose Agg

    models = list(dict.fromkeys(table.model))
    precisions = list(dict.fromkeys(table.precision))
    fig, axes = plt.subplots(len(precisions), len(models), figsize=(3.6 * len(models), 3.2 * len(precisions)),
                             squeeze=False, layout="constrained")
    ratios = table.karma_over_best_mp.dropna()
    span = max(2.0, float(np.exp(np.abs(np.log(ratios)).max()))) if len(ratios) else 2.0
    norm = LogNorm(1 / span, span)
    image = None
    for i, precision in enumerate(precisions):
        for j, model in enumerate(models):
            ax = axes[i][j]
            grid = table[(table.model == model) & (table.precision == precision)].pivot_table(
                index="nodes", columns="batch_per_gpu", values="karma_over_best_mp", dropna=False)
            ax.set_title(f"{model}, {precision}", fontsize=9)
            if grid.empty:
                ax.set_axis_off()
                continue
            values = grid.to_numpy(dtype=float)
            ax.grid(False)
            image = ax.imshow(values, origin="lower", cmap="RdBu", norm=norm, aspect="auto")
            for (y, x), v in np.ndenumerate(values):
                if np.isfinite(v):
                    ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=6)
            _crossing(ax, values)
            ax.set_xticks(range(len(grid.columns)), [str(b) for b in grid.columns], fontsize=7)
            ax.set_yticks(range(len(grid.index)), [str(n) for n in grid.index], fontsize=7)
            ax.set_xlabel("batch per GPU (sequences)", fontsize=8)
            ax.set_ylabel("nodes", fontsize=8)
    if image is not None:
        from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter  # heavy optional dependency

        bar = fig.colorbar(image, ax=axes, shrink=0.8)
        bar.set_label("KARMA / best Megatron (throughput)", fontsize=8)
        bar.ax.yaxis.set_major_locator(FixedLocator([t for t in (0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7)
                                                     if 1 / span <= t <= span]))
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bar.ax.yaxis.set_minor_formatter(NullFormatter())
    fig.suptitle(f"Where out-of-core data parallel beats model parallelism (>1, blue), simulated on {hardware}; "
                 "blank: one side does not fit", fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)


def memory_vs_batch_figure(table: pd.DataFrame, hardware: str, capacity_gb: float, out: Path) -> None:
    """In-core peak against batch size, a line per model, the device memory as a line."""
    plt = _pyplot()
    import seaborn as sns

    fig, ax = plt.subplots(figsize=(7, 4.2))
    sns.lineplot(data=table, x="batch", y="in_core_peak_GB", hue="model", marker=".", ax=ax)
    paper = table[table.paper_batch]
    ax.scatter(paper.batch, paper.in_core_peak_GB, color="black", marker="x", zorder=3, label="paper batch")
    ax.axhline(capacity_gb, color="grey", ls="--", lw=1)
    ax.text(table.batch.min(), capacity_gb * 1.08, f"{hardware}: {capacity_gb:.0f} GB", fontsize=7, color="grey")
    ax.set(xscale="log", yscale="log", xlabel="batch size (sequences or images)",
           ylabel="in-core peak memory (GB)",
           title=f"Memory of plain training vs batch (simulated: analytic profiles, {hardware})")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, ncol=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150, bbox_inches="tight")
    plt.close(fig)

"""Where data parallel out-of-core training beats hybrid model parallelism: the paper's fourth claim as a map.

The large-NLP comparison (karma/experiments/large_nlp.py) runs at one per-GPU batch, the paper's, where
streaming the weights from the host is amortised over the fewest sequences. Here the same comparison runs
over a grid: per-GPU batch 1, 2, 4, ... up to the largest at which KARMA's planner finds a plan that fits
(or `max_batch`), times the node counts given, for each model and precision. At every point KARMA plans
the model anew at that batch (its own search), and Megatron gets its fastest layout at the same global
batch (karma/parallel/megatron_model.py, tensor-parallel degree, micro-batch, recompute, ZeRO-1). The
ratio is KARMA's sequences/s over the best Megatron layout's; the claim holds where it is above 1.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.experiments.calibration import TOLERANCE
from karma.experiments.large_nlp import KARMA, MEGATRON, ZERO, compare
from karma.profile.analytic import analytic_profile
from karma.strategies import run_strategy
from models.registry import build

COLUMNS = ["model", "hardware", "precision", "batch_per_gpu", "nodes", "gpus", "karma_sequences_per_s",
           "best_mp_sequences_per_s", "best_mp_strategy", "best_mp_layout", "karma_plan", "karma_over_best_mp",
           "status", "source"]


def map_rows(model: str, precision: str, hw: Hardware, nodes: list[int], max_batch: int,
             progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """One row per (per-GPU batch, node count): KARMA over the best Megatron layout. The batch doubles from 1
    until KARMA finds no plan or `max_batch` is passed; a point where either side does not fit keeps the
    reason in `status` and no ratio."""
    rows = []
    batch = 1
    while batch <= max_batch:
        # Megatron-LM's own half layer on both sides in mixed precision, as in the large-NLP comparison
        profile = analytic_profile(build(model, "paper", batch=batch, device="meta", precision=precision), hw,
                                   policy="megatron")
        try:
            plan = run_strategy("karma", profile, hw).plan
        except KarmaError as err:  # no plan fits: the largest batch was the one before
            plan, why = None, str(err)
        else:
            why = "no plan"
        if plan is None:
            if progress:
                progress(f"{model} {precision}: KARMA at batch {batch} per GPU: {why}; the map stops there")
            break
        table = compare(profile, plan, hw, nodes)
        for n, at in table.groupby("nodes", sort=True):
            by = at.set_index("strategy")
            karma = by.loc[KARMA]
            others = by.loc[[MEGATRON, ZERO]].dropna(subset=["sequences_per_s"])
            best = others.sequences_per_s.idxmax() if len(others) else None
            status = "ok"
            if pd.isna(karma.sequences_per_s):
                status = f"KARMA: {karma.status}"
            elif best is None:
                status = f"Megatron: {by.loc[MEGATRON].status}"
            ratio = karma.sequences_per_s / others.sequences_per_s.max() if status == "ok" else None
            rows.append({"model": model, "hardware": hw.name, "precision": precision, "batch_per_gpu": batch,
                         "nodes": n, "gpus": int(karma.gpus), "karma_sequences_per_s": karma.sequences_per_s,
                         "best_mp_sequences_per_s": others.sequences_per_s.max() if best else None,
                         "best_mp_strategy": best, "best_mp_layout": others.layout[best] if best else "",
                         "karma_plan": karma.layout, "karma_over_best_mp": ratio, "status": status,
                         "source": karma.source})
        if progress:
            progress(f"{model} {precision}: batch {batch} per GPU done")
        batch *= 2
    return pd.DataFrame(rows, columns=COLUMNS)


def _spans(values: list[int]) -> str:
    """'1-4, 16' style text of sorted node counts, consecutive members of the grid joined."""
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in values)


def region(table: pd.DataFrame, grid: list[int]) -> str:
    """Where KARMA is faster than the best Megatron layout, in words: per per-GPU batch, the node counts
    (runs of consecutive counts of `grid` joined) where the ratio is above 1, or 'nowhere'; and how many
    points win by more than the cost model's tolerance against published numbers (a smaller margin is within
    its error: results/tables/calibration.md)."""
    compared = table[table.karma_over_best_mp.notna()]
    if not len(compared):
        return "not compared (no point where both fit)"
    parts = []
    for batch, at in compared.groupby("batch_per_gpu", sort=True):
        wins = set(at.nodes[at.karma_over_best_mp > 1])
        runs, start, prev = [], None, None
        for n in [g for g in grid if g in set(at.nodes)]:
            if n in wins:
                start = n if start is None else start
                prev = n
            elif start is not None:
                runs.append((start, prev))
                start = None
        if start is not None:
            runs.append((start, prev))
        if not runs:
            continue
        every = len(wins) == len(at)
        unit = " node" if runs == [(1, 1)] else " nodes"
        parts.append(f"batch {batch}: {'every node count' if every else _spans(runs) + unit}")
    held = int((compared.karma_over_best_mp > 1).sum())
    if not held:
        return f"nowhere ({len(compared)} points compared)"
    clear = int((compared.karma_over_best_mp > 1 + TOLERANCE).sum())
    return (f"{held} of {len(compared)} points ({clear} by more than the calibration's {TOLERANCE:.0%}): "
            + "; ".join(parts))

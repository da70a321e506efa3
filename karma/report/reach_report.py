"""The reach page: our simulated reach per model and strategy, and what other systems publish.

The published rows (karma/data/published_reach.csv) are their systems on their hardware, each
with the paper and the place in it of its number; only numbers whose source text was found are
kept. The table itself comes from karma/experiments/reach.py.
"""

from __future__ import annotations

from importlib import resources

import pandas as pd

from karma.core.hardware import Hardware
from karma.experiments.reach import LIMIT_FACTOR, SEARCH_WORK
from karma.report.markdown import to_markdown


def published() -> pd.DataFrame:
    """Reach that other systems report on their own hardware (karma/data/published_reach.csv: the
    paper and the place in it of every number; only numbers whose source text was found)."""
    with resources.files("karma").joinpath("data/published_reach.csv").open() as f:
        return pd.read_csv(f)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (granularity, model): the in-core batch, the longest reach (and whose), KARMA's reach and speed."""
    rows = []
    for (granularity, model), part in table.groupby(["granularity", "model"], sort=False):
        reached = part[part.reach_batch.notna()]
        best = reached.loc[reached.reach_batch.idxmax()] if len(reached) else None
        karma = part[part.strategy == "karma"]
        k = karma.iloc[0] if len(karma) else None
        rows.append({
            "granularity": granularity,
            "model": model,
            "incore_batch": part.incore_batch.iloc[0],
            "longest_reach": best.reach_batch if best is not None else None,
            "longest_reach_by": ", ".join(reached[reached.reach_batch == best.reach_batch].strategy)
            if best is not None else "none fits",
            "karma_reach": k.reach_batch if k is not None else None,
            "karma_vs_incore": k.vs_incore if k is not None else None,
        })
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, theirs: pd.DataFrame, hw: Hardware, limit_factor: int = LIMIT_FACTOR,
             work: float = SEARCH_WORK) -> str:
    """The reach page: ours (simulated), per model and per strategy, then the published numbers."""
    lines = [
        f"# Reach: the largest batch each strategy trains on `{hw.name}` ({hw.device_memory / 1e9:.0f} GB), "
        "and its speed there",
        "",
        "Our rows are simulated: analytic profiles at each batch (paper-size models), each strategy's plan under "
        "the device memory and the performance model (karma/experiments/reach.py). Batches are images or sequences.",
        "",
        "* `incore_batch`: the largest batch plain (in-core) training fits;",
        "* `reach_batch`: the largest batch the strategy's plan fits, by bisection on the batch: the next batch "
        f"does not fit (KARMA: its planner at work {work} finds no plan there, nor at full budget);",
        f"* `limit_batch`, `limit_hit`: where the search stops ({limit_factor}x `incore_batch`, or of batch 1 when "
        "in-core training does not fit at all) and whether the reach got there (it is then at least that);",
        "* `time_s`: simulated seconds per iteration at the reach; `samples_per_s` = `reach_batch` / `time_s`;",
        "* `vs_incore`: `samples_per_s` over in-core training's at `incore_batch`, from the same simulation; "
        "`vs_incore_Nx`: the same at N x `incore_batch` (blank: beyond the strategy's reach).",
        "* `granularity`: the units (models/chain.py). Layer units run the layer chain's lean layers "
        "(models/lean_layers.py): its ReLUs save a 1-byte mask beside the output the next convolution saves, "
        "so its own in-core batch, the `incore_batch` of its rows, is below the block chain's (PyTorch's layers).",
        "",
        "## Per model (simulated)",
        "",
        to_markdown(summary(table)),
        "",
        "## Every strategy (simulated)",
        "",
        to_markdown(table.drop(columns=["source"])),
        "",
        f"Source: {'; '.join(dict.fromkeys(table.source))}",
        "",
        "## Published reach: their systems on their hardware",
        "",
        "What other out-of-core systems report, each on its own hardware, software and models, against its own "
        "in-core baseline: beside ours, not comparable one to one. Only numbers whose source text we found are "
        "kept (karma/data/published_reach.csv). KARMA's paper (Wahib et al., SC'20, arXiv:2008.11421) reports "
        "speedups at batches beyond the device, not a largest batch: it has no row.",
        "",
        to_markdown(theirs.drop(columns=["our_model"])),
        "",
    ]
    return "\n".join(lines)


def granularity_markdown(rows: pd.DataFrame, hw: Hardware) -> str:
    model, batch = rows.model.iloc[0], rows.batch.iloc[0]
    return "\n".join([
        f"## {model} at batch {batch}, by unit granularity and precision (KARMA, simulated on `{hw.name}`)",
        "",
        "Block units (the paper's), layer units, and `auto`: blocks cut into layers only where a block's backward "
        "alone exceeds the device memory (karma/profile/granularity.py). `vs_incore`: samples/s over in-core "
        "training's "
        "in the same precision at its largest batch (`incore_batch`, block units; fp32's is the table above's). "
        "fp16 is mixed precision (fp16 activations and weights, fp32 master weights and Adam state; "
        "karma/core/precision.py). Hayakawa & Narihira (arXiv:2010.14109) report 55% for this case with their "
        "system on "
        "their V100 (their abstract does not say the precision).",
        "",
        to_markdown(rows),
        "",
    ])

"""One batch past what a block allows, at every unit granularity (issue 16): KARMA's plan of the
same model and batch with block units, layer units and `--granularity auto` (karma/granularity.py),
its simulated time and throughput over in-core training's at its largest batch. The case of the
config is Hayakawa & Narihira's (arXiv:2010.14109): ResNet-50 at batch 1440 on a 16 GB V100, which
they train at 55% of in-core speed with their system on their hardware. Simulated, like the reach
table beside it (karma/reach.py); a granularity at which no plan fits says so."""

from __future__ import annotations

import math

import pandas as pd

from karma.errors import KarmaError
from karma.hardware import Hardware
from karma.planner import plan
from karma.simulate import simulate

GRANULARITIES = ("block", "layer", "auto")
COLUMNS = ["model", "batch", "granularity", "units", "time_s", "peak_GB", "samples_per_s", "vs_incore", "note"]


def granularity_rows(model: str, batch: int, hw: Hardware, incore_samples_per_s: float,
                     precision: str = "fp32", size: str = "paper", log=print) -> pd.DataFrame:
    """Per granularity: units, KARMA's simulated s/iteration and peak, samples/s and their ratio to
    `incore_samples_per_s` (in-core training at its largest batch, from the reach table)."""
    from karma.cli import make_profile
    from karma.granularity import auto_note

    rows = []
    for granularity in GRANULARITIES:
        profile = make_profile(model, size, batch, "analytic", hw.name, precision=precision,
                               granularity=granularity)
        row = {"model": model, "batch": batch, "granularity": granularity, "units": len(profile.units),
               "time_s": math.nan, "peak_GB": math.nan, "samples_per_s": math.nan, "vs_incore": math.nan,
               "note": auto_note(profile)}
        try:
            result = simulate(profile, plan(profile, hw, hw.device_memory), hw, hw.device_memory, record=False)
        except KarmaError as err:
            row["note"] = "; ".join(w for w in (row["note"], str(err)) if w)
        else:
            row.update(time_s=result.time, peak_GB=result.peak_bytes / 1e9, samples_per_s=batch / result.time,
                       vs_incore=batch / result.time / incore_samples_per_s)
        log(f"{model} batch {batch} ({granularity}, {row['units']} units): {row['time_s']:.3f} s/iteration "
            f"{row['note']}")
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def incore_throughput(table: pd.DataFrame, model: str) -> float:
    """In-core samples/s at the largest in-core batch of `model`'s block chain in the reach table (nan if absent)."""
    rows = table[(table.model == model) & (table.strategy == "incore") & (table.granularity == "block")]
    return float(rows.samples_per_s.iloc[0]) if len(rows) else math.nan


def markdown(rows: pd.DataFrame, hw: Hardware) -> str:
    from karma.tables import to_markdown

    model, batch = rows.model.iloc[0], rows.batch.iloc[0]
    return "\n".join([
        f"## {model} at batch {batch}, by unit granularity (KARMA, simulated on `{hw.name}`)",
        "",
        "Block units (the paper's), layer units, and `auto`: blocks cut into layers only where a block's backward "
        "alone exceeds the device memory (karma/granularity.py). `vs_incore`: samples/s over in-core training's at "
        "its largest batch (block units, the table above). Hayakawa & Narihira (arXiv:2010.14109) report 55% for "
        "this case with their system on their V100.",
        "",
        to_markdown(rows),
        "",
    ])

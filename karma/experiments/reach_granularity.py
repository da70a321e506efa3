"""One batch past what a block allows, at every unit granularity (docs/reach.md): KARMA's plan of the
same model and batch with block units, layer units and `--granularity auto` (karma/profile/granularity.py),
its simulated time and throughput over in-core training's at its largest batch. The case of the
config is Hayakawa & Narihira's (arXiv:2010.14109): ResNet-50 at batch 1440 on a 16 GB V100, which
they train at 55% of in-core speed with their system on their hardware. Their abstract does not say
the precision, so the case runs in each precision of the config (`precisions`), each against in-core
training in that precision at its own largest batch: fp32 (the reach table's reference) and mixed
precision (fp16 activations halve what a layer saves, karma/core/precision.py). Simulated, like the reach
table beside it (karma/experiments/reach.py); a granularity at which no plan fits says so."""

from __future__ import annotations

import math

import pandas as pd

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.experiments.reach import outcome, search, zoo_batches
from karma.planner.planner import plan
from karma.profile.build import make_profile
from karma.profile.granularity import auto_note
from karma.sim.simulate import simulate
from models.registry import spec

GRANULARITIES = ("block", "layer", "auto")
COLUMNS = ["model", "batch", "precision", "granularity", "units", "time_s", "peak_GB", "samples_per_s",
           "incore_batch", "incore_samples_per_s", "vs_incore", "note"]


def granularity_rows(model: str, batch: int, hw: Hardware, incore_samples_per_s: float,
                     precision: str = "fp32", size: str = "paper", log=print,
                     incore_batch: int | None = None) -> pd.DataFrame:
    """Per granularity: units, KARMA's simulated s/iteration and peak, samples/s and their ratio to
    `incore_samples_per_s` (in-core training in `precision` at its largest batch, `incore_batch`:
    the reach table's, or `incore_reference`'s)."""
    rows = []
    for granularity in GRANULARITIES:
        profile = make_profile(model, size, batch, "analytic", hw.name, precision=precision,
                               granularity=granularity)
        row = {"model": model, "batch": batch, "precision": precision, "granularity": granularity,
               "units": len(profile.units), "time_s": math.nan, "peak_GB": math.nan, "samples_per_s": math.nan,
               "incore_batch": incore_batch, "incore_samples_per_s": incore_samples_per_s, "vs_incore": math.nan,
               "note": auto_note(profile)}
        try:
            result = simulate(profile, plan(profile, hw, hw.device_memory), hw, hw.device_memory, record=False)
        except KarmaError as err:
            row["note"] = "; ".join(w for w in (row["note"], str(err)) if w)
        else:
            row.update(time_s=result.time, peak_GB=result.peak_bytes / 1e9, samples_per_s=batch / result.time,
                       vs_incore=batch / result.time / incore_samples_per_s)
        log(f"{model} batch {batch} {precision} ({granularity}, {row['units']} units): {row['time_s']:.3f} s/iteration "
            f"{row['note']}")
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


def _incore_row(table: pd.DataFrame, model: str) -> pd.DataFrame:
    return table[(table.model == model) & (table.strategy == "incore") & (table.granularity == "block")]


def incore_throughput(table: pd.DataFrame, model: str) -> float:
    """In-core samples/s at the largest in-core batch of `model`'s block chain in the reach table (nan if absent)."""
    rows = _incore_row(table, model)
    return float(rows.samples_per_s.iloc[0]) if len(rows) else math.nan


def incore_batch(table: pd.DataFrame, model: str) -> int | None:
    """The largest in-core batch of `model`'s block chain in the reach table (None if absent)."""
    rows = _incore_row(table, model)
    return int(rows.reach_batch.iloc[0]) if len(rows) and not pd.isna(rows.reach_batch.iloc[0]) else None


def incore_reference(model: str, hw: Hardware, precision: str, size: str = "paper",
                     limit: int = 1 << 14) -> tuple[int | None, float]:
    """(largest in-core batch, its samples/s) of `model`'s block chain in `precision`, found like the
    reach table's (karma.experiments.reach.search on analytic profiles, simulated); (None, nan) when batch 1 does
    not fit."""
    batches = zoo_batches(model, hw, "block", precision, size)
    largest, _ = search("incore", batches, hw, hw.device_memory, limit, guess=spec(model).batch[size])
    if largest is None:
        return None, math.nan
    done = outcome("incore", batches.exact(largest), hw, hw.device_memory)
    return largest, (largest / done.time if done.time else math.nan)


def case_rows(model: str, batch: int, precisions: list[str], hw: Hardware, table: pd.DataFrame,
              table_precision: str, size: str = "paper", log=print) -> pd.DataFrame:
    """`granularity_rows` per precision, each against in-core training in it: the reach table's own reference
    in `table_precision`, `incore_reference` in any other."""
    parts = []
    for precision in precisions:
        if precision == table_precision:
            largest, speed = incore_batch(table, model), incore_throughput(table, model)
        else:
            largest, speed = incore_reference(model, hw, precision, size)
        log(f"{model} in-core in {precision} (simulated on {hw.name}): largest batch {largest}, "
            f"{speed:.1f} samples/s")
        parts.append(granularity_rows(model, batch, hw, speed, precision=precision, size=size, log=log,
                                      incore_batch=largest))
    return pd.concat(parts, ignore_index=True)

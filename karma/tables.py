"""Tables the pipeline writes, built from profiles (pandas DataFrames).

Every row names its source (DESIGN.md, "Measured versus simulated"): analytic
rows are *simulated* on a Hardware preset, measured rows were *measured* on a
named device.
"""

from __future__ import annotations

import pandas as pd

from karma.hardware import Hardware
from karma.profile import Profile

GB = 1e9


def footprint_rows(profiles: list[Profile], hw: Hardware) -> pd.DataFrame:
    """Per model at paper size: parameters, memory of plain training vs the device, compute time."""
    rows = []
    for p in profiles:
        peak = p.in_core_peak_bytes()
        rows.append({
            "model": p.model,
            "batch": p.batch,
            "params_M": p.param_bytes() / 4 / 1e6,
            "weights_grads_optimizer_GB": p.weight_state_bytes() / GB,
            "activations_GB": p.activation_bytes() / GB,
            "in_core_peak_GB": peak / GB,
            "device_GB": hw.device_memory / GB,
            "times_over_capacity": peak / hw.device_memory,
            "fwd_bwd_s": p.forward_time() + p.backward_time(),
            "fwd_GFLOP": sum(u.forward_flops for u in p.units) / 1e9,
            "source": p.label,
        })
    return pd.DataFrame(rows)


def measured_rows(profiles: list[Profile]) -> pd.DataFrame:
    """Per model at the small size, timed on this machine."""
    rows = []
    for p in profiles:
        rows.append({
            "model": p.model,
            "size": p.size,
            "batch": p.batch,
            "units": len(p.units),
            "fwd_ms": p.forward_time() * 1e3,
            "bwd_ms": p.backward_time() * 1e3,
            "bwd_over_fwd": p.backward_time() / p.forward_time(),
            "activations_MB": p.activation_bytes() / 1e6,
            "in_core_peak_MB": p.in_core_peak_bytes() / 1e6,
            "achieved_GFLOP_s": sum(u.forward_flops + u.backward_flops for u in p.units)
            / (p.forward_time() + p.backward_time()) / 1e9,
            "source": p.label,
        })
    return pd.DataFrame(rows)


def to_markdown(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    return df.to_markdown(index=False, floatfmt=floatfmt)


def markdown_report(title: str, intro: list[str], table: pd.DataFrame) -> str:
    """A titled Markdown page: intro lines, the table, its source (a column of its own when rows differ)."""
    sources = list(dict.fromkeys(table.source)) if "source" in table else []
    if len(sources) > 1:
        return "\n".join([f"# {title}", "", *intro, "", to_markdown(table)]) + "\n"
    body = to_markdown(table.drop(columns=["source"], errors="ignore"))
    return "\n".join([f"# {title}", "", *intro, "", body, "", f"Source: {sources[0] if sources else ''}"]) + "\n"

"""Tables the pipeline writes, built from profiles (pandas DataFrames).

Every row names its source (docs/design.md, "Measured versus simulated"): analytic
rows are *simulated* on a Hardware preset, measured rows were *measured* on a
named device.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from karma.core.hardware import Hardware
from karma.experiments.scaling import interpolate
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from karma.report.markdown import to_markdown
from karma.runtime.emulation import TERM_SLUGS
from karma.sim.simulate import in_core_peak_bytes
from models.registry import build

GB = 1e9


def footprint_rows(profiles: list[Profile], hw: Hardware) -> pd.DataFrame:
    """Per model at paper size: parameters, memory of plain training vs the device, compute time."""
    rows = []
    for p in profiles:
        peak = in_core_peak_bytes(p)
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
            # a recompute over the forward it repeats, every unit recomputed as the last of its segment / inside one
            "recompute_last_over_fwd": sum(u.recompute_time(True) for u in p.units) / p.forward_time(),
            "recompute_inner_over_fwd": sum(u.recompute_time(False) for u in p.units) / p.forward_time(),
            "activations_MB": p.activation_bytes() / 1e6,
            "in_core_peak_MB": in_core_peak_bytes(p) / 1e6,
            "achieved_GFLOP_s": sum(u.forward_flops + u.backward_flops for u in p.units)
            / (p.forward_time() + p.backward_time()) / 1e9,
            "source": p.label,
        })
    return pd.DataFrame(rows)


def memory_vs_batch(profiles: list[Profile], hw: Hardware, points: int = 12) -> pd.DataFrame:
    """In-core peak of each model from batch 1 to 1.5x its paper batch: exact at batch 1 and at the
    paper batch (analytic profiles), linear between and beyond (karma.experiments.scaling.interpolate)."""
    rows = []
    for big in profiles:
        one = analytic_profile(build(big.model, big.size, 1, device="meta"), hw)
        if big.batch == 1:  # one point only: nothing to draw a line through
            rows.append({"model": big.model, "batch": 1, "in_core_peak_GB": in_core_peak_bytes(big) / 1e9,
                         "paper_batch": True, "source": f"simulated: analytic profile on {hw.name}"})
            continue
        top = int(big.batch * 1.5)
        batches = sorted(set(np.unique(np.geomspace(1, top, points).round().astype(int)).tolist()) | {big.batch})
        for b in batches:
            peak = in_core_peak_bytes(interpolate(one, big, b)) if b != 1 else in_core_peak_bytes(one)
            rows.append({"model": big.model, "batch": b, "in_core_peak_GB": peak / 1e9, "paper_batch": b == big.batch,
                         "source": f"simulated: analytic profiles on {hw.name} at batch 1 and {big.batch}, "
                                   f"linear in the batch between and beyond"})
    return pd.DataFrame(rows)


def step_terms_rows(runtime: pd.DataFrame) -> pd.DataFrame:
    """Long form of the runtime table's step terms (karma/runtime/attribution.py): per model, strategy and
    term, the last timed step's seconds, the prediction's at that repeat's processor speed, their difference
    and its share of the step's difference (the terms add up to the step on both sides)."""
    rows = []
    for r in runtime.itertuples():
        if pd.isna(getattr(r, "forward_measured_s", np.nan)):
            continue
        measured = {t: getattr(r, f"{s}_measured_s") for t, s in TERM_SLUGS.items()}
        predicted = {t: getattr(r, f"{s}_predicted_s") for t, s in TERM_SLUGS.items()}
        gap = sum(measured.values()) - sum(predicted.values())
        for term in TERM_SLUGS:
            diff = measured[term] - predicted[term]
            rows.append({"model": r.model, "strategy": r.strategy, "term": term, "measured_s": measured[term],
                         "predicted_s": predicted[term], "difference_s": diff,
                         "share_of_step_difference": diff / gap if gap else 0.0,
                         "processor_speed": r.terms_processor_speed})
    return pd.DataFrame(rows, columns=["model", "strategy", "term", "measured_s", "predicted_s", "difference_s",
                                       "share_of_step_difference", "processor_speed"])


def step_terms_markdown(terms: pd.DataFrame) -> str:
    """Per model, a strategy a row: the step's difference from its prediction and each term's part (ms)."""
    parts = ["# Where measured steps differ from their predictions, term by term", "",
             "Each strategy's last timed step on the emulated device against the simulator's prediction at that",
             "repeat's processor speed (karma/runtime/drift.py), split along the compute queue into forward,",
             "backward with recomputes, the device optimizer, waits between compute operations (stalls on",
             "copies), and the time before the first and after the last compute operation",
             "(karma/runtime/attribution.py; `karma run MODEL --explain` for one plan). Milliseconds, measured",
             "minus predicted; the terms add up to the step's difference.", ""]
    for model, part in terms.groupby("model", sort=False):
        wide = part.pivot(index="strategy", columns="term", values="difference_s")[list(TERM_SLUGS)] * 1e3
        wide.insert(0, "step", wide.sum(axis=1))
        wide = wide.reindex(list(dict.fromkeys(part.strategy))).reset_index()
        parts += [f"## {model}", "", to_markdown(wide, floatfmt=".1f"), ""]
    return "\n".join(parts)


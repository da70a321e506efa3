"""Weak scaling of out-of-core data parallel training, simulated (KARMA Sec. VI-C).

Each GPU keeps the per-GPU batch of the single-GPU experiment; KARMA's single-GPU
plan runs on every rank with its gradients all-reduced per block from host buffers and
the updates on the host (Sec. V), pipelined with the backward or after it (naive).
The comparison is in-core data parallel at the largest
per-GPU batch that fits the device (all activations kept, per-block all-reduce
overlapped with the backward as PyTorch DDP does). Throughput = GPUs x batch /
iteration time; efficiency = throughput / (GPUs x the same strategy's one-GPU
throughput); efficiency_vs_node = throughput / (nodes x one whole node's throughput): the scaling
across nodes, where a node's ranks already share its host (karma/sim/simulate.py, host_memory_time).

Profiles at other batch sizes are interpolated linearly per unit between the
analytic profiles at batch 1 and at the paper batch: activation bytes, FLOPs and
traffic are linear in the batch, weights are not; times are near linear (the
roofline is exact at both ends).
"""

from __future__ import annotations

from dataclasses import fields, replace

import pandas as pd

from karma.core.hardware import Hardware
from karma.plan.plan import Plan, from_policies
from karma.profile.profile import Profile, UnitProfile
from karma.sim.simulate import simulate

CONSTANT = {"name", "param_bytes", "buffer_bytes", "optimizer_bytes", "tied_param_bytes", "shared_param_bytes"}


def interpolate(one: Profile, big: Profile, batch: int) -> Profile:
    """The profile at `batch`, linear per unit between batch 1 and `big.batch`."""
    w = (batch - 1) / (big.batch - 1) if big.batch > 1 else 0.0
    units = []
    for a, b in zip(one.units, big.units, strict=True):
        values = {}
        for f in fields(UnitProfile):
            x, y = getattr(a, f.name), getattr(b, f.name)
            if f.name in CONSTANT or f.name == "boundary_saved":
                values[f.name] = y
            elif f.name == "holdout":  # a second estimate of the times, interpolated as they are
                values[f.name] = tuple(p + (q - p) * w for p, q in zip(x, y, strict=True)) if len(x) == len(y) else y
            elif f.name == "boundary_out":  # storage ids stay, their bytes scale with the batch
                values[f.name] = tuple((sid, round(m + (n - m) * w)) for (sid, m), (_, n) in zip(x, y, strict=True))
            else:
                v = x + (y - x) * w
                values[f.name] = round(v) if isinstance(y, int) else v
        units.append(UnitProfile(**values))
    return replace(big, batch=batch, units=tuple(units))


def largest_in_core_batch(one: Profile, big: Profile, hw: Hardware) -> int | None:
    """Largest per-GPU batch whose all-keep plan fits the device (None: not even batch 1)."""

    def fits(batch: int) -> bool:
        p = interpolate(one, big, batch)
        plan = from_policies(p.model, batch, ["keep"] * len(p.units))
        return simulate(p, plan, hw, record=False).feasible

    if not fits(1):
        return None
    lo, hi = 1, big.batch
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def sweep(one: Profile, big: Profile, karma: Plan, hw: Hardware, gpu_counts: list[int]) -> pd.DataFrame:
    """Rows per (GPU count, strategy): time, throughput, scaling efficiency, source."""
    cases = [("karma out-of-core, pipelined", big, karma, "pipelined", True),
             ("karma out-of-core, naive", big, karma, "naive", True)]
    incore = largest_in_core_batch(one, big, hw)
    if incore is not None:
        p = interpolate(one, big, incore)
        cases.append(("in-core data parallel", p, from_policies(p.model, incore, ["keep"] * len(p.units)),
                      "pipelined", False))
    rows = []
    for label, profile, plan, order, host_updates in cases:
        base = node = None
        for gpus in gpu_counts:
            result = simulate(profile, plan, hw, gpus=gpus, order=order, record=False, host_updates=host_updates)
            throughput = gpus * profile.batch / result.time if result.feasible else None
            if gpus == 1:
                base = throughput
            if gpus == hw.gpus_per_node:
                node = throughput
            rows.append({
                "model": profile.model, "strategy": label, "gpus": gpus,
                "nodes": max(1, gpus // hw.gpus_per_node), "batch_per_gpu": profile.batch,
                "time_s": result.time, "samples_per_s": throughput,
                "efficiency": throughput / (gpus * base) if (throughput and base) else None,
                # across nodes: against one whole node, whose ranks share its host (host_memory_time)
                "efficiency_vs_node": (throughput / (gpus / hw.gpus_per_node * node)
                                       if (throughput and node and gpus >= hw.gpus_per_node) else None),
                "network_busy_s": result.busy.get("network", 0.0),
                "source": f"simulated on {hw.name} (analytic profile)",
            })
    if incore is None:
        rows.append({"model": big.model, "strategy": "in-core data parallel", "gpus": None, "nodes": None,
                     "batch_per_gpu": 0, "time_s": None, "samples_per_s": None, "efficiency": None,
                     "efficiency_vs_node": None,
                     "network_busy_s": None, "source": "OOM: the weights and optimizer state alone exceed the device"})
    return pd.DataFrame(rows)

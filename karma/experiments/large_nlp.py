"""Large NLP models: KARMA's out-of-core data parallel vs Megatron hybrid model parallel (KARMA Sec. VI-D).

The paper's claim: data parallel out-of-core training (weights streamed from the host,
updates on the host, gradients all-reduced per block) is faster than hybrid model
parallelism for Megatron-LM 2.5B/8.3B and Turing-NLG 17B. Both sides are simulated at
the *same global batch* on the same nodes:

* KARMA: every GPU trains the model's paper batch with KARMA's single-GPU plan, the
  per-block all-reduce pipelined with the backward (karma/sim/simulate.py, ``gpus``);
* Megatron hybrid (TP x DP) and Megatron + ZeRO-1: the fastest feasible layout of
  karma/parallel/megatron_model.py (tensor-parallel degree, micro-batch with gradient
  accumulation, activation checkpointing), so the baseline gets its best configuration.

Throughput is sequences/s. TFLOP/s per GPU follow Megatron-LM's convention: the FLOPs each
GPU executes, the recomputed forwards included (activation checkpointing re-runs each
layer's forward; Megatron-LM's 1.2B baseline counts 80 TFLOP per iteration of batch 8,
62.4 TFLOP/s x 1.288 s in its v1.0 report, which is the recompute-inclusive count), so a
layout that recomputes shows more TFLOP/s for the same throughput: compare sequences/s.
`model_tflops_per_gpu` counts the model's forward and backward only (no recompute).

Both sides run in the profile's precision; in fp16 both run Megatron-LM's own half layer
(karma.core.precision.MetaAutocast 'megatron': the softmax on 16-bit scores, the mask as its
code applies it), as Megatron-LM trained, so the two sides differ only in how they
parallelise and where they keep the training state.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from karma.core.hardware import Hardware
from karma.core.precision_bytes import precision_of
from karma.experiments.speedups import geomean
from karma.parallel.megatron_model import best_layout, layout_flops, recompute_flops
from karma.plan.plan import Plan
from karma.profile.profile import Profile
from karma.sim.simulate import simulate

KARMA = "karma data parallel (out-of-core)"
MEGATRON = "megatron hybrid (TP x DP)"
ZERO = "megatron + ZeRO-1"
STRATEGIES = (KARMA, MEGATRON, ZERO)


def flops_per_sequence(profile: Profile) -> float:
    return sum(u.forward_flops + u.backward_flops for u in profile.units) / profile.batch


def plan_flops(profile: Profile, plan: Plan) -> float:
    """FLOPs one GPU executes per iteration of `plan`: forward and backward of every unit, and the
    forward again of every unit in a recompute block (Megatron-LM's convention)."""
    recomputed = [profile.units[i].name for b in plan.blocks if b.policy == "recompute" for i in b.units]
    return recompute_flops(profile, recomputed)


def host_bytes_per_node(profile: Profile) -> float:
    """KARMA's host memory: the weights as uploaded and their gradients (16-bit in mixed precision),
    plus the optimizer's bytes (fp32 state, and fp32 masters of 16-bit weights), one copy per node
    (the node's GPUs hold the same weights after each all-reduce). In fp32: (2 + k) x the weights."""
    return 2 * profile.param_bytes() + sum(u.optimizer_bytes for u in profile.units)


def plan_summary(plan: Plan) -> str:
    """E.g. '56 blocks (54 recompute, 2 keep), weights streamed'."""
    counts = Counter(b.policy for b in plan.blocks)
    kinds = ", ".join(f"{n} {policy}" for policy, n in counts.most_common())
    return f"{len(plan.blocks)} blocks ({kinds}), weights {plan.weights}"


def compare(profile: Profile, karma: Plan, hw: Hardware, nodes: list[int], progress=None) -> pd.DataFrame:
    """One row per (node count, strategy); infeasible rows keep their reason in `status`."""
    per_seq = flops_per_sequence(profile)
    karma_flops = plan_flops(profile, karma)  # per GPU per iteration, with its recompute
    precision = precision_of(profile.dtype)  # Megatron runs in the precision KARMA's profile was made in
    source = (f"simulated on {hw.name} in {precision} (analytic profile; figures: karma/presets/{hw.name}.yaml); "
              "TFLOP/s per GPU count the recompute (Megatron-LM's convention)")
    rows = []
    for n in nodes:
        gpus = n * hw.gpus_per_node
        global_batch = gpus * profile.batch
        base = {"model": profile.model, "hardware": hw.name, "precision": precision, "nodes": n, "gpus": gpus,
                "global_batch": global_batch}
        sim = simulate(profile, karma, hw, gpus=gpus, order="pipelined", record=False)
        cases = [(KARMA, sim.time, sim.peak_bytes, plan_summary(karma), sim.reason, karma_flops)]
        for label, zero in ((MEGATRON, False), (ZERO, True)):
            best, why = best_layout(profile.model, hw, gpus, global_batch, zero, precision=precision)
            flops = layout_flops(profile.model, best.layout, hw) if best else None
            cases.append((label, best.time if best else None, best.peak_bytes if best else None,
                          best.layout.label() if best else "", why or None, flops))
        for label, time, peak, layout, reason, flops in cases:
            rows.append({**base, "strategy": label, "layout": layout, "time_s": time,
                         "sequences_per_s": global_batch / time if time else None,
                         "tflops_per_gpu": flops / time / 1e12 if time else None,
                         "model_tflops_per_gpu": per_seq * global_batch / time / gpus / 1e12 if time else None,
                         "peak_gb": peak / 1e9 if peak else None,
                         "host_gb_per_node": host_bytes_per_node(profile) / 1e9 if label == KARMA else None,
                         "status": reason or "ok", "source": source})
        if progress:
            progress(n)
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (model, hardware): the smallest node count each strategy needs, and KARMA's throughput over
    the best Megatron layout at every node count where both run (geomean, min, max)."""
    rows = []
    for (model, hw), g in table.groupby(["model", "hardware"], sort=False):
        wide = g.pivot(index="nodes", columns="strategy", values="sequences_per_s")
        mp = wide[[MEGATRON, ZERO]].max(axis=1)
        ratio = (wide[KARMA] / mp).dropna()
        smallest = {s: (wide.index[wide[s].notna()].min() if wide[s].notna().any() else None) for s in STRATEGIES}
        rows.append({"model": model, "hardware": hw,
                     "precision": g.precision.iloc[0] if "precision" in g else "fp32",
                     "karma_min_nodes": smallest[KARMA], "megatron_min_nodes": smallest[MEGATRON],
                     "zero_min_nodes": smallest[ZERO],
                     "karma_over_best_mp_geomean": geomean(ratio) if len(ratio) else None,
                     "karma_over_best_mp_min": ratio.min() if len(ratio) else None,
                     "karma_over_best_mp_max": ratio.max() if len(ratio) else None,
                     "node_counts_compared": len(ratio),
                     "source": g.source.iloc[0]})
    return pd.DataFrame(rows)


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """KARMA's sequences/s over the best feasible Megatron layout's, per (model, hardware, node count)."""
    wide = table.pivot_table(index=["model", "hardware", "nodes", "gpus"], columns="strategy",
                             values="sequences_per_s").reset_index()
    for s in STRATEGIES:
        if s not in wide:
            wide[s] = float("nan")
    wide["karma_over_best_mp"] = wide[KARMA] / wide[[MEGATRON, ZERO]].max(axis=1)
    return wide[wide.karma_over_best_mp.notna()]

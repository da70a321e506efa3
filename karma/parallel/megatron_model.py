"""The cost model of Megatron hybrid parallelism (tensor parallel x data parallel), simulated.

A layout is ``tp`` x ``dp`` ranks: every data-parallel replica trains ``micro_batch``
sequences with its transformer layers split over ``tp`` ranks (karma/parallel/tensor_parallel.py).
One rank of it is simulated with the same event simulator as the out-of-core plans
(karma/sim/simulate.py), on the profile of one rank's *shard* of the model:

* compute and memory: the analytic profile of rank 0's shard chain on the meta device
  (TPLayer: 1/tp of the GEMM and attention FLOPs and weights; LayerNorm, residuals,
  dropout replicated -- Megatron-LM Sec. 3);
* tensor-parallel communication: Megatron's f/g all-reduces are synchronous on the
  critical path, so their time is added to the unit that issues them: per layer two
  all-reduces of a (micro_batch, seq, hidden) tensor (fp32, or 16-bit in mixed precision) in the forward (and again in
  a recompute) and two in the backward; with the embedding split over the vocabulary
  (``vocab_parallel``, as Megatron) one more in the embedding's forward, one in the
  head's backward and three of (micro_batch, seq) floats for the parallel
  cross-entropy (max, sum of exponentials, target logit);
* data-parallel gradient all-reduce across the replicas, per block as soon as its
  backward ends (PyTorch DDP's overlap; generous to the baseline: Megatron-LM 2019
  all-reduced after the backward), the tp ranks of a node sharing its network links;
* activation checkpointing of every layer (Megatron's ``checkpoint-activations``) as a
  plan of one-layer recompute blocks; ZeRO stage 1 (optimizer state partitioned over
  the data-parallel replicas, Rajbhandari et al. SC'20) divides the optimizer state and
  the optimizer step by dp, with the same communication volume as the all-reduce.

Placement: a tensor-parallel group divides a node's GPUs or spans whole nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.core.precision import to_precision
from karma.parallel.tensor_parallel import shard_chain
from karma.plan.plan import Plan, from_policies
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from karma.sim.network import allreduce_time, ring
from karma.sim.simulate import optimizer_traffic_bytes, simulate
from models.registry import build, spec


@dataclass(frozen=True)
class Layout:
    """One Megatron configuration: each data-parallel replica runs `accumulation` passes of
    `micro_batch` sequences (gradient accumulation) per optimizer step."""

    tp: int
    dp: int
    micro_batch: int
    accumulation: int = 1
    recompute: bool = False
    zero: bool = False
    vocab_parallel: bool = True
    precision: str = "fp32"  # or mixed precision 'fp16' / 'bf16' (Megatron-LM 2019 trained in fp16)

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    def label(self) -> str:
        extras = [x for x, on in (("recompute", self.recompute), ("ZeRO-1", self.zero),
                                  (self.precision, self.precision != "fp32")) if on]
        accumulate = f"x{self.accumulation}" if self.accumulation > 1 else ""
        return f"tp={self.tp} dp={self.dp} mb={self.micro_batch}{accumulate}" + "".join(f" +{x}" for x in extras)

    @property
    def replica_batch(self) -> int:
        return self.micro_batch * self.accumulation


@dataclass(frozen=True)
class LayoutResult:
    """One simulated iteration of a layout (time None when it does not fit, `reason` says why)."""

    layout: Layout
    time: float | None
    peak_bytes: float
    tp_comm_s: float
    reason: str | None = None


def places(tp: int, hw: Hardware) -> bool:
    """A tensor-parallel group divides a node's GPUs or spans whole nodes."""
    g = hw.gpus_per_node
    return g % tp == 0 or tp % g == 0


def check_placement(tp: int, hw: Hardware) -> None:
    g = hw.gpus_per_node
    if not places(tp, hw):
        raise KarmaError(f"a tensor-parallel group of {tp} neither divides a {hw.name} node of {g} GPUs "
                         f"nor spans whole nodes")


def tp_allreduce_time(nbytes: float, tp: int, hw: Hardware) -> float:
    """One all-reduce inside a tensor-parallel group: NVLink ring in a node, hierarchical across nodes."""
    if tp <= hw.gpus_per_node:
        return ring(nbytes, tp, hw.intra_node_bw, hw.intra_node_latency)
    return allreduce_time(nbytes, hw, tp)


def dp_view(hw: Hardware, tp: int) -> Hardware:
    """The Hardware as seen by one data-parallel group: a node holds gpus_per_node/tp of its ranks
    (one, when tp spans nodes) and the node's tp concurrent groups share its network."""
    g = hw.gpus_per_node
    concurrent = min(tp, g)
    return replace(hw, gpus_per_node=max(1, g // tp), inter_node_bw=hw.inter_node_bw / concurrent)


@lru_cache(maxsize=64)
def shard_profile(model: str, size: str, batch: int, tp: int, hw: Hardware, vocab_parallel: bool,
                  precision: str = "fp32") -> Profile:
    """Analytic profile (compute and memory only) of rank 0's shard chain at `batch`, in `precision`
    (mixed precision: 16-bit weights, activations and all-reduces, fp32 masters; karma/core/precision.py;
    the attention softmax in 16 bits, as Megatron-LM's half model runs it: MetaAutocast 'megatron')."""
    vocab = spec(model).sizes[size]["vocab"]
    overrides = {"vocab": math.ceil(vocab / tp)} if vocab_parallel and tp > 1 else None
    chain = build(model, size, batch, device="meta", overrides=overrides, precision=precision)
    shard = shard_chain(chain, 0, tp, None)
    to_precision(shard.units, precision)
    return analytic_profile(shard, hw, policy="megatron")


def with_tp_comm(profile: Profile, tp: int, allreduce, vocab_parallel: bool, hidden: int) -> tuple[Profile, float]:
    """`profile` with the tensor-parallel all-reduces added to the units that issue them (see the
    module docstring); `allreduce(nbytes)` is seconds per all-reduce. Also returns the total."""
    if tp == 1:
        return profile, 0.0
    units, total = [], 0.0
    for u in profile.units:
        fwd = bwd = 0.0
        if u.name.startswith("layer"):
            fwd, bwd = 2 * allreduce(u.input_bytes), 2 * allreduce(u.input_bytes)
        elif vocab_parallel and u.name == "embedding":
            fwd = allreduce(u.output_bytes)
        elif vocab_parallel and u.name == "head":
            fwd, bwd = 3 * allreduce(u.input_bytes / hidden), allreduce(u.input_bytes)
        total += fwd + bwd
        units.append(replace(u, forward_time=u.forward_time + fwd, backward_time=u.backward_time + bwd))
    return replace(profile, units=tuple(units), note=profile.note + f"; + tensor-parallel all-reduces (tp={tp})"), total


def layout_plan(profile: Profile, recompute: bool) -> Plan:
    """All activations kept, or Megatron's checkpoint-activations: each layer a recompute block."""
    labels = ["recompute" if recompute and u.name.startswith("layer") else "keep" for u in profile.units]
    return from_policies(profile.model, profile.batch, labels, segments=list(range(len(labels))),
                         strategy="megatron")


def simulate_layout(model: str, layout: Layout, hw: Hardware, size: str = "paper",
                    order: str = "pipelined") -> LayoutResult:
    """Simulate one rank of `layout` on `hw` nodes (analytic profile); `order='naive'` all-reduces the
    data-parallel gradients after the backward, as Megatron-LM 2019 did."""
    check_placement(layout.tp, hw)

    profile = shard_profile(model, size, layout.micro_batch, layout.tp, hw, layout.vocab_parallel, layout.precision)
    timed, comm = _timed_shard(profile, layout.tp, hw, layout.vocab_parallel, spec(model).sizes[size]["hidden"])
    return _simulate_timed(timed, comm, layout, dp_view(hw, layout.tp), order)


@lru_cache(maxsize=256)
def _timed_shard(profile: Profile, tp: int, hw: Hardware, vocab_parallel: bool, hidden: int) -> tuple[Profile, float]:
    """`with_tp_comm` on `hw`'s links, once per shard, degree and machine: a layout search simulates the same
    shard at every data-parallel degree, micro-batch count, recompute choice and ZeRO setting."""
    return with_tp_comm(profile, tp, lambda n: tp_allreduce_time(n, tp, hw), vocab_parallel, hidden)


def simulate_shard(profile: Profile, layout: Layout, allreduce, dp_hw: Hardware, hidden: int,
                   order: str = "pipelined") -> LayoutResult:
    """The shared core: fold the tensor-parallel all-reduces into `profile`, shard the optimizer state
    with ZeRO, simulate with data-parallel all-reduces on `dp_hw` (per block during the backward,
    or all after it with `order='naive'`)."""
    timed, comm = with_tp_comm(profile, layout.tp, allreduce, layout.vocab_parallel, hidden)
    return _simulate_timed(timed, comm, layout, dp_hw, order)


def _simulate_timed(timed: Profile, comm: float, layout: Layout, dp_hw: Hardware, order: str) -> LayoutResult:
    """`simulate_shard` after the tensor-parallel all-reduces are in `timed` (`comm` seconds of them)."""
    if layout.zero:
        timed = replace(timed, units=tuple(replace(u, optimizer_bytes=u.optimizer_bytes // layout.dp)
                                           for u in timed.units))
    plan = layout_plan(timed, layout.recompute)
    shards = layout.dp if layout.zero else 1
    sim = simulate(timed, plan, dp_hw, gpus=layout.dp, order=order, host_updates=False, optimizer_shards=shards,
                   record=False)
    passes = layout.accumulation
    if passes == 1:
        return LayoutResult(layout, sim.time, sim.peak_bytes, comm, sim.reason)
    # Gradient accumulation: passes-1 more forward+backward passes without all-reduce or optimizer
    # step; the gradient buffer now lives through their forwards too.
    alone = simulate(timed, plan, dp_hw, gpus=1, host_updates=False, optimizer_shards=shards, record=False)
    state = sum(u.optimizer_bytes for u in timed.units) * shards  # all of it, for the masters' size
    step = optimizer_traffic_bytes(timed.param_bytes(), timed.optimizer, state) / shards / dp_hw.memory_bw
    peak = sim.peak_bytes + timed.param_bytes()
    reason = sim.reason or (None if peak <= dp_hw.device_memory else
                            f"needs {peak / 1e9:.3f} GB with the accumulated gradients, "
                            f"{dp_hw.device_memory / 1e9:.3f} GB available")
    time = None if reason else sim.time + (passes - 1) * (alone.makespan - step)
    return LayoutResult(layout, time, peak, comm * passes, reason)


def recompute_flops(profile: Profile, recomputed) -> float:
    """FLOPs of one iteration of `profile` counting the recompute, as Megatron-LM reports them: forward
    and backward of every unit plus the forward again of each unit in `recomputed` (names)."""
    names = set(recomputed)
    return sum(u.forward_flops + u.backward_flops + (u.forward_flops if u.name in names else 0.0)
               for u in profile.units)


def layout_flops(model: str, layout: Layout, hw: Hardware, size: str = "paper") -> float:
    """FLOPs one GPU of `layout` does per iteration, the recompute included (Megatron's convention):
    its shard's forward and backward (1/tp of the model's GEMMs), with every layer's forward once more
    under activation checkpointing, times the gradient-accumulation passes."""
    profile = shard_profile(model, size, layout.micro_batch, layout.tp, hw, layout.vocab_parallel, layout.precision)
    layers = [u.name for u in profile.units if u.name.startswith("layer")] if layout.recompute else []
    return recompute_flops(profile, layers) * layout.accumulation


def degrees(model: str, gpus: int, hw: Hardware, size: str = "paper") -> list[int]:
    """Tensor-parallel degrees Megatron allows for `model` (dividing heads and hidden) that place
    on `gpus` GPUs of `hw` nodes."""
    config = spec(model).sizes[size]
    out = []
    for tp in range(1, gpus + 1):
        if not (config["heads"] % tp or config["hidden"] % tp or gpus % tp) and places(tp, hw):
            out.append(tp)
    return out


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def best_layout(model: str, hw: Hardware, gpus: int, global_batch: int, zero: bool,
                size: str = "paper", precision: str = "fp32") -> tuple[LayoutResult | None, str]:
    """The fastest feasible layout on `gpus` GPUs at `global_batch`: every allowed tp degree, every
    micro-batch dividing the replica's batch (the rest by gradient accumulation), with and without
    activation checkpointing; None and the reason when none fits."""
    best, closest = None, None
    for tp in degrees(model, gpus, hw, size):
        dp = gpus // tp
        if global_batch % dp:
            continue
        replica = global_batch // dp
        for micro in divisors(replica):
            for recompute in (False, True):
                layout = Layout(tp, dp, micro, replica // micro, recompute, zero, precision=precision)
                r = simulate_layout(model, layout, hw, size)
                if r.time is not None and (best is None or r.time < best.time):
                    best = r
                if closest is None or r.peak_bytes < closest.peak_bytes:
                    closest = r
    if best is not None:
        return best, ""
    if closest is None:
        return None, f"no tensor-parallel degree places {model} on {gpus} GPUs at global batch {global_batch}"
    return None, (f"no layout fits: the smallest needs {closest.peak_bytes / 1e9:.1f} GB per GPU "
                  f"({closest.layout.label()}), the device has {hw.device_memory / 1e9:.1f} GB")

"""Analytic profile: count on the meta device, time with a Hardware's rates.

Each aten operator of a unit's forward and backward costs (Williams et al.,
"Roofline", CACM 2009, plus a launch overhead per kernel)

    t_op = kernel_launch + max(flops / sustained_flops, bytes_moved / memory_bw)

with FLOPs at the rate of the precision they run in (the tensor-core rate of 16-bit
GEMMs and convolutions) and bytes as moved (2 per 16-bit element), so
convolutions and GEMMs are compute bound and BatchNorm, ReLU, softmax and
LayerNorm (0 FLOPs in the flop counter, docs/machine.md) are memory bound. Nothing
is allocated, so every model of the zoo, Turing-NLG 17B included, profiles
at paper size in seconds.
"""

from __future__ import annotations

import torch

from karma.core.hardware import Hardware
from karma.profile.chain import UnitTimes, profile_chain
from karma.profile.profile import Profile
from karma.profile.trace import OpCost
from models.chain import ChainModel


def roofline_time(ops: list[OpCost], hw: Hardware) -> float:
    """Launch + max(compute, traffic) per op; FLOPs (GEMMs and convolutions: the flop counter's
    only ops) at the rate of the type they compute in (tensor cores for 16-bit, Hardware.matmul_flops),
    bytes as moved (2 per element of a 16-bit tensor)."""
    return sum(hw.kernel_launch + max(op.flops / hw.matmul_flops(op.dtype, op.narrow) if op.flops else 0.0,
                                      op.bytes / hw.memory_bw) for op in ops)


def analytic_profile(model: ChainModel, hw: Hardware, progress=None, policy: str | None = None) -> Profile:
    """Profile `model` (built on the meta device) for `hw`, in the model's precision: mixed precision
    is traced under CUDA's autocast rules (karma.core.precision.MetaAutocast), or `policy`'s ('megatron':
    Megatron-LM's half model, whose attention softmax runs in 16 bits)."""
    if next(model.units.parameters()).device.type != "meta":
        raise ValueError("analytic_profile expects a model built on the meta device")

    def timer(_unit, _x, _loss, _target, trace):
        # a recompute is the forward again, as the paper's model has it
        return UnitTimes(roofline_time(trace.forward_ops, hw), roofline_time(trace.backward_ops, hw))

    return profile_chain(model, torch.device("meta"), timer, "analytic", hw.name,
                         "roofline per aten op: launch + max(FLOPs/sustained rate, bytes/memory bandwidth)",
                         progress, policy)

"""What each block of a plan holds on the device and moves over the link (bytes): the simulator's
memory attribution (karma/simulate.py's module docstring says when each is allocated and freed)."""

from __future__ import annotations

from dataclasses import dataclass

from karma.plan import Plan
from karma.profile import Profile


@dataclass
class BlockBytes:
    """What each block of a plan holds and moves (bytes), from the profile and the plan."""

    own: list[float]  # per unit: saved bytes counted with this unit (see the module docstring)
    act: list[float]  # per block: saved bytes of its units (a swap block's copy each way)
    ckpt: list[float]  # per block: its input, a recomputed block's checkpoint
    params: list[float]  # per block: weights it owns (gradients downloaded, host update)
    state: list[float]  # per block: the optimizer's bytes for the weights it owns (fp32 masters of 16-bit ones, state)
    uses: list[float]  # per block: weights it uploads when streamed (tied ones too)
    static: float  # buffers, plus resident weights (and device optimizer state)
    lent: list[float]  # per block: the boundary it shares with the next swapped block, fetched back by that one
    borrowed: list[float]  # per block: the previous swapped block's boundary that its own prefetch brings back

    def back(self, k: int) -> float:
        """Bytes block k's prefetch brings back (a swapped block)."""
        return self.act[k] - self.lent[k] + self.borrowed[k]


def block_bytes(profile: Profile, plan: Plan, host_side: bool) -> BlockBytes:
    units, blocks = profile.units, plan.blocks
    block_of = [0] * len(units)
    for k, b in enumerate(blocks):
        for i in b.units:
            block_of[i] = k
    own = [float(u.saved_bytes) for u in units]
    lent, borrowed = [0.0] * len(blocks), [0.0] * len(blocks)
    for i in range(1, len(units)):
        before, here = blocks[block_of[i - 1]], blocks[block_of[i]]
        if before is here or (before.policy == here.policy and here.policy in ("keep", "swap")):
            own[i] -= profile.shared_boundary_bytes(i - 1)
        if before is not here and before.policy == here.policy == "swap":
            lent[block_of[i - 1]] = borrowed[block_of[i]] = float(profile.shared_boundary_bytes(i - 1))
    for b in blocks:  # a recomputed block's first unit saves its input: the block's checkpoint, counted apart
        if b.policy == "recompute":
            own[b.start] -= min(units[b.start].saved_input_bytes, units[b.start].input_bytes)
    act = [sum(own[i] for i in b.units) for b in blocks]
    ckpt = []
    for k, b in enumerate(blocks):
        shared = profile.shared_boundary_bytes(b.start - 1) if k and blocks[k - 1].policy == "keep" else 0
        ckpt.append(units[b.start].input_bytes - shared)
    params = [float(sum(units[i].param_bytes for i in b.units)) for b in blocks]
    state = [float(sum(units[i].optimizer_bytes for i in b.units)) for b in blocks]
    uses = [params[k] + sum(units[i].tied_param_bytes for i in b.units) for k, b in enumerate(blocks)]
    static = float(sum(u.buffer_bytes for u in units))
    if plan.weights != "streamed":
        static += sum(u.param_bytes + (0 if host_side else u.optimizer_bytes) for u in units)
    return BlockBytes(own, act, ckpt, params, state, uses, static, lent, borrowed)

"""What each block of a plan holds on the device and moves over the link (bytes): the simulator's
memory attribution (karma/sim/simulate.py's module docstring says when each is allocated and freed).

A profile whose boundaries carry several tensors (layer granularity, docs/profiles.md, *Granularity*) names the storages
that cross boundaries (karma.profile.profile.UnitProfile.boundary_out): then what blocks move is counted per
storage, each once per copy as the runtime copies it, and what they hold here is only what is not
such a storage; karma/sim/boundary_memory.py holds those, each while anything needs it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from karma.plan.plan import Plan
from karma.profile.profile import Profile, storage_bytes_of


@dataclass
class BlockBytes:
    """What each block of a plan holds and moves (bytes), from the profile and the plan."""

    own: list[float]  # per unit: saved bytes counted with this unit (see the module docstring)
    act: list[float]  # per block: saved bytes of its units (a swap block's copy each way)
    ckpt: list[float]  # per block: its input, what a recomputed block's checkpoint on the host copies each way
    params: list[float]  # per block: weights it owns (gradients downloaded, host update)
    state: list[float]  # per block: the optimizer's bytes for the weights it owns (fp32 masters of 16-bit ones, state)
    uses: list[float]  # per block: weights it uploads when streamed (tied ones too)
    static: float  # buffers, plus resident weights (and device optimizer state)
    lent: list[float]  # per block: the boundary it shares with the next swapped block, fetched back by that one
    borrowed: list[float]  # per block: the previous swapped block's boundary that its own prefetch brings back
    # What the simulator allocates itself (the rest is boundary storages, karma/sim/boundary_memory.py);
    # at block granularity, everything: ckpt, act - lent, back(k), borrowed and each unit's workspace.
    mem_ckpt: list[float]  # the checkpoint from the block's forward (to its copy's end, on the host)
    mem_ckpt_back: list[float]  # the checkpoint from its prefetch (host) or forward (device) to the backward's end
    mem_out: list[float]
    mem_back: list[float]
    mem_borrowed: list[float]
    workspace: Sequence[float]  # per unit
    storages: bool = False

    def back(self, k: int) -> float:
        """Bytes block k's prefetch brings back (a swapped block)."""
        return self.act[k] - self.lent[k] + self.borrowed[k]


def block_bytes(profile: Profile, plan: Plan, host_side: bool) -> BlockBytes:
    if profile.storages:
        return _storage_block_bytes(profile, plan, host_side)
    units, blocks = profile.units, plan.blocks
    shared = profile.shared_bytes
    own = list(profile.saved_floats)
    lent, borrowed = [0.0] * len(blocks), [0.0] * len(blocks)
    for b in blocks:  # inside a block, its units share their boundaries
        for i in range(b.start + 1, b.stop):
            own[i] -= shared[i - 1]
    for k in range(1, len(blocks)):  # across a cut: between two kept or two swapped blocks
        before, here = blocks[k - 1], blocks[k]
        if before.policy == here.policy and here.policy in ("keep", "swap"):
            own[here.start] -= shared[here.start - 1]
            if here.policy == "swap":
                lent[k - 1] = borrowed[k] = float(shared[here.start - 1])
    for b in blocks:  # a recomputed block's first unit saves its input: the block's checkpoint, counted apart
        if b.policy == "recompute":
            own[b.start] -= min(units[b.start].saved_input_bytes, units[b.start].input_bytes)
    act = [sum(own[b.start:b.stop]) for b in blocks]
    # A checkpoint a kept block before it also saves is on the device anyway: it holds no bytes of its own
    # there. On the host it is still copied whole, out and back (the runtime's store packs the segment's
    # input; karma/runtime/saved.py), and the copy back is a new tensor beside the kept one.
    ckpt = [float(units[b.start].input_bytes) for b in blocks]
    mem_ckpt = [ckpt[k] - (shared[b.start - 1] if k and blocks[k - 1].policy == "keep" else 0)
                for k, b in enumerate(blocks)]
    mem_ckpt_back = [ckpt[k] if b.checkpoint == "host" else mem_ckpt[k] for k, b in enumerate(blocks)]
    params, state, uses, static = _weights(profile, plan, host_side)
    return BlockBytes(own, act, ckpt, params, state, uses, static, lent, borrowed, mem_ckpt=mem_ckpt,
                      mem_ckpt_back=mem_ckpt_back,
                      mem_out=[a - n for a, n in zip(act, lent, strict=True)],
                      mem_back=[a - n + m for a, n, m in zip(act, lent, borrowed, strict=True)], mem_borrowed=borrowed,
                      workspace=profile.workspaces)


def _weights(profile: Profile, plan: Plan, host_side: bool):
    """(params, state, uses per block; static bytes)."""
    blocks = plan.blocks
    pp, op, tp = profile.weight_prefix  # integer prefix sums: the same sums as unit by unit
    params = [float(pp[b.stop] - pp[b.start]) for b in blocks]
    state = [float(op[b.stop] - op[b.start]) for b in blocks]
    uses = [params[k] + (tp[b.stop] - tp[b.start]) for k, b in enumerate(blocks)]
    buffers, host_optimizer, device_optimizer = profile.static_terms
    static = buffers
    if plan.weights != "streamed":
        static += host_optimizer if host_side else device_optimizer
    return params, state, uses, static


def lent_storages(profile: Profile, plan: Plan) -> list[set[int]]:
    """Per block, the boundary storages the next block's prefetch brings back for it: both blocks swapped,
    both save it, and this block saves it once (the runtime's store lends a tensor it holds once; one
    saved by two units of the block is copied by each block, karma/runtime/saved.py `same_as`)."""
    units, blocks = profile.units, plan.blocks
    out: list[set[int]] = []
    for k, b in enumerate(blocks):
        if k + 1 == len(blocks) or not b.policy == blocks[k + 1].policy == "swap":
            out.append(set())
            continue
        savers: dict[int, int] = {}
        for i in b.units:
            for sid in units[i].boundary_saved:
                savers[sid] = savers.get(sid, 0) + 1
        later = {sid for i in blocks[k + 1].units for sid in units[i].boundary_saved}
        out.append({sid for sid, n in savers.items() if n == 1 and sid in later})
    return out


def storage_unit_bytes(profile: Profile) -> tuple[list[float], list[float]]:
    """Per unit of a profile with boundary storage ids, what does not depend on the plan: its saved bytes
    besides boundary storages, and its forward workspace less a new output nobody saves (that output is
    held from the op's start as a storage, karma/sim/boundary_memory.py)."""
    size = storage_bytes_of(profile)
    own = [float(u.saved_bytes - sum(size[sid] for sid in u.boundary_saved)) for u in profile.units]
    outputs = [{sid for sid, _ in u.boundary_out} for u in profile.units]
    workspace = []
    for i, u in enumerate(profile.units):
        made = outputs[i] - (outputs[i - 1] if i else set()) - set(u.boundary_saved)
        workspace.append(max(u.workspace_bytes - sum(size[sid] for sid in made), 0.0))
    return own, workspace


def _storage_block_bytes(profile: Profile, plan: Plan, host_side: bool) -> BlockBytes:
    """BlockBytes of a profile with boundary storage ids: a block's copy moves its units' own saved
    bytes and each boundary storage its units save once; between two swapped blocks, a storage both
    save goes out with the earlier block's copy and back with the later one's prefetch (the runtime's
    karma/runtime/saved.py, as vDNN offloads a layer's input once)."""
    units, blocks = profile.units, plan.blocks
    size = storage_bytes_of(profile)
    own, workspace = storage_unit_bytes(profile)
    if blocks[0].policy == "recompute":  # the batch: the first block's checkpoint, counted apart
        own[0] -= min(units[0].saved_input_bytes, units[0].input_bytes)
    saved = [{sid for i in b.units for sid in units[i].boundary_saved} for b in blocks]
    nb = len(blocks)
    shared = [float(sum(size[sid] for sid in ids)) for ids in lent_storages(profile, plan)]
    lent, borrowed = shared, [0.0] + shared[:-1]
    inner = [sum(own[i] for i in b.units) for b in blocks]
    act = [inner[k] + sum(size[sid] for sid in saved[k]) - borrowed[k] for k in range(nb)]
    batch = units[0].input_bytes  # the first unit's input is the batch: no id, held as before
    ckpt = [float(units[b.start].input_bytes) for b in blocks]
    mem_ckpt = [float(batch) if b.start == 0 else 0.0 for b in blocks]
    params, state, uses, static = _weights(profile, plan, host_side)
    return BlockBytes(own, act, ckpt, params, state, uses, static, lent, borrowed, mem_ckpt=mem_ckpt,
                      mem_ckpt_back=mem_ckpt, mem_out=inner, mem_back=inner, mem_borrowed=[0.0] * nb,
                      workspace=workspace, storages=True)

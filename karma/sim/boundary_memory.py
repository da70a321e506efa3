"""Device memory of the storages that cross unit boundaries, followed one by one (layer granularity).

At block granularity a boundary is one tensor, and the simulator attributes it to the units
that save it (karma/sim/block_bytes.py, counted once where two units of a block share it). Finer
than a residual block, a boundary carries the skip beside the running activation
(models/layer_units.py), and one storage crosses many boundaries: the skip is the input of a
block's first layer, rides along every layer of the main path and is read by the join. It is
on the device while anything holds it, as in the runtime, whose ledger counts a storage once
whatever holds it (karma/runtime/ledger.py). Its holders, each an interval of the simulated
timeline (allocated at the start of an op, freed at the end, karma/sim/schedule.py):

* in flight: from the start of the forward of the unit that makes it to the end of the
  forward of the last unit that reads it (the forward's running boundary holds it; its
  maker's workspace leaves it out, karma.sim.block_bytes);
* each unit that saves it: kept, until that unit's backward ends; recomputed, during its
  forward and again from its recompute to its backward; swapped, until its block's copy to
  the host ends, and a prefetched copy (a storage of its own) from the prefetch to the last
  backward reading it (between two swapped blocks that both save it: copied out with the
  earlier block, back with the later one's prefetch, as karma/runtime/saved.py does);
  a prefetched or recomputed copy read last by a unit that makes its input gradient last (a
  convolution, models/lean_layers.py) goes when its weight gradients are done, before that
  input gradient is allocated (a kept one stays to its backward's end: autograd holds it);
* during a recompute, what the recompute makes again until the last unit of the block
  reading it has run again. A block's last output nobody saves is not made again when its
  unit packs its last saved tensor before its last kernel (a built-in convolution or linear
  layer, whose inputs autograd packs before the kernel) or saves nothing (a join):
  torch.utils.checkpoint stops once the last saved tensor is packed
  (`UnitProfile.recompute_remakes_output`). A unit that saves an output too (a batch norm's
  statistics) makes it before the stop (ResNet-50's projection batch norm at the end of a
  recompute block), and so does a custom autograd Function,
  which packs once its forward has returned (the layer chain's convolution, models/lean_layers.py:
  4.2 MB, ResNet-50 small b64's layer3 expansion, tests/models/test_layer_units.py);
* a recomputed block's checkpoint (its input's storages): from the block's forward to the end
  of the backward of its first unit that saves anything; a block that saves nothing (a join
  alone) keeps none on the device (torch.utils.checkpoint holds its inputs only through what
  the block saved). A checkpoint on the host is copied out whatever the block saves (the
  runtime's store packs the checkpoint's inputs), held until its copy ends; its copy back, a
  storage of its own, from the prefetch to the end of the block's recompute (not only of the
  unit reading it: the recompute's arguments, detached aliases of that storage, live until it
  returns: counted only to the unit reading it, ResNet-50's layer chain at a 21-unit block runs about
  10% over the prediction), then
  as long as a unit of the block saves it (the block's own end if nothing is saved: never unpacked).
  What is held through a recompute of no duration (a measured profile can cost one at nothing: that copy
  through the block's last, an output made again through its reader's) is freed after the allocations of
  the instant it ends, since the recompute still runs with its inputs alive (tests/runtime/test_replay.py).

The union of a storage's intervals is what it costs. The timeline does not depend on memory,
so the intervals are collected after the simulation and added to the schedule before its
peak is taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from karma.plan.plan import Plan
from karma.profile.profile import Profile, storage_bytes_of
from karma.sim.block_bytes import lent_storages
from karma.sim.schedule import Schedule

Span = tuple[float, float]


@dataclass
class OpTimes:
    """When each op of one simulated iteration ran, for the boundary storages' holders."""

    forward: list[Span] = field(default_factory=list)  # per unit
    recompute: list[Span | None] = field(default_factory=list)  # per unit (recomputed blocks)
    backward: list[Span] = field(default_factory=list)  # per unit
    weights_done: list[float] = field(default_factory=list)  # per unit: its saved inputs may go (input_grad_last)
    block_start: list[float] = field(default_factory=list)  # per block: its forward may begin
    prefetch_start: list[float] = field(default_factory=list)  # per block: its prefetch (swap, host checkpoint)

    @classmethod
    def sized(cls, units: int, blocks: int) -> OpTimes:
        return cls([(0.0, 0.0)] * units, [None] * units, [(0.0, 0.0)] * units, [0.0] * units, [0.0] * blocks,
                   [0.0] * blocks)


class _Holds:
    """Intervals per storage key; their union is allocated and freed on the schedule. An interval that
    holds its storage *through* the op it ends with (`through`) is freed after that instant's allocations,
    so that it meets what that op allocates even when the op takes no time (a recompute the measured
    profile costs at nothing still runs, with its inputs alive)."""

    def __init__(self):
        self.spans: dict[object, list[tuple[float, float, int, bool]]] = {}

    def add(self, key, start: float, end: float, block: int, through: bool = False) -> None:
        self.spans.setdefault(key, []).append((start, max(start, end), block, through))

    def to(self, s: Schedule, size: dict[int, int]) -> None:
        for key, spans in self.spans.items():
            nbytes = size[key if isinstance(key, int) else key[1]]
            spans.sort()
            start, end, block, through = spans[0]
            for a, b, k, th in spans[1:]:
                if a <= end:
                    through = th if b > end else (through or th) if b == end else through
                    end = max(end, b)
                    continue
                _hold(s, start, end, nbytes, block, through)
                start, end, block, through = a, b, k, th
            _hold(s, start, end, nbytes, block, through)


def _hold(s: Schedule, start: float, end: float, nbytes: float, block: int, through: bool = False) -> None:
    s.alloc(start, nbytes, block)
    s.release(end, nbytes, block, after_allocs=through or end == start)


def hold_boundary_storages(profile: Profile, plan: Plan, s: Schedule, t: OpTimes, swap_out_end: list[float],
                           ckpt_out_end: list[float]) -> None:
    """Add every boundary storage's device memory to `s` (the module docstring lists its holders)."""
    units, blocks = profile.units, plan.blocks
    size = storage_bytes_of(profile)
    block_of = [0] * len(units)
    for k, b in enumerate(blocks):
        for i in b.units:
            block_of[i] = k
    # ordered sets (dicts), so that the holds are added, and their memory events ordered, as
    # karma/sim/compiled.py adds them (events at one time and kind keep the order they were added)
    outputs = [dict.fromkeys(sid for sid, _ in u.boundary_out) for u in units]
    inputs = [{}] + outputs[:-1]
    maker: dict[int, int] = {}
    reader: dict[int, int] = {}
    for i in range(len(units)):
        for sid in outputs[i]:
            maker.setdefault(sid, i)
        for sid in inputs[i]:
            reader[sid] = i
    holds = _Holds()
    for sid, i in maker.items():
        holds.add(sid, t.forward[i][0], t.forward[reader.get(sid, i)][1], block_of[i])
    saved = [dict.fromkeys(sid for i in b.units for sid in units[i].boundary_saved) for b in blocks]
    lent = lent_storages(profile, plan)
    for k, b in enumerate(blocks):
        if b.policy == "swap":
            _swapped(holds, k, plan, units, saved, lent, t, swap_out_end)
        for i in b.units:
            for sid in units[i].boundary_saved:
                if b.policy == "keep":
                    holds.add(sid, t.forward[i][0], t.backward[i][1], k)
                elif b.policy == "recompute":
                    holds.add(sid, t.forward[i][0], t.forward[i][1], k)
                    # the recompute of a block whose checkpoint was on the host runs on its copy
                    copy = b.checkpoint == "host" and sid in inputs[b.start]
                    holds.add(("ckpt", sid, k) if copy else sid, t.recompute[i][0], t.weights_done[i], k)
        if b.policy == "recompute":
            _recomputed(holds, k, plan, units, inputs, outputs, reader, t, ckpt_out_end)
    holds.to(s, size)


def _swapped(holds: _Holds, k: int, plan: Plan, units, saved: list[dict], lent: list[set], t: OpTimes,
             swap_out_end: list[float]) -> None:
    """A swapped block's holds: its savers' storages until its copy out ends (those the swapped block
    before lends go out with that block's copy), and their prefetched copies."""
    blocks = plan.blocks
    b = blocks[k]
    before = lent[k - 1] if k else set()
    after = lent[k]
    for i in b.units:
        for sid in units[i].boundary_saved:
            if sid not in before:
                holds.add(sid, t.forward[i][0], swap_out_end[k], k)
    for sid in saved[k]:
        if sid in after:
            continue  # the next block's prefetch brings it back
        # read last by the earliest unit saving it, in this block or (borrowed) in the one before
        owner = k - 1 if sid in before else k
        readers = [i for j in (owner, k) for i in blocks[j].units if sid in units[i].boundary_saved]
        holds.add(("back", sid, owner), t.prefetch_start[k], t.weights_done[min(readers)], k)


def _instant(t: OpTimes, i: int) -> bool:
    """Unit i's recompute took no time (a measured profile can cost it at nothing): what it allocates comes
    at the instant it ends, so what is held through it must be freed after that instant's allocations."""
    span = t.recompute[i]
    return span is not None and span[0] == span[1]


def _recomputed(holds: _Holds, k: int, plan: Plan, units, inputs: list[dict], outputs: list[dict],
                reader: dict[int, int], t: OpTimes, ckpt_out_end: list[float]) -> None:
    """A recomputed block's holds: its checkpoint, and what its recompute makes again."""
    b = plan.blocks[k]
    savers = [i for i in b.units if units[i].saved_bytes or units[i].param_bytes or units[i].tied_param_bytes]
    end = t.backward[savers[0] if savers else b.start][1]
    for sid in inputs[b.start]:
        if b.checkpoint == "host":
            holds.add(sid, t.block_start[k], ckpt_out_end[k], k)
            # its copy back: held through the whole recompute, whose arguments (detached aliases of its
            # storage) live until the recompute returns, then only by units saving it (above); never
            # unpacked when the block saves nothing, held until the block's backward is over
            last = t.recompute[b.stop - 1][1] if savers else end
            holds.add(("ckpt", sid, k), t.prefetch_start[k], last, k, through=bool(savers) and _instant(t, b.stop - 1))
        elif savers:
            holds.add(sid, t.block_start[k], end, k)
    inside = {sid for i in b.units for sid in units[i].boundary_saved}
    for i in b.units:
        for sid in (sid for sid in outputs[i] if sid not in inputs[i]):
            if i == b.stop - 1 and sid not in inside and not units[i].recompute_remakes_output:
                continue  # not made again (the recompute stops after the last saved tensor; see the docstring)
            last = min(reader.get(sid, i), b.stop - 1)
            holds.add(sid, t.recompute[i][0], t.recompute[last][1], k, through=_instant(t, last))

"""Unit granularity chosen per block: coarse where a block fits, fine where it does not (docs/profiles.md).

A block unit's backward needs all of its saved tensors on the device at once, with its gradients
and workspace (`Profile.unit_floors`); no plan of the block chain goes below the largest of these.
Cutting every block into layers lifts that floor but makes a chain ten times longer (ResNet-1001:
3339 units), slower to plan, and, where blocks fit anyway, not faster: the layer chain's ReLU and
batch-norm units hold their tensors apart where a block unit's kernels share them (ResNet-1001 at
its paper batch: 44.2 GB in-core at layer units against 39.3 GB at block units, and 0.806 against
0.765 s/iteration planned on v100-abci). So `--granularity auto` cuts into layers exactly the blocks
whose floor exceeds the capacity and keeps the others whole: ResNet-50 at batch 1440 on v100-abci
(16 GB) cuts 5 of its 18 units (the stem, stage 1 and the first block of stage 2), a chain of 61 units
whose plan is faster than that of all 173 layer units (docs/reach.md). At the paper batches no block
is cut and the profile is the block profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from karma.core.hardware import Hardware
from karma.profile.profile import Profile

#: Where the profile's note says what `auto_profile` chose.
AUTO_NOTE = "auto granularity: "


def auto_note(profile: Profile) -> str:
    """What `auto_profile` chose, from the profile's note ('' for a profile it did not make)."""
    return profile.note[profile.note.index(AUTO_NOTE):] if AUTO_NOTE in profile.note else ""


def blocks_to_split(profile: Profile, capacity: float) -> frozenset[str]:
    """Names of the block units of `profile` whose backward alone exceeds `capacity` bytes."""
    return frozenset(u.name for u, floor in zip(profile.units, profile.unit_floors(), strict=True)
                     if floor > capacity)


def auto_profile(profiled: Callable[[frozenset[str]], Profile], hw: Hardware) -> Profile:
    """The profile of the block chain with `blocks_to_split` cut into layers, on `hw`'s memory;
    `profiled(split)` profiles the chain with the blocks `split` cut (none: the block chain). Its
    note says which blocks were cut."""
    blocks = profiled(frozenset())
    split = blocks_to_split(blocks, hw.device_memory)
    if not split:
        return replace(blocks, note=f"{blocks.note}; {AUTO_NOTE}every block fits {hw.name}'s memory, none cut")
    mixed = profiled(split)
    cut = ", ".join(u.name for u in blocks.units if u.name in split)
    return replace(mixed, note=f"{mixed.note}; {AUTO_NOTE}{len(split)} of {len(blocks.units)} block units cut into "
                               f"layers (their backward alone exceeds {hw.device_memory / 1e9:.2f} GB): {cut}")

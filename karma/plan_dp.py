"""Re-tile a unit-level plan around its swap blocks, exactly, by karma/recompute_dp.py.

Where the link hides every copy, a plan's iteration is its compute plus its
recompute (ResNet-200, WRN-28-10 at 16 GB: the best plans found stall for
under 0.1%), so once the swapped blocks are chosen, the rest is the
recompute-only problem the dynamic program solves exactly: the kept units and
the recompute segments (checkpoint on the device or the host) of least
recompute time under the memory left. The local search places swap blocks
well but moves recompute segments one edge at a time; this re-tiling moves all
of them at once (ResNet-200: 1.0-2.4% slower than a long search before, the
re-tiled plan of the same swap blocks matches it).

The program's memory model is karma/simulate.py's for resident weights
without prefetched swaps, so each result is simulated and, while over
capacity, solved again with the budget lowered by the excess (as
`karma.planner.exact_seeds`). The program keeps every unit a block of its
own; the prefetch depth counts blocks, so kept runs are also tried merged,
and merged at the source plan's cuts.
"""

from __future__ import annotations

from karma.plan_search import INFEASIBLE, Search
from karma.plan_space import LAYOUTS, Blocks, State
from karma.recompute_dp import BUCKETS, Chain, solve

#: Budget steps per re-tiling (each one dynamic program and a few simulations).
TRIES = 4


def static_bytes(search: Search, layout: str) -> float:
    """Device bytes every plan of `layout` holds throughout (buffers; resident weights; device optimizer)."""
    weights, optimizer = LAYOUTS[layout]
    units = search.profile.units
    static = sum(u.buffer_bytes for u in units)
    if weights != "streamed":
        static += sum(u.param_bytes + (u.optimizer_bytes if optimizer == "device" else 0) for u in units)
    return static


def merge_kept(blocks: Blocks, cuts: set[int] | None = None) -> Blocks:
    """Adjacent kept blocks as one, except across `cuts` (all of them cut when None: unchanged)."""
    out: list[tuple[int, int, str]] = []
    for a, b, k in blocks:
        if out and k == "K" and out[-1][2] == "K" and cuts is not None and a not in cuts:
            out[-1] = (out[-1][0], b, "K")
        else:
            out.append((a, b, k))
    return tuple(out)


def retile(search: Search, state: State, chains: dict[str, Chain]) -> list[State]:
    """Fitting states with `state`'s swap blocks, layout and any depth, the rest re-tiled by the
    dynamic program (see the module docstring); `chains` caches one Chain per gradient placement."""
    blocks, _, layout = state
    kinds = set(search.space.kinds)
    if not {"K", "R"} <= kinds or (any(k == "S" for _, _, k in blocks) and "S" not in kinds):
        return []
    host = layout != "resident"
    if host not in chains:
        chains[host] = Chain(search.profile, host_gradients=host)
    swaps = tuple((a, b) for a, b, k in blocks if k == "S")
    out = []
    for host_checkpoints in dict.fromkeys((False, "r" in kinds)):
        out += _retile(search, chains[host], swaps, {a for a, _, _ in blocks}, layout, host_checkpoints)
    return out


def _retile(search: Search, chain: Chain, swaps, cuts: set[int], layout: str, host_checkpoints: bool) -> list[State]:
    budget = search.capacity - static_bytes(search, layout)
    for _ in range(TRIES):
        tiles = solve(chain, budget, swaps, host_checkpoints)
        if tiles is None:
            return []
        tiles = tuple(tiles)
        shapes = dict.fromkeys((tiles, merge_kept(tiles, cuts), merge_kept(tiles, set())))
        found = [(shape, d, layout) for shape in shapes for d in search.space.depths]
        fits = [s for s in found if search.cost(s) < INFEASIBLE]
        if fits:
            return fits
        excess = min(search.peaks[s] for s in found) - search.capacity
        budget -= max(excess, budget / BUCKETS)
    return []


def swap_sets(search: Search, limit: int) -> list[State]:
    """The fastest fitting states of `search` with distinct (swap blocks, layout): where to re-tile from."""
    seen, out = set(), []
    for state in sorted((s for s, c in search.cache.items() if c < INFEASIBLE), key=search.cache.__getitem__):
        key = (tuple((a, b) for a, b, k in state[0] if k == "S"), state[2])
        if key not in seen:
            seen.add(key)
            out.append(state)
            if len(out) >= limit:
                break
    return out

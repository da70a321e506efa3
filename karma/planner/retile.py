"""Re-tile a unit-level plan around its swap blocks, exactly, by karma/planner/recompute_dp.py.

Where the link hides every copy, a plan's iteration is its compute plus its
recompute (ResNet-200, WRN-28-10 at 16 GB: the best plans found stall for
under 0.1%), so once the swapped blocks are chosen, the rest is the
recompute-only problem the dynamic program solves exactly: the kept units and
the recompute segments (checkpoint on the device or the host) of least
recompute time under the memory left. The local search places swap blocks
well but moves recompute segments one edge at a time; this re-tiling moves all
of them at once (on ResNet-200 the re-tiled plan of the search's swap blocks
matches a long search's).

The program's memory model is karma/sim/simulate.py's for resident weights
without prefetched swaps, so each result is simulated and, while over
capacity, solved again with the budget lowered by the excess (as
`karma.planner.polish.exact_seeds`). The program keeps every unit a block of its
own; the prefetch depth counts blocks, so kept runs are also tried merged,
merged at the source plan's cuts, and cut every `kept_lengths` units (PlannerConfig): where
the kept blocks end decides when the copies back of the blocks before them
start, and so how long they are held beside the kept units' backward.
"""

from __future__ import annotations

from karma.plan.space import LAYOUTS, Blocks, State
from karma.planner.recompute_dp import BUCKETS, Chain, solve
from karma.planner.search import INFEASIBLE, Search


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


def retile(search: Search, state: State, chains: dict[str, Chain], longest: int | None = None,
           device_checkpoints: bool = True) -> list[State]:
    """Fitting states with `state`'s swap blocks, layout and any depth, the rest re-tiled by the
    dynamic program (see the module docstring); `chains` caches one Chain per gradient placement.
    Both with checkpoints on the device only and with host checkpoints too (where the space has them;
    not `device_checkpoints`: only the latter, where it has them)."""
    blocks, _, layout = state
    kinds = set(search.space.kinds)
    if not {"K", "R"} <= kinds or (any(k == "S" for _, _, k in blocks) and "S" not in kinds):
        return []
    host = layout != "resident"
    if host not in chains:
        chains[host] = Chain(search.profile, host_gradients=host)
    swaps = tuple((a, b) for a, b, k in blocks if k == "S")
    out = []
    for host_checkpoints in dict.fromkeys((False, "r" in kinds) if device_checkpoints else ("r" in kinds,)):
        out += _retile(search, chains[host], swaps, {a for a, _, _ in blocks}, layout, host_checkpoints, longest)
    return out


def _retile(search: Search, chain: Chain, swaps, cuts: set[int], layout: str, host_checkpoints: bool,
            longest: int | None) -> list[State]:
    budget = search.capacity - static_bytes(search, layout)
    rate = search.hw.d2h_bw if host_checkpoints else None
    for _ in range(search.config.seed_tries):
        tiles = solve(chain, budget, swaps, host_checkpoints, rate, longest)
        if tiles is None:
            return []
        tiles = tuple(tiles)
        shapes = dict.fromkeys((tiles, merge_kept(tiles, cuts), merge_kept(tiles, set()))
                               + tuple(cut_kept(tiles, length) for length in search.config.kept_lengths))
        found = [(shape, d, layout) for shape in shapes for d in search.space.depths]
        fits = [s for s in found if search.cost(s) < INFEASIBLE]
        if fits:
            return fits
        excess = min(search.peaks[s] for s in found) - search.capacity
        budget -= max(excess, budget / BUCKETS)
    return []


def cut_kept(blocks: Blocks, length: int) -> Blocks:
    """`blocks` with every run of adjacent kept blocks merged and cut again every `length` units."""
    out: list[tuple[int, int, str]] = []
    for a, b, k in merge_kept(blocks, set()):
        if k == "K":
            edges = [*range(a, b, length), b]
            out += [(x, y, "K") for x, y in zip(edges, edges[1:], strict=False)]
        else:
            out.append((a, b, k))
    return tuple(out)


def swap_sets(search: Search, limit: int) -> list[State]:
    """The fastest fitting states of `search` with distinct (swap blocks, layout): where to re-tile from."""
    seen, out = set(), []
    for state in sorted((s for s, c in search.cache.items() if c < INFEASIBLE), key=search.cache.__getitem__):
        if len(out) >= limit:
            break
        key = (tuple((a, b) for a, b, k in state[0] if k == "S"), state[2])
        if key not in seen:
            seen.add(key)
            out.append(state)
    return out


def kept_runs(blocks: Blocks) -> list[tuple[int, int]]:
    """Maximal runs of kept units (start, stop), longest first (the earlier of equal ones first)."""
    runs = [(a, b) for a, b, k in merge_kept(blocks, set()) if k == "K"]
    return sorted(runs, key=lambda r: (r[0] - r[1], r[0]))


def with_swap(blocks: Blocks, a: int, b: int) -> Blocks:
    """`blocks` with [a, b) one swap block, what the blocks it overlaps leave on either side as they
    were (`retile` keeps the swap blocks and re-tiles the rest, merging kept runs only at the blocks'
    cuts: a kept run left one block re-tiles into a faster plan than one cut into a block a unit)."""
    out = [(a, b, "S")]
    for x, y, k in blocks:
        if y <= a or x >= b:
            out.append((x, y, k))
            continue
        if x < a:
            out.append((x, a, k))
        if y > b:
            out.append((b, y, k))
    return tuple(sorted(out))


def grow_swaps(search: Search, state: State, chains: dict[str, Chain], longest: int | None) -> State:
    """Swap blocks placed by trial, the rest of each plan re-tiled exactly (`retile`, host checkpoints
    where the space has them), kept while faster:

    * the head of the config's `grow_runs` longest kept runs, the earliest first (its units are held the longest),
      one unit, then two, four..., then bisected between the longest found faster and the shortest
      not (at most `grow_tries` re-tilings): a swap that frees memory for kept units pays only once the
      recompute segments around it move too, which the descents' one-edge moves do not reach;
    * then `grow_singles` times, one recomputed unit (the first of a segment, at the middle of the
      segments, then a quarter, three quarters...) swapped instead: where the link is idle, a copy
      that hides costs less than the recompute (KARMA's concurrency analysis, Sec. IV).

    The earlier of the runs goes first: on ResNet-1001 the head of the longest run, swapped first, wins
    little and leaves no room for the swaps that pay in the earlier run."""
    if "S" not in search.space.kinds:
        return state
    best = state
    runs, tries, singles = search.config.grow_runs, search.config.grow_tries, search.config.grow_singles
    for a, b in sorted(kept_runs(state[0])[:runs]):  # the earliest first: its units are held the longest
        low, high, failed = 0, b - a + 1, False  # the longest head found faster, the shortest not
        while tries > 0:
            m = (low + high) // 2 if failed else min(2 * low or 1, b - a)  # double, then bisect
            if m <= low:
                break
            tries -= 1
            found = _faster(search, (with_swap(best[0], a, a + m), best[1], best[2]), chains, longest, best)
            if found is None:
                high, failed = m, True
            else:
                best, low = found, m
    for fraction in spread(singles):
        heads = [a for a, _, k in best[0] if k in ("R", "r")]
        if not heads:
            break
        unit = heads[int(fraction * len(heads))]
        best = _faster(search, (with_swap(best[0], unit, unit + 1), best[1], best[2]), chains, longest, best) or best
    return best


def spread(count: int) -> list[float]:
    """The first `count` of 1/2, 1/4, 3/4, 1/8, 3/8, 5/8, 7/8, 1/16...: points ever finer over [0, 1)."""
    out, parts = [], 2
    while len(out) < count:
        out += [j / parts for j in range(1, parts, 2)]
        parts *= 2
    return out[:count]


def _faster(search: Search, shape: State, chains: dict[str, Chain], longest: int | None, best: State) -> State | None:
    """The fastest re-tiling of `shape`'s swap blocks (the program with host checkpoints where the space
    has them, else without), if faster than `best`."""
    found = min(retile(search, shape, chains, longest, device_checkpoints=False), key=search.cost, default=None)
    return found if found is not None and search.cost(found) < search.cost(best) - 1e-12 else None

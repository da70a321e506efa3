"""The planner's annealing walk, compiled (numba): `Search.anneal`'s random moves, its acceptance and its
memo, with the simulator's kernel (karma/sim/compiled.py) called in the same compiled loop.

A walk draws tens of thousands of random neighbours of a plan, most of them simulated once; in Python each step
built a tuple of blocks, hashed it and converted it to arrays for the kernel, three times the kernel's own cost
on the paper models' chains. Here a state is two arrays (block bounds and kind codes) with a prefetch depth
index and a layout index, its memo key a 64-bit hash of them.

The neighbourhood is `Search.block_moves`' (every move, counted by family and built by index, so that a random
index is a uniform draw over it) plus every other (depth, layout) of the space; `moves` lists it for the
tests, which check that it is the same set of block sequences as `Search.block_moves`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.typed import Dict

from karma.sim.compiled import KIND_CODES, ROWS, summary_kernel

#: a kind code back to its letter (karma/plan/space.py KINDS)
LETTERS = {code: letter for letter, code in KIND_CODES.items()}
INFEASIBLE = 1e9
_FAMILIES = 6  # atoms, shifts, kind changes, singles, splits, merges (Search.block_moves' order)


@njit(cache=True)
def _shift_list(left, right, out):
    """The moves of a cut with `left` groups before it and `right` after (search.py `_relative_shifts`), sorted,
    into `out`; their count."""
    count = 0
    for d in (-2, -1, 1, 2, (-left) // 2, right // 2):
        if -left < d < right:
            at = count
            seen = False
            for j in range(count):
                if out[j] == d:
                    seen = True
                    break
            if seen:
                continue
            while at > 0 and out[at - 1] > d:
                out[at] = out[at - 1]
                at -= 1
            out[at] = d
            count += 1
    return count


@njit(cache=True)
def _splittable(bounds, i, near, n, p):
    """Whether block i may be split at point p: `near` < 0 means anywhere, else within `near` groups of a block
    start (this block's start, or the next block's, the only starts that can be nearer)."""
    if near < 0:
        return True
    return p - bounds[i] <= near or (bounds[i + 1] < n and bounds[i + 1] - p <= near)


@njit(cache=True)
def _split_count(bounds, i, near, n):
    """How many points block i may be split at."""
    count = 0
    for p in range(bounds[i] + 1, bounds[i + 1]):
        if _splittable(bounds, i, near, n, p):
            count += 1
    return count


@njit(cache=True)
def _sizes(bounds, codes, nb, kinds, near, buf, sizes):
    """Per family, how many block moves `bounds`/`codes` (nb blocks) have; their total."""
    nk = kinds.shape[0]
    n = bounds[nb]
    atoms = 0
    for j in range(nk):
        for i in range(nb):
            if codes[i] == kinds[j] and bounds[i + 1] - bounds[i] > 1:
                atoms += 1
                break
    shifts = singles = splits = merges = 0
    for i in range(nb):
        a, b = bounds[i], bounds[i + 1]
        if b - a > 2:
            singles += 1
        splits += _split_count(bounds, i, near, n)
        if i + 1 < nb:
            shifts += _shift_list(b - a, bounds[i + 2] - b, buf)
            merges += 1 if codes[i] == codes[i + 1] else 2
    sizes[0], sizes[1], sizes[2] = atoms, shifts, nb * (nk - 1)
    sizes[3], sizes[4], sizes[5] = singles, splits * nk, merges
    return sizes.sum()


@njit(cache=True)
def _emit(out_b, out_c, m, a, b, code):
    """Block [a, b) of kind `code` into output slot m; the next slot."""
    out_b[m] = a
    out_c[m] = code
    out_b[m + 1] = b
    return m + 1


@njit(cache=True)
def _units(out_b, out_c, m, a, b, code):
    """[a, b) as one block per group, all of kind `code`, from output slot m; the next slot."""
    for g in range(a, b):
        m = _emit(out_b, out_c, m, g, g + 1, code)
    return m


@njit(cache=True)
def _copy_but(bounds, codes, nb, lo, hi, out_b, out_c, m):
    """Blocks [lo, hi) unchanged onto the output from block slot m; the next slot."""
    for i in range(lo, hi):
        m = _emit(out_b, out_c, m, bounds[i], bounds[i + 1], codes[i])
    return m


@njit(cache=True)
def _apply(bounds, codes, nb, kinds, near, sizes, buf, index, out_b, out_c):
    """Block move `index` (in `Search.block_moves`' order) of the nb blocks into out_b/out_c; their count."""
    nk = kinds.shape[0]
    n = bounds[nb]
    family = 0
    while index >= sizes[family]:
        index -= sizes[family]
        family += 1
    if family == 0:  # every block of one kind split into one block per group
        kind = -1
        for j in range(nk):
            present = False
            for i in range(nb):
                if codes[i] == kinds[j] and bounds[i + 1] - bounds[i] > 1:
                    present = True
                    break
            if present:
                if index == 0:
                    kind = kinds[j]
                    break
                index -= 1
        m = 0
        for i in range(nb):
            if codes[i] == kind:
                m = _units(out_b, out_c, m, bounds[i], bounds[i + 1], codes[i])
            else:
                m = _emit(out_b, out_c, m, bounds[i], bounds[i + 1], codes[i])
        return m
    if family == 1:  # a cut shifted
        for i in range(nb - 1):
            a, mid, b = bounds[i], bounds[i + 1], bounds[i + 2]
            count = _shift_list(mid - a, b - mid, buf)
            if index < count:
                m = _copy_but(bounds, codes, nb, 0, i, out_b, out_c, 0)
                m = _emit(out_b, out_c, m, a, mid + buf[index], codes[i])
                m = _emit(out_b, out_c, m, mid + buf[index], b, codes[i + 1])
                return _copy_but(bounds, codes, nb, i + 2, nb, out_b, out_c, m)
            index -= count
    if family == 2:  # one block's kind changed
        i, rest = index // (nk - 1), index % (nk - 1)
        other = -1
        for j in range(nk):
            if kinds[j] != codes[i]:
                if rest == 0:
                    other = kinds[j]
                    break
                rest -= 1
        m = _copy_but(bounds, codes, nb, 0, i, out_b, out_c, 0)
        m = _emit(out_b, out_c, m, bounds[i], bounds[i + 1], other)
        return _copy_but(bounds, codes, nb, i + 1, nb, out_b, out_c, m)
    if family == 3:  # one block cut into one block per group
        for i in range(nb):
            if bounds[i + 1] - bounds[i] > 2:
                if index == 0:
                    m = _copy_but(bounds, codes, nb, 0, i, out_b, out_c, 0)
                    m = _units(out_b, out_c, m, bounds[i], bounds[i + 1], codes[i])
                    return _copy_but(bounds, codes, nb, i + 1, nb, out_b, out_c, m)
                index -= 1
    if family == 4:  # one block split in two, the right part of any kind
        point, other = index // nk, kinds[index % nk]
        for i in range(nb):
            for p in range(bounds[i] + 1, bounds[i + 1]):
                if _splittable(bounds, i, near, n, p):
                    if point == 0:
                        m = _copy_but(bounds, codes, nb, 0, i, out_b, out_c, 0)
                        m = _emit(out_b, out_c, m, bounds[i], p, codes[i])
                        m = _emit(out_b, out_c, m, p, bounds[i + 1], other)
                        return _copy_but(bounds, codes, nb, i + 1, nb, out_b, out_c, m)
                    point -= 1
    # family 5: two neighbours merged, as the first's kind or the second's
    for i in range(nb - 1):
        count = 1 if codes[i] == codes[i + 1] else 2
        if index < count:
            m = _copy_but(bounds, codes, nb, 0, i, out_b, out_c, 0)
            m = _emit(out_b, out_c, m, bounds[i], bounds[i + 2], codes[i] if index == 0 else codes[i + 1])
            return _copy_but(bounds, codes, nb, i + 2, nb, out_b, out_c, m)
        index -= count
    return -1


@njit(cache=True)
def _mix(h, x):
    """One step of a 64-bit hash over a state's numbers (splitmix64's finaliser on the running value)."""
    h = (h ^ np.uint64(x)) * np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    return h ^ (h >> np.uint64(29))


@njit(cache=True)
def _key(bounds, codes, nb, combo):
    """The memo key of a state: its blocks' bounds and kinds and its (depth, layout) combination."""
    h = _mix(np.uint64(0x12345), combo)
    for i in range(nb):
        h = _mix(h, bounds[i] * 8 + codes[i])
    return _mix(h, bounds[nb])


@njit(cache=True)
def moves(bounds, codes, kinds, near):
    """Every block move of a state (the tests compare it with `Search.block_moves`): rows of bounds, kind codes,
    block counts."""
    nb = codes.shape[0]
    n = bounds[nb]
    sizes = np.zeros(_FAMILIES, dtype=np.int64)
    buf = np.zeros(6, dtype=np.int64)
    total = _sizes(bounds, codes, nb, kinds, near, buf, sizes)
    out_b = np.zeros((total, n + 1), dtype=np.int64)
    out_c = np.zeros((total, n), dtype=np.int64)
    count = np.zeros(total, dtype=np.int64)
    for index in range(total):
        count[index] = _apply(bounds, codes, nb, kinds, near, sizes, buf, index, out_b[index], out_c[index])
    return out_b, out_c, count


@njit(cache=True)
def walk(uf, wprefix, size, index, scalars, flags, layouts, kinds, overlapping, near, bounds, codes, combo,
         total, hot, cold, jump, seed):
    """`Search.anneal`'s walk from the state (bounds, codes, combo = depth index * layouts + layout index):
    until 19/20 of `total` new states are simulated, or 3 * `total` moves. `scalars`/`flags`: the kernel's per
    (depth, layout) constants, one row per combo; `overlapping`: the depth indices a jump may take.
    Returns the fastest state seen (bounds, codes, combo), the states simulated and their least peak."""
    np.random.seed(seed)
    n = bounds[bounds.shape[0] - 1]
    combos = scalars.shape[0]
    capacity = scalars[0, 9]
    memo = Dict.empty(key_type=types.uint64, value_type=types.float64)
    cur_b, cur_c = np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    new_b, new_c = np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    best_b, best_c = np.zeros(n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64)
    nb = codes.shape[0]
    cur_b[:nb + 1] = bounds
    cur_c[:nb] = codes
    sizes = np.zeros(_FAMILIES, dtype=np.int64)
    buf = np.zeros(6, dtype=np.int64)

    end, peak, over, _, _, _, _ = summary_kernel(uf, wprefix, size, index, cur_b[:nb + 1], cur_c[:nb],
                                                 scalars[combo], flags[combo])
    cost = end if over < 0 else INFEASIBLE + (peak - capacity) / 1e9
    cur_key = _key(cur_b, cur_c, nb, combo)
    memo[cur_key] = cost
    simulated, frugal = 1, peak
    best_b[:], best_c[:] = cur_b, cur_c
    best_nb, best_combo, best_cost = nb, combo, cost
    limit = total * 19 // 20
    tries, block_moves, moves_now = 0, 0, 0
    stale = True
    while simulated < limit and tries < 3 * total:
        tries += 1
        if stale:
            block_moves = _sizes(cur_b, cur_c, nb, kinds, near, buf, sizes)
            moves_now = block_moves + combos - 1
            if moves_now == 0:
                break
            stale = False
        new_combo = combo
        if block_moves > 0 and np.random.random() < jump:  # a block move at a random overlapping depth and layout
            new_nb = _apply(cur_b, cur_c, nb, kinds, near, sizes, buf, np.random.randint(block_moves), new_b, new_c)
            depth = overlapping[np.random.randint(overlapping.shape[0])]
            new_combo = depth * layouts + np.random.randint(layouts)
        else:
            pick = np.random.randint(moves_now)
            if pick < block_moves:
                new_nb = _apply(cur_b, cur_c, nb, kinds, near, sizes, buf, pick, new_b, new_c)
            else:  # another depth or layout, the blocks unchanged
                pick -= block_moves
                new_combo = pick if pick < combo else pick + 1
                new_nb = nb
                new_b[:nb + 1] = cur_b[:nb + 1]
                new_c[:nb] = cur_c[:nb]
        key = _key(new_b, new_c, new_nb, new_combo)
        if key in memo:
            new = memo[key]
        else:
            end, peak, over, _, _, _, _ = summary_kernel(uf, wprefix, size, index, new_b[:new_nb + 1], new_c[:new_nb],
                                                         scalars[new_combo], flags[new_combo])
            new = end if over < 0 else INFEASIBLE + (peak - capacity) / 1e9
            memo[key] = new
            simulated += 1
            frugal = min(frugal, peak)
        spent = max(simulated / total, tries / (3 * total))
        heat = hot * (cold / hot) ** min(spent, 1.0)
        # (a plan of zero time, all units' times zero, takes no slower move)
        if new <= cost or (new < INFEASIBLE and cost > 0
                           and np.random.random() < np.exp(-(new - cost) / (cost * heat))):
            if key != cur_key:
                stale = True
                cur_key = key
            cur_b, new_b = new_b, cur_b
            cur_c, new_c = new_c, cur_c
            nb, combo, cost = new_nb, new_combo, new
            if new < best_cost - 1e-12:
                best_b[:nb + 1] = cur_b[:nb + 1]
                best_c[:nb] = cur_c[:nb]
                best_nb, best_combo, best_cost = nb, combo, new
    return best_b[:best_nb + 1].copy(), best_c[:best_nb].copy(), best_combo, simulated, frugal


def compile_now() -> None:
    """Compile `walk` and `moves` now, or load them from numba's cache (seconds once per installation;
    tests/conftest.py calls it before the test workers start, as karma.sim.compiled.compile_now)."""
    flags = np.array([[0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 0]], dtype=np.int64)
    kinds, one = np.array([0, 1], dtype=np.int64), np.array([0, 1], dtype=np.int64)
    walk(np.zeros((len(ROWS), 1)), np.zeros((3, 2), dtype=np.int64), np.zeros(0), np.zeros((4, 2), dtype=np.int64),
         np.ones((1, 11)), flags, 1, kinds, np.zeros(1, dtype=np.int64), -1, one, np.zeros(1, dtype=np.int64), 0, 2,
         0.02, 0.0002, 0.1, 0)
    moves(one, np.zeros(1, dtype=np.int64), kinds, -1)

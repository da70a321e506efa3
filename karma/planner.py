"""KARMA's planner: the fastest plan the performance model can find under a capacity.

The paper (Sec. IV-V) groups units into capacity-based blocks and chooses,
per block, swap or recompute so that transfers hide behind compute, with
the performance model as the judge. We search that plan space directly:

1. Coarsen: the chain is cut into at most `groups` runs of about equal
   compute (karma/coarsen.py); chains of <= `groups` units are not coarsened.
2. Label every group K (keep), S (swap), R (recompute, new segment, input on
   the device), R+ (recompute, same segment as the group before), r / r+
   (the same with the segment input swapped to the host); choose the
   prefetch depth and resident or streamed weights. Every (labels, depth,
   weights) is a Plan and the simulator gives its time, or rejects it.
3. Search: seed with the plan families the paper's analysis suggests (swap
   a prefix and keep the rest, recompute a prefix, swap-then-recompute-then-
   keep, uniform ones, sqrt(n) checkpointing) under every depth and weight
   residency, then improve the best seeds by steepest descent over one- and
   two-group label changes, depth and residency changes (also combined with a
   label change); then iterated local search (relabel a few random groups,
   descend again, keep the better) until an evaluation budget is spent.
4. The winner is expanded to the full chain and simulated there; the
   baselines' plans (also in this plan space) are simulated as well and the
   fastest feasible plan is returned, so KARMA is never slower than the best
   baseline under the same model.

Infeasible plans are ranked by how far over capacity they are, so the search
walks towards feasibility; if no plan fits, the error names the capacity the
most frugal plan would need.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field, replace

from karma.coarsen import balanced_groups, coarsen
from karma.errors import KarmaError
from karma.hardware import Hardware
from karma.plan import Block, Plan
from karma.profile import Profile
from karma.simulate import simulate

LABELS = ("K", "S", "R", "R+", "r", "r+")
BASELINES = ("incore", "vdnn", "checkpoint", "superneurons", "zero-offload")


@dataclass(frozen=True)
class Space:
    """The plan space searched: labels per group, prefetch depths, weight residency."""

    labels: tuple[str, ...] = LABELS
    depths: tuple[int, ...] = (1, 2, 4)
    weights: tuple[str, ...] = ("resident", "streamed")


State = tuple[tuple[str, ...], int, str]


def valid(labels: tuple[str, ...]) -> bool:
    """A continuation label must follow a recompute group of the same kind."""
    return all(not label.endswith("+") or (i > 0 and labels[i - 1][0] == label[0])
               for i, label in enumerate(labels))


def blocks_of(groups: list[tuple[int, int]], labels: tuple[str, ...]) -> tuple[Block, ...]:
    blocks: list[Block] = []
    for (a, b), label in zip(groups, labels, strict=True):
        if label.endswith("+"):
            blocks[-1] = replace(blocks[-1], stop=b)
        elif label in ("R", "r"):
            blocks.append(Block(a, b, "recompute", "device" if label == "R" else "host"))
        else:
            blocks.append(Block(a, b, "keep" if label == "K" else "swap"))
    return tuple(blocks)


def to_plan(profile: Profile, groups, state: State, strategy: str = "karma") -> Plan:
    labels, depth, weights = state
    return Plan(model=profile.model, batch=profile.batch, units=len(profile.units),
                blocks=blocks_of(groups, labels), weights=weights, prefetch_depth=depth, strategy=strategy)


@dataclass
class Search:
    """Memoised evaluation of states on the (coarse) profile."""

    profile: Profile
    hw: Hardware
    capacity: float
    space: Space
    cache: dict[State, float] = field(default_factory=dict)

    @property
    def unit_groups(self):
        return [(i, i + 1) for i in range(len(self.profile.units))]

    def cost(self, state: State) -> float:
        """Seconds if the plan fits; otherwise 1e9 + GB over capacity (walks towards feasibility)."""
        if state not in self.cache:
            result = simulate(self.profile, to_plan(self.profile, self.unit_groups, state), self.hw,
                              self.capacity, record=False)
            self.cache[state] = result.time if result.feasible else 1e9 + (result.peak_bytes - self.capacity) / 1e9
        return self.cache[state]

    def neighbours(self, state: State):
        """One-group label changes, depth and residency changes (alone and with a label
        change), then two adjacent groups changed together."""
        labels, depth, weights = state
        n = len(labels)
        singles = []
        for i in range(n):
            for label in self.space.labels:
                if label != labels[i]:
                    new = labels[:i] + (label,) + labels[i + 1:]
                    if valid(new):
                        singles.append(new)
        others = [(d, w) for d in self.space.depths for w in self.space.weights if (d, w) != (depth, weights)]
        yield from ((new, depth, weights) for new in singles)
        yield from ((labels, d, w) for d, w in others)
        yield from ((new, d, w) for d, w in others for new in singles)
        for i in range(n - 1):
            for a, b in itertools.product(self.space.labels, repeat=2):
                if a != labels[i] and b != labels[i + 1]:
                    new = labels[:i] + (a, b) + labels[i + 2:]
                    if valid(new):
                        yield new, depth, weights

    def descend(self, state: State) -> State:
        """Steepest descent: move to the best neighbour while it is faster."""
        best, best_cost = state, self.cost(state)
        while True:
            move = min(self.neighbours(best), key=self.cost, default=None)
            if move is None or self.cost(move) >= best_cost - 1e-12:
                return best
            best, best_cost = move, self.cost(move)

    def perturb(self, state: State, rng: random.Random) -> State:
        """Relabel a few random groups (and maybe the depth or residency): an ILS kick."""
        labels, depth, weights = state
        labels = list(labels)
        for _ in range(rng.randint(2, 3)):
            labels[rng.randrange(len(labels))] = rng.choice(self.space.labels)
        while not valid(tuple(labels)):
            bad = next(i for i in range(len(labels)) if not valid(tuple(labels[: i + 1])))
            labels[bad] = labels[bad][0]
        if rng.random() < 0.3:
            depth = rng.choice(self.space.depths)
        if rng.random() < 0.3:
            weights = rng.choice(self.space.weights)
        return tuple(labels), depth, weights


def seeds(n: int, space: Space) -> list[tuple[str, ...]]:
    """Label sequences of the families KARMA's concurrency analysis suggests."""
    allowed = set(space.labels)
    out = set()

    def add(seq):
        seq = tuple(seq)
        if set(seq) <= allowed and valid(seq):
            out.add(seq)

    rec_seg = ["R"] + ["R+"] * (n - 1)
    add(["K"] * n)
    add(["S"] * n)
    add(["R"] * n)
    add(rec_seg)
    add(["r"] * n)
    step = max(1, math.isqrt(n))
    add(["R" if i % step == 0 else "R+" for i in range(n)])
    for k in range(n + 1):
        add(["S"] * k + ["K"] * (n - k))
        add(["R"] * k + ["K"] * (n - k))
        add((["R"] + ["R+"] * (k - 1) if k else []) + ["K"] * (n - k))
        for m in range(n - k + 1):
            add(["S"] * k + ["R"] * m + ["K"] * (n - k - m))
            add(["S"] * k + (["R"] + ["R+"] * (m - 1) if m else []) + ["K"] * (n - k - m))
    return sorted(out)


def search_states(profile: Profile, hw: Hardware, capacity: float, space: Space, starts: int = 3,
                  budget: int = 8000, seed: int = 0) -> tuple[State, Search]:
    """Best state found on `profile` (one group per unit): descend from the best seeds,
    then iterated local search (kick, descend, keep the better) until `budget` plans
    have been simulated."""
    s = Search(profile, hw, capacity, space)
    n = len(profile.units)
    candidates = [(labels, d, w) for labels in seeds(n, space) for d in space.depths for w in space.weights]
    best = None
    tried = set()
    for state in sorted(candidates, key=s.cost):
        if state[0] in tried:
            continue
        tried.add(state[0])
        found = s.descend(state)
        if best is None or s.cost(found) < s.cost(best):
            best = found
        if len(tried) >= starts:
            break
    rng = random.Random(seed)
    stale = 0
    while len(s.cache) < budget and stale < 50:
        before = len(s.cache)
        found = s.descend(s.perturb(best, rng))
        if s.cost(found) < s.cost(best) - 1e-12:
            best = found
        stale = stale + 1 if len(s.cache) == before else 0
    return best, s


def plan(profile: Profile, hw: Hardware, capacity: float, space: Space | None = None, groups: int = 24,
         include_baselines: bool = True) -> Plan:
    """KARMA's plan for `profile` on `hw` under `capacity` bytes (see the module docstring)."""
    space = space or Space()
    cuts = balanced_groups(profile, groups)
    coarse = coarsen(profile, cuts)
    state, search = search_states(coarse, hw, capacity, space)
    candidates = [to_plan(profile, cuts, state)]
    if include_baselines:
        from karma.strategy import get

        candidates += [p for p in (get(name)(profile, hw, capacity) for name in BASELINES) if p is not None]
    best, best_time, frugal = None, math.inf, math.inf
    for candidate in candidates:
        result = simulate(profile, candidate, hw, capacity, record=False)
        frugal = min(frugal, result.peak_bytes)
        if result.feasible and result.time < best_time:
            best, best_time = candidate, result.time
    if best is None:
        lean = to_plan(profile, cuts, (("r",) * len(cuts), 1, "streamed"))
        frugal = min(frugal, simulate(profile, lean, hw, capacity, record=False).peak_bytes)
        raise KarmaError(f"no plan fits in {capacity / 1e9:.3f} GB; the most frugal plan found needs "
                         f"{frugal / 1e9:.3f} GB")
    notes = {"groups": len(cuts), "evaluations": len(search.cache), "found_by": best.strategy}
    return replace(best, strategy="karma", notes=notes)

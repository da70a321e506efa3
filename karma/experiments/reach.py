"""Reach: the largest batch each strategy trains on one device, and the speed it keeps there.

Out-of-core training is judged by reach as much as by speed: Hayakawa & Narihira (2020,
arXiv:2010.14109, abstract) report ResNet-50 at batch 1440, 7.5x what physical memory holds, at
55% of the training speed. Here, per model and strategy: the largest batch whose plan fits the
device memory, its throughput (samples/s = batch / simulated iteration time), and the throughput
at 1x, 2x, 4x, 8x the largest in-core batch, each over in-core training's throughput at its own
largest batch. Every number is simulated: analytic profiles at each batch
(karma/profile/analytic.py), the strategy's plan (karma/strategies.py) and the simulator.

Search. "Fits" is decided on exact profiles, and the batch returned fits while the next one does
not (or it is the limit), both on exact profiles (`largest_batch`, galloping from a guess). The
guess keeps both costs low: a profile takes up to a second per batch, and a baseline's plan up to
seconds on a long chain (Capuchin's greedy simulates once per unit). It comes from a surrogate,
the profile interpolated per unit between the nearest exact profiles around the batch (bytes and
FLOPs near linear in the batch, times near linear under the roofline; karma/experiments/scaling.py
interpolates the same way between batch 1 and the paper batch), and from the strategy's own plan
at the limit: a baseline that cannot fit returns its most frugal configuration
(baselines/_choose.py), and the last batch that fixed configuration fits, found by cheap
simulations, is near the strategy's reach. Right guesses cost two plans on exact profiles.

KARMA. Its planner takes seconds at full budget, so the search asks it at a reduced `work` (its
seeds and descents, a short walk): sound, since a plan it returns fits, but it may miss a plan the
full search finds. It returns no plan when nothing fits, so its guess is a bisection on the
surrogate from the longest reach of the strategies before it. The batches reported are planned at
full budget, and (`confirm`) so is the batch after KARMA's reach: if a plan fits there (the short
search missed it: depth 0 plans on ResNet-200), the search goes on from there at twice the budget,
then confirms again, until the batch after the reach has no plan at full budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace

import pandas as pd

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware
from karma.experiments.scaling import CONSTANT
from karma.plan.plan import Plan
from karma.planner.config import PlannerConfig
from karma.planner.planner import plan as karma_plan
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile, UnitProfile
from karma.sim.simulate import simulate
from karma.strategies import Outcome, get, run_strategy
from models.registry import build, spec

#: The search stops at this multiple of the largest in-core batch (batch 1 where none fits).
LIMIT_FACTOR = 64
#: Multiples of the largest in-core batch at which every strategy's throughput is reported.
MULTIPLES = (1, 2, 4, 8)
#: KARMA planner budget (a factor on PlannerConfig's budgets, `PlannerConfig.longer`) of the feasibility
#: checks in the bisection.
SEARCH_WORK = 0.1


def largest_batch(fits: Callable[[int], bool], limit: int, guess: int | None = None,
                  known: dict[int, bool] | None = None) -> int | None:
    """The largest batch b <= `limit` with fits(b) and not fits(b + 1) (b = `limit` when it fits);
    None when batch 1 does not fit. Gallops from `guess` (doubling steps up while batches fit,
    down while they do not), then bisects the bracket: about 2 log2(error) calls when the guess
    is off by `error`, 2 when it is right. Where fitting is not monotone in the batch, the answer
    is one edge of the fitting batches, not necessarily the last one. `known`: answers had already."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    seen: dict[int, bool] = dict(known or {})

    def ok(batch: int) -> bool:
        if batch not in seen:
            seen[batch] = fits(batch)
        return seen[batch]

    start = min(max(guess or 1, 1), limit)
    if ok(start):
        lo, step = start, 1
        while lo < limit:
            hi = min(lo + step, limit)
            if not ok(hi):
                break
            lo, step = hi, step * 2
        else:
            return limit
    else:
        hi, step = start, 1
        while True:
            if hi == 1:
                return None
            lo = max(hi - step, 1)
            if ok(lo):
                break
            hi, step = lo, step * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def lerp(a: Profile, c: Profile, batch: int) -> Profile:
    """`a` and `c` (profiles of one model at two batches) interpolated, or extrapolated, linearly per
    unit to `batch`; weights, buffers and optimizer state (karma.experiments.scaling.CONSTANT) do not change, nor
    do the ids of boundary storages (karma.profile.profile.UnitProfile.boundary_out: their bytes do)."""
    w = (batch - a.batch) / (c.batch - a.batch)
    units = []
    for x, y in zip(a.units, c.units, strict=True):
        values = {}
        for f in fields(UnitProfile):
            u, v = getattr(x, f.name), getattr(y, f.name)
            if f.name == "name" or f.name in CONSTANT or (isinstance(v, tuple) and len(u) != len(v)):
                values[f.name] = v
            elif isinstance(v, tuple):  # boundary storages: (id, bytes) pairs get their bytes interpolated (held-out
                # times their values; storage ids stay)
                values[f.name] = tuple((q[0], round(p[1] + (q[1] - p[1]) * w)) if isinstance(q, tuple)
                                       else p + (q - p) * w if isinstance(q, float) else q
                                       for p, q in zip(u, v, strict=True))
            else:
                t = u + (v - u) * w
                values[f.name] = round(t) if isinstance(v, int) else t
        units.append(UnitProfile(**values))
    return replace(c, batch=batch, units=tuple(units))


@dataclass
class Batches:
    """Profiles of one model at any batch: exact (analytic, cached per batch) or interpolated between
    the exact ones nearest to it (the surrogate of the bisection). `make(batch)` profiles exactly."""

    make: Callable[[int], Profile]
    exact_profiles: dict[int, Profile] = field(default_factory=dict)
    seconds: float = 0.0

    def exact(self, batch: int) -> Profile:
        if batch not in self.exact_profiles:
            start = time.perf_counter()
            self.exact_profiles[batch] = self.make(batch)
            self.seconds += time.perf_counter() - start
        return self.exact_profiles[batch]

    def approx(self, batch: int) -> Profile:
        """Exact if profiled already, else interpolated between the nearest exact batches around it
        (extrapolated from the two nearest on one side when it is outside them)."""
        if batch in self.exact_profiles:
            return self.exact_profiles[batch]
        known = sorted(self.exact_profiles)
        if len(known) < 2:
            return self.exact(batch)
        below = [b for b in known if b < batch][-1:]
        above = [b for b in known if b > batch][:1]
        pair = below + above if below and above else (known[:2] if not below else known[-2:])
        return lerp(self.exact_profiles[pair[0]], self.exact_profiles[pair[1]], batch)


def zoo_batches(model: str, hw: Hardware, granularity: str = "block", precision: str = "fp32",
                size: str = "paper") -> Batches:
    """Batches of a zoo model, built once on the meta device and profiled at each batch."""
    chain = build(model, size, batch=1, device="meta", precision=precision, granularity=granularity)
    return Batches(lambda batch: analytic_profile(replace(chain, batch=batch), hw))


def spec_batches(model_spec: str, options: dict, hw: Hardware, precision: str = "fp32", batch: int = 1) -> Batches:
    """Batches of a model spec (models/specs.py), cut once at `batch` on the meta device and profiled at
    each batch, so that every batch has the same units (a plan of one batch is a plan of another, as the
    search needs). Only a graph whose units run at any batch: torch.fx traced, and no unit with a shape
    written in (a size one unit reads of a tensor another holds, models/auto_chain.py); torch.export
    fixes the batch in every shape."""
    chain = build(model_spec, batch=batch, device="meta", overrides=options, precision=precision)
    if chain.config.get("traced") != "torch.fx":
        raise KarmaError(f"{model_spec}: the reach search needs a graph torch.fx traces (this one was traced by "
                         f"{chain.config.get('traced')}, whose shapes are its batch's)")
    fixed = [name for name, unit in chain.units.named_children() if getattr(unit, "fixed_shapes", False)]
    if fixed:
        raise KarmaError(f"{model_spec}: unit {fixed[0]} has its traced batch's shapes written in (a size it reads of "
                         f"a tensor another unit holds): the reach search needs units that run at any batch")
    return Batches(lambda b: analytic_profile(replace(chain, batch=b), hw))


def attempt(strategy: str, profile: Profile, hw: Hardware, capacity: float, work: float = SEARCH_WORK) -> Plan | None:
    """The strategy's plan for `profile`, fitting or not (a baseline that cannot fit returns its most
    frugal one); None when it has none. KARMA's planner runs at `work` and has none when nothing fits."""
    try:
        if strategy == "karma":
            return karma_plan(profile, hw, capacity, config=PlannerConfig().longer(work))
        return get(strategy)(profile, hw, capacity)
    except KarmaError:
        return None


def plan_fits(plan: Plan | None, profile: Profile, hw: Hardware, capacity: float) -> bool:
    """Whether `plan` (made at any batch: its blocks, layout and depth) fits on `profile`."""
    return plan is not None and simulate(profile, replace(plan, batch=profile.batch), hw, capacity,
                                         record=False).feasible


def fits(strategy: str, profile: Profile, hw: Hardware, capacity: float, work: float = SEARCH_WORK) -> bool:
    """Whether `strategy` has a plan that fits `capacity` on `profile`; KARMA's planner at `work`."""
    return plan_fits(attempt(strategy, profile, hw, capacity, work), profile, hw, capacity)


def outcome(strategy: str, profile: Profile, hw: Hardware, capacity: float) -> Outcome:
    """The strategy's plan at full budget, simulated; a planner that finds none is 'no plan'."""
    try:
        return run_strategy(strategy, profile, hw, capacity)
    except KarmaError as err:
        return Outcome(strategy, None, None, error=str(err))


def guess_reach(strategy: str, batches: Batches, hw: Hardware, capacity: float, limit: int, start: int,
                work: float = SEARCH_WORK, ask: Callable[[int], bool] | None = None) -> int | None:
    """A guess of the strategy's reach on the surrogate, asking the strategy once: a baseline that
    cannot fit returns its most frugal configuration (baselines/_choose.py), so its plan at the limit
    is the configuration that saves most there, and the last batch that configuration fits (cheap
    simulations of a fixed plan) is near the last batch at which the strategy finds any (a baseline
    can take seconds per plan on a long chain: Capuchin's greedy simulates per unit). A strategy with
    no plan there (KARMA's planner when nothing fits) is bisected from `start`, asked at every step
    (`ask(batch)`: whether it fits on the surrogate)."""
    ask = ask or (lambda b: fits(strategy, batches.approx(b), hw, capacity, work))
    plan = attempt(strategy, batches.approx(limit), hw, capacity, work)
    if plan is None:
        return largest_batch(ask, limit, start)
    return largest_batch(lambda b: plan_fits(plan, batches.approx(b), hw, capacity), limit, start)


def search(strategy: str, batches: Batches, hw: Hardware, capacity: float, limit: int,
           work: float = SEARCH_WORK, guess: int | None = None, confirm: bool = True) -> tuple[int | None, str]:
    """(largest batch that fits, note): a guess on the surrogate from `guess` (`guess_reach`),
    settled on exact profiles (`largest_batch`); with `confirm`, KARMA's planner is asked again at
    full budget at the batch after its reach (module docstring)."""
    answers: dict[tuple[int, float, bool], bool] = {}

    def ask(batch: int, w: float = work, exact: bool = True) -> bool:
        profile = batches.exact(batch) if exact else batches.approx(batch)
        key = (batch, w, batch in batches.exact_profiles)  # a surrogate already exact shares its answer
        if key not in answers:
            answers[key] = fits(strategy, profile, hw, capacity, w)
        return answers[key]

    guess = guess_reach(strategy, batches, hw, capacity, limit, guess or 1, work, lambda b: ask(b, exact=False))
    reach = largest_batch(ask, limit, guess or 1)
    note, level = "", work
    while confirm and strategy == "karma" and reach is not None and reach < limit and level < 1.0:
        if not ask(reach + 1, 1.0):
            break
        # the search at `level` missed plans: again from the batch that fits, at twice the budget
        level = min(2 * level, 1.0)
        found = largest_batch(lambda b, w=level: ask(b, w), limit, reach + 1)
        note = (f"the search at work {work} stopped at {reach}; at work {level} (the next batch at full budget) "
                f"it went on to {max(found or 0, reach + 1)}")
        reach = max(found or 0, reach + 1)
    return reach, note


@dataclass
class Row:
    """One (model, strategy) of the reach table; throughputs over in-core's at its largest batch."""

    granularity: str
    model: str
    strategy: str
    incore_batch: int | None
    reach_batch: int | None
    limit_batch: int
    time_s: float | None = None
    relative: dict[int, float | None] = field(default_factory=dict)
    note: str = ""
    source: str = ""

    def record(self, incore_samples_per_s: float | None, multiples: Iterable[int]) -> dict:
        samples = self.reach_batch / self.time_s if (self.reach_batch and self.time_s) else None

        def over(x: float | None) -> float | None:
            return x / incore_samples_per_s if (x is not None and incore_samples_per_s) else None

        return {
            "granularity": self.granularity,
            "model": self.model,
            "strategy": self.strategy,
            "incore_batch": self.incore_batch,
            "reach_batch": self.reach_batch,
            "reach_over_incore": (self.reach_batch / self.incore_batch
                                  if (self.reach_batch and self.incore_batch) else None),
            "limit_batch": self.limit_batch,
            "limit_hit": self.reach_batch is not None and self.reach_batch >= self.limit_batch,
            "time_s": self.time_s,
            "samples_per_s": samples,
            "vs_incore": over(samples),
            **{f"vs_incore_{m}x": over(self.relative.get(m)) for m in multiples},
            "note": self.note,
            "source": self.source,
        }


def model_reach(model: str, batches: Batches, hw: Hardware, strategies: list[str], *, granularity: str = "block",
                multiples: Iterable[int] = MULTIPLES, limit_factor: int = LIMIT_FACTOR, work: float = SEARCH_WORK,
                first_guess: int = 1, confirm: bool = True, log: Callable[[str], None] = print) -> list[dict]:
    """The reach rows of one model: in-core's largest batch first (the reference), then every strategy's."""
    multiples = list(multiples)
    capacity = hw.device_memory
    source = f"simulated on {hw.name} ({granularity} units, analytic profiles)"
    start = time.perf_counter()
    batches.exact(1)
    batches.exact(max(first_guess, 2))
    incore, _ = search("incore", batches, hw, capacity, limit_factor * max(first_guess, 1), work, first_guess)
    limit = limit_factor * (incore or 1)
    batches.exact(limit)  # the surrogate's far anchor
    log(f"{model} ({granularity}): largest in-core batch {incore}, search limit {limit} "
        f"({time.perf_counter() - start:.1f} s)")
    runs: dict[tuple[str, int], Outcome] = {}

    def samples_per_s(strategy: str, batch: int) -> float | None:
        if (strategy, batch) not in runs:
            runs[strategy, batch] = outcome(strategy, batches.exact(batch), hw, capacity)
        o = runs[strategy, batch]
        return batch / o.time if o.time else None

    incore_speed = samples_per_s("incore", incore) if incore else None
    rows = []
    for strategy in dict.fromkeys(["incore", *strategies]):
        if strategy == "incore" and strategy not in strategies:
            continue
        t = time.perf_counter()
        if strategy == "incore":
            reach, note = incore, ""
        else:
            known = [r["reach_batch"] for r in rows if r["reach_batch"]]
            reach, note = search(strategy, batches, hw, capacity, limit, work, max(known, default=incore), confirm)
        row = Row(granularity, model, strategy, incore, reach, limit, note=note, source=source)
        if reach:
            samples_per_s(strategy, reach)
            o = runs[strategy, reach]
            row.time_s = o.time
            if o.time is None:
                row.note = "; ".join(filter(None, [row.note, f"the full plan at its reach is {o.status}: "
                                                   f"{o.error or (o.result.reason if o.result else '')}"]))
        elif reach is None:
            row.note = "; ".join(filter(None, [row.note, "no plan fits even at batch 1"]))
        if incore:
            for m in multiples:
                if reach and m * incore <= reach:
                    row.relative[m] = samples_per_s(strategy, m * incore)
        if reach and reach >= limit:
            row.note = "; ".join(filter(None, [row.note, f"search limit hit: the reach is at least {limit}"]))
        rows.append(row.record(incore_speed, multiples))
        log(f"  {strategy}: reach {reach} ({time.perf_counter() - t:.1f} s)")
    if not incore:
        for r in rows:
            r["note"] = "; ".join(filter(None, [r["note"], "in-core training does not fit even at batch 1: "
                                                "no in-core reference, the limit is a multiple of batch 1"]))
    log(f"{model} ({granularity}): {len(batches.exact_profiles)} exact profiles ({batches.seconds:.1f} s), "
        f"{time.perf_counter() - start:.1f} s in all")
    return rows


def reach_table(models: list[str], hw: Hardware, strategies: list[str], *, granularities: Iterable[str] = ("block",),
                multiples: Iterable[int] = MULTIPLES, limit_factor: int = LIMIT_FACTOR, work: float = SEARCH_WORK,
                precision: str = "fp32", confirm: bool = True, log: Callable[[str], None] = print,
                layer_models: Iterable[str] | None = None, own_models: Iterable[dict] = ()) -> pd.DataFrame:
    """Rows per (granularity, model, strategy) for zoo models at paper size (a model without units
    at a granularity is skipped, and the log says so); the search starts from the paper batch.
    `layer_models`: the models searched at layer granularity (default all of `models`): a layer
    chain is ten times longer, and its planning as many times slower. `own_models`: model specs
    (`name`, `spec`, `batch` where the search starts, `options`), cut automatically (block rows)."""
    rows = []
    for granularity in granularities:
        chosen = models if granularity != "layer" or layer_models is None else \
            [m for m in models if m in set(layer_models)]
        for model in chosen:
            try:
                batches = zoo_batches(model, hw, granularity, precision)
            except KarmaError as err:
                log(f"{model} ({granularity}): skipped: {err}")
                continue
            rows += model_reach(model, batches, hw, strategies, granularity=granularity, multiples=multiples,
                                limit_factor=limit_factor, work=work, first_guess=spec(model).batch["paper"],
                                confirm=confirm, log=log)
    for own in own_models:
        batches = spec_batches(own["spec"], dict(own.get("options") or {}), hw, precision, int(own.get("batch", 1)))
        rows += model_reach(own["name"], batches, hw, strategies, multiples=multiples, limit_factor=limit_factor,
                            work=work, first_guess=int(own.get("batch", 1)), confirm=confirm, log=log)
    return pd.DataFrame(rows)

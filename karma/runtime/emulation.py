"""The emulated device's Hardware and the check of the performance model against the runtime.

docs/design.md, "Measured versus simulated": the CPU computes two orders of magnitude
slower than a V100, so the emulated link is slowed by the same factor to keep
the paper's regime: link = PCIe bandwidth of the reference x (this CPU's achieved
FLOP rate / the reference's sustained rate), from a measured profile.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from karma.core.hardware import Hardware, load
from karma.core.host_memory import keep_freed_memory
from karma.plan.plan import Plan
from karma.profile.profile import Profile
from karma.runtime.attribution import step_terms
from karma.runtime.drift import at_speed, fit_speed, predictor
from karma.runtime.execute import StepReport, make_optimizer, train_step
from karma.runtime.ledger import DeviceOOM, Ledger
from karma.runtime.link import EmulatedLink, emulated_label
from karma.runtime.rates import Rates
from karma.runtime.streamed import HostWeights
from karma.sim.simulate import simulate
from karma.strategies import get
from models.chain import ChainModel


def achieved_flops(profile: Profile) -> float:
    work = sum(u.forward_flops + u.backward_flops for u in profile.units)
    return work / (profile.forward_time() + profile.backward_time())


def default_link_bandwidth(profile: Profile, reference: str = "v100-abci") -> float:
    """Bytes/s of the emulated link that keep the reference machine's compute-to-link ratio."""
    ref = load(reference)
    return ref.h2d_bw * achieved_flops(profile) / ref.flops


def emulated_hardware(profile: Profile, rates: Rates, capacity: float) -> Hardware:
    """The machine a run happens on, as the simulator's Hardware: the reference's network and
    kernel-free compute at this profile's achieved rate, with the rates measured here."""
    ref = load("v100-abci")
    name = emulated_label(rates.h2d) if rates.link == "emulated" else "this machine"
    return replace(ref, name=name, device_memory=capacity, flops=achieved_flops(profile), memory_bw=rates.memory_bw,
                   h2d_bw=rates.h2d, d2h_bw=rates.d2h, host_update_bw=rates.host_update, kernel_launch=0.0,
                   description=f"this machine as the device: {rates.describe()}")


class EmulatedSession:
    """One plan's chain, optimizer and link on the emulated device, open across steps, so that the
    steps of several plans can be interleaved (validate). Step s trains on the batch of seed s."""

    def __init__(self, chain, plan, capacity: float, link_bw: float):
        keep_freed_memory()  # freed blocks reused, not faulted in again, as a GPU's caching allocator reuses them
        self.chain, self.plan, self.capacity = chain, plan, capacity
        self.link = EmulatedLink(link_bw, link_bw)
        self.optimizer = None
        self.step_no = 0
        try:
            # a host optimizer with resident weights sends the updated weights back up over the link
            self.optimizer = HostWeights(chain, plan, link=self.link) if plan.host_optimizer else make_optimizer(chain)
        except BaseException:
            self.close()
            raise

    def step(self, track: bool) -> StepReport:
        """One training step; `track`: a memory step (every tensor on the ledger, see run_steps)."""
        report = train_step(self.chain, self.plan, self.optimizer, self.chain.make_batch(seed=self.step_no),
                            Ledger(self.capacity), self.link, track=track)
        self.step_no += 1
        return report

    def close(self) -> None:
        if isinstance(self.optimizer, HostWeights):
            self.optimizer.close()
        self.link.close()


def run_steps(chain, plan, capacity: float, link_bw: float, steps: int) -> tuple[StepReport, list[StepReport]]:
    """A memory step (also the warm-up), `steps` timed steps and a second memory step of `chain`
    under `plan` on the emulated device; returns (the memory step with the higher peak, timed steps).

    Memory steps put every tensor they create on the ledger: the peak is the measured peak, and
    they raise DeviceOOM past the capacity. The timed steps run the same computation without that
    per-tensor accounting (a Python dispatch mode, 5-20% of a step on this CPU, which a GPU's
    allocator does not cost); they still account weights and what swapped blocks save.
    """
    session = EmulatedSession(chain, plan, capacity, link_bw)
    try:
        first = session.step(track=True)
        timed = [session.step(track=False) for _ in range(steps)]
        last = session.step(track=True)
    finally:
        session.close()
    return max(first, last, key=lambda r: r.peak_bytes), timed


@dataclass(frozen=True)
class EmulatedRunner:
    """Runs a plan on the emulated device: this CPU, the ledger as its memory, the emulated link.
    `runner(plan)` runs it whole (run_steps); `runner.open(plan)` gives an EmulatedSession, whose
    steps validate interleaves with other plans'."""

    chain_factory: Callable[[], ChainModel]
    capacity: float
    link_bw: float
    steps: int = 3

    def where(self) -> str:
        return emulated_label(self.link_bw)

    def __call__(self, plan: Plan) -> tuple[StepReport, list[StepReport]]:
        return run_steps(self.chain_factory(), plan, self.capacity, self.link_bw, self.steps)

    def open(self, plan: Plan) -> EmulatedSession:
        return EmulatedSession(self.chain_factory(), plan, self.capacity, self.link_bw)


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def measure(runner, plans: dict[str, Plan], repeats: int) -> dict[str, dict]:
    """Run every plan `repeats` times, interleaved: repeat r runs each plan once, the order rotated
    by r, so that a machine getting busier or quieter hits every plan alike. Per plan: {"times":
    one per repeat (median of its timed steps), "peak": the memory steps' peak, "wait": the most seconds a
    step's allocations waited for copies to the host (karma/runtime/ledger.py)} or {"error": the
    DeviceOOM}.

    A runner with `open(plan)` (EmulatedRunner) keeps each plan's session open: one memory step
    (the warm-up) before the first repeat, `runner.steps` timed steps per repeat, one memory step
    after the last. Any other runner (CudaRunner: a process per run) runs whole per repeat.
    "last" holds the last timed step (its time and timeline), for `_attribute_last_steps`."""
    names = list(plans)
    out: dict[str, dict] = {name: {"times": [], "peak": 0.0, "wait": 0.0} for name in names}
    sessions = {}

    def fail(name, err):
        out[name] = {"error": err}
        session = sessions.pop(name, None)
        if session is not None:
            session.close()

    try:
        if hasattr(runner, "open"):
            for name in names:
                try:
                    sessions[name] = runner.open(plans[name])
                    first = sessions[name].step(track=True)
                    out[name]["peak"], out[name]["wait"] = first.peak_bytes, first.memory_wait
                except DeviceOOM as err:
                    fail(name, err)
        for r in range(repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                if "error" in out[name]:
                    continue
                try:
                    if name in sessions:
                        timed = [sessions[name].step(track=False) for _ in range(runner.steps)]
                    else:
                        memory, timed = runner(plans[name])
                        out[name]["peak"] = max(out[name]["peak"], memory.peak_bytes)
                    out[name]["times"].append(statistics.median(t.time for t in timed))
                    out[name]["last"] = timed[-1]
                    out[name]["wait"] = max([out[name]["wait"]] + [t.memory_wait for t in timed])
                except DeviceOOM as err:
                    fail(name, err)
        for name, session in list(sessions.items()):
            try:
                last = session.step(track=True)
                out[name]["peak"] = max(out[name]["peak"], last.peak_bytes)
                out[name]["wait"] = max(out[name]["wait"], last.memory_wait)
            except DeviceOOM as err:
                fail(name, err)
    finally:
        for session in sessions.values():
            session.close()
    return out


def _relative_accuracy(df: pd.DataFrame, results: dict[str, dict], repeats: int, predict) -> list[dict]:
    """Columns of the step-time accuracy within each repeat (karma/report/regress.py enforces them); returns,
    per repeat, every planned strategy's expected time at that repeat's speed.

    The profile is measured once, before the runs; on this shared machine the processor's speed drifts
    10-25% between then and a repeat (docs/machine.md), which moves the plans bound by compute, not those bound
    by the link (karma/runtime/drift.py). Per repeat, over the strategies that ran every repeat:
    `repeat_scale` is the median of measured / predicted (the drift, and any error common to every plan),
    `processor_speed` the compute speed factor at which that median is 1 (fit_speed), and
    `measured_over_predicted_rel` each strategy's measured time over its prediction at that speed: how well
    the model tells the plans apart, which is what planning needs. Where no speed explains the repeat
    (plans all bound by the link), every prediction is scaled by `repeat_scale` instead. All as median,
    _min and _max over the repeats. `predict(factor)` gives every planned strategy's simulated time at a
    speed factor (drift.predictor)."""
    complete = {name: r["times"] for name, r in results.items() if "error" not in r and len(r["times"]) == repeats}
    columns = ("measured_over_predicted_rel", "measured_over_predicted_rel_min", "measured_over_predicted_rel_max",
               "repeat_scale", "repeat_scale_min", "repeat_scale_max",
               "processor_speed", "processor_speed_min", "processor_speed_max")
    for column in columns + ("karma_excess_error", "karma_excess_error_min", "karma_excess_error_max"):
        df[column] = float("nan")
    df["order_pairs_tested"], df["order_disagreements"] = 0, ""
    if not complete or not repeats:
        return []
    base = predict(1.0)
    expected, scales, speeds = [], [], []
    for r in range(repeats):
        measured = {name: times[r] for name, times in complete.items()}
        scales.append(statistics.median(t / base[name] for name, t in measured.items()))
        speed = fit_speed(predict, measured)
        if speed is None:
            expected.append({name: t * scales[-1] for name, t in base.items()})
        else:
            speeds.append(speed)
            expected.append(predict(speed))
    for name, times in complete.items():
        rel = _spread([t / e[name] for t, e in zip(times, expected, strict=True)])
        df.loc[df.strategy == name, list(columns[:3])] = rel
    df[list(columns[3:6])] = _spread(scales)
    if speeds:
        df[list(columns[6:])] = _spread(speeds)
    excess = karma_excess_error(complete, expected)
    df[["karma_excess_error", "karma_excess_error_min", "karma_excess_error_max"]] = excess or (float("nan"),) * 3
    tested, wrong = order_disagreements(complete, expected)
    df["order_pairs_tested"], df["order_disagreements"] = tested, "; ".join(wrong)
    return expected


def karma_excess_error(times: dict[str, list[float]], expected: list[dict[str, float]]) -> tuple | None:
    """Per repeat, KARMA's error (|measured / predicted at that repeat's speed - 1|) less the median of the other
    strategies' errors: how much worse the model predicts the plan KARMA's search picked than the baselines'
    fixed rules (the optimizer's curse, docs/profiles.md); median, min and max over the repeats. None
    without KARMA or a baseline."""
    others = [name for name in times if name != "karma"]
    if "karma" not in times or not others:
        return None
    excess = []
    for r, e in enumerate(expected):
        errors = {name: abs(t[r] / e[name] - 1) for name, t in times.items()}
        excess.append(errors["karma"] - statistics.median(errors[name] for name in others))
    return _spread(excess)


def order_disagreements(times: dict[str, list[float]], expected: list[dict[str, float]]) -> tuple[int, list[str]]:
    """(pairs tested, those measured in the other order): every pair of strategies whose predicted ratio (the median
    over the repeats, each at its repeat's speed) is further from 1 than the spread of their measured ratio over
    the repeats (max / min) must measure in the predicted order (the median of the measured ratios on the same side
    of 1); pairs within their spread are not tested: the repeats cannot tell their order."""
    tested, wrong = 0, []
    names = list(times)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            measured = [ta / tb for ta, tb in zip(times[a], times[b], strict=True)]
            predicted = statistics.median(e[a] / e[b] for e in expected)
            if abs(math.log(predicted)) <= math.log(max(measured) / min(measured)):
                continue
            tested += 1
            found = statistics.median(measured)
            if (found > 1) != (predicted > 1):
                wrong.append(f"{a} / {b} predicted {predicted:.3f}, measured {found:.3f}")
    return tested, wrong


#: column names of the step's terms (karma/runtime/attribution.py)
TERM_SLUGS = {"forward": "forward", "backward and recompute": "backward", "device optimizer step": "device_optimizer",
              "waits between compute operations": "waits", "before the first compute operation": "start",
              "after the last compute operation": "tail"}


def _attribute_last_steps(df: pd.DataFrame, profile: Profile, hw: Hardware, capacity: float, plans: dict[str, Plan],
                          results: dict[str, dict], predict) -> None:
    """Columns `<term>_measured_s` and `<term>_predicted_s` per strategy: its last timed step split into the
    terms of karma/runtime/attribution.py, beside its prediction at the processor speed of the last repeat
    (drift.fit_speed over the strategies' last steps; the profile's speed where none explains them), so that
    drift does not read as a compute term's error."""
    last = {name: r["last"] for name, r in results.items() if "error" not in r and "last" in r}
    df["terms_processor_speed"] = float("nan")
    if not last:
        return
    speed = fit_speed(predict, {name: step.time for name, step in last.items()}) or 1.0
    fast_profile, fast_hw = at_speed(profile, hw, speed)
    for name, step in last.items():
        sim = simulate(fast_profile, plans[name], fast_hw, capacity)  # its makespan: a time even past capacity
        mine, theirs = step_terms(step.timeline, step.time), step_terms(sim.timeline, sim.makespan)
        for term, slug in TERM_SLUGS.items():
            df.loc[df.strategy == name, [f"{slug}_measured_s", f"{slug}_predicted_s"]] = mine[term], theirs[term]
        df.loc[df.strategy == name, "terms_processor_speed"] = speed


def validate(profile: Profile, strategies: list[str], capacity: float, rates: Rates, runner,
             headroom: float = 0.05, repeats: int = 1) -> pd.DataFrame:
    """Plan every strategy on the measured profile, simulate it and run it; one row per strategy.

    A profile with a held-out estimate (karma/profile/measured.py, `holdout`) plans on its times and
    predicts every plan on the held-out ones, whose noise the choice of plan has not seen: a strategy
    that searches many plans (KARMA, rotor, Capuchin) picks the one whose units measured cheapest,
    noise included, and a prediction from the same numbers would be optimistic for it alone.

    Plans are made for `capacity` less `headroom` (the memory model's error, a few percent, must
    not turn a planned fit into an OOM), simulated with the machine's `rates`
    (karma/runtime/rates.py) and run under the full `capacity` by `runner` (measure): an
    EmulatedRunner here, a karma.runtime.cuda.CudaRunner on a GPU (which caps the memory in the
    process it runs in), `repeats` times interleaved. Every strategy's run starts from a freshly
    built chain. Measured times are the median over the repeats with their range (columns _min,
    _max); KARMA's measured speedup over each strategy is taken per repeat (both ran in the same
    repeat, close in time) and given the same way.
    """
    planned = capacity * (1 - headroom)
    hw = replace(emulated_hardware(profile, rates, planned), name=runner.where())
    evaluation = profile.held_out()
    held = " (planned on it, predicted on its held-out estimate)" if profile.has_holdout else ""
    rows, plans = [], {}
    for name in strategies:
        plan = get(name)(profile, hw, planned)
        # held to the capacity it runs under: the held-out times move copies, and with them the peak, a little,
        # so a plan that fits the planned capacity on the planning times can pass it on the held-out ones
        sim = simulate(evaluation, plan, hw, capacity)
        rows.append({"model": profile.model, "batch": profile.batch, "strategy": name, "plan": plan.policies(),
                     "predicted_s": sim.time, "predicted_peak_MB": sim.peak_bytes / 1e6,
                     "capacity_MB": capacity / 1e6, "repeats": repeats, "measured_s": None, "measured_s_min": None,
                     "measured_s_max": None, "measured_peak_MB": None, "memory_wait_s": None,
                     **{f"{slug}_{side}_s": None for slug in TERM_SLUGS.values() for side in ("measured", "predicted")},
                     "status": "ok" if sim.feasible else "OOM (simulated)",
                     "rates": rates.describe(),
                     # exact, to replay the plans from the run's saved profile (karma/runtime/replay.py)
                     "h2d_Bps": rates.h2d, "d2h_Bps": rates.d2h, "device_optimizer_Bps": rates.memory_bw,
                     "host_optimizer_Bps": rates.host_update, "planned_capacity_bytes": planned,
                     "source": f"measured on {hw.name}, median of {repeats} interleaved repeats; predicted by the "
                               f"simulator on the measured profile{held} and the rates measured on this machine "
                               f"(column rates)"})
        if sim.feasible:
            plans[name] = plan
    results = measure(runner, plans, repeats)
    for row in rows:
        result = results.get(row["strategy"])
        if result is None:
            continue
        if "error" in result:
            row["status"] = f"OOM (measured): {result['error']}"
            continue
        row["measured_s"], row["measured_s_min"], row["measured_s_max"] = _spread(result["times"])
        row["measured_peak_MB"] = result["peak"] / 1e6
        row["memory_wait_s"] = result.get("wait", 0.0)
    df = pd.DataFrame(rows)
    for column in ("measured_s", "measured_s_min", "measured_s_max", "measured_peak_MB", "memory_wait_s",
                   *(f"{slug}_{side}_s" for slug in TERM_SLUGS.values() for side in ("measured", "predicted"))):
        df[column] = pd.to_numeric(df[column])
    df["measured_over_predicted"] = df.measured_s / df.predicted_s
    df["peak_measured_over_predicted"] = df.measured_peak_MB / df.predicted_peak_MB
    predict = predictor(evaluation, hw, capacity, plans)
    expected = _relative_accuracy(df, results, repeats, predict)
    _attribute_last_steps(df, evaluation, hw, capacity, plans, results, predict)
    karma = results.get("karma")
    if "karma" in set(df.strategy):
        speedups = {name: None for name in df.strategy}
        if karma is not None and "error" not in karma:
            for name, result in results.items():
                if "error" not in result:
                    speedups[name] = _spread([t / k for t, k in zip(result["times"], karma["times"], strict=True)])
        for i, column in enumerate(("karma_speedup_measured", "karma_speedup_measured_min",
                                    "karma_speedup_measured_max")):
            df[column] = pd.to_numeric(df.strategy.map(lambda n, i=i: speedups[n][i] if speedups[n] else None))
        df["karma_speedup_predicted"] = df.predicted_s / df[df.strategy == "karma"].predicted_s.iloc[0]
        # the same at each repeat's processor speed (drift.py), the median over the repeats: what the
        # measured speedup is compared with (karma/report/regress.py)
        at_speed = {name: statistics.median(e[name] / e["karma"] for e in expected)
                    for name in plans} if expected and "karma" in plans else {}
        df["karma_speedup_predicted_at_speed"] = pd.to_numeric(df.strategy.map(at_speed))
    return df

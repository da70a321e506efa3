"""Compare strategies on one profile, and summarise KARMA's speedups across models.

Every number here is *simulated* (the performance model on a Hardware preset)
and the rows say so. Speedups are ratios of times from the same simulation;
an OOM plan has no time, so no speedup is claimed against it.
"""

from __future__ import annotations

import math
import time

import pandas as pd

from karma.bound import lower_bound
from karma.errors import KarmaError
from karma.hardware import Hardware
from karma.profile import Profile
from karma.strategy import Outcome, run_strategy

#: Wahib et al. SC'20, abstract: average speedup over state-of-the-art out-of-core methods.
PAPER_SPEEDUP = 1.52


def compare(profile: Profile, hw: Hardware, strategies: list[str], capacity: float | None = None
            ) -> tuple[pd.DataFrame, dict[str, Outcome]]:
    """One row per strategy: status, time, KARMA's speedup over it, time / lower bound."""
    capacity = hw.device_memory if capacity is None else capacity
    bound = lower_bound(profile, hw, capacity)
    outcomes, seconds = {}, {}
    for name in strategies:
        start = time.perf_counter()
        try:
            outcomes[name] = run_strategy(name, profile, hw, capacity)
        except KarmaError as err:
            if name != "karma":
                raise
            outcomes[name] = Outcome(name, None, None, error=str(err))
        seconds[name] = time.perf_counter() - start
    karma = outcomes.get("karma")
    karma_time = karma.time if karma else None
    rows = []
    for name, o in outcomes.items():
        r = o.result
        rows.append({
            "model": profile.model,
            "batch": profile.batch,
            "strategy": name,
            "status": o.status,
            "time_s": o.time,
            "karma_speedup": (o.time / karma_time) if (o.time and karma_time) else None,
            "time_over_bound": (o.time / bound) if o.time else None,
            "bound_s": bound,
            "peak_GB": r.peak_bytes / 1e9 if r else None,
            "h2d_GB": r.bytes_h2d / 1e9 if r else None,
            "d2h_GB": r.bytes_d2h / 1e9 if r else None,
            "capacity_GB": capacity / 1e9,
            "planning_s": seconds[name],
            "plan": o.plan.policies() if o.plan else "",
            "weights": o.plan.weights if o.plan else "",
            "reason": (r.reason or "") if r else o.error,
            "source": f"simulated on {hw.name} (analytic profile)",
        })
    return pd.DataFrame(rows), outcomes


def geomean(values) -> float | None:
    values = [v for v in values if v and v > 0 and not math.isnan(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: KARMA vs the best baseline, plan/bound, and a note where no big win is possible."""
    rows = []
    for model, df in table.groupby("model", sort=False):
        base = df[(df.strategy != "karma") & (df.status == "ok")]
        karma = df[df.strategy == "karma"].iloc[0]
        best = base.loc[base.time_s.idxmin()] if len(base) else None
        note = ""
        if best is None:
            note = "every baseline is OOM: only KARMA's plan fits"
        elif (base.strategy == "checkpoint").any():
            note = "checkpointing fits: it costs about one extra forward, so no plan beats it by more than ~1.33x"
        rows.append({
            "model": model,
            "batch": karma.batch,
            "karma_s": karma.time_s,
            "best_baseline": best.strategy if best is not None else "none fits",
            "best_baseline_s": best.time_s if best is not None else None,
            "speedup_over_best": (best.time_s / karma.time_s) if (best is not None and karma.time_s) else None,
            "geomean_speedup_over_baselines": geomean(base.karma_speedup),
            "karma_over_bound": karma.time_over_bound,
            "baselines_oom": ", ".join(df[(df.strategy != "karma") & (df.status != "ok")].strategy),
            "karma_planning_s": karma.planning_s,
            "note": note,
            "source": karma.source,
        })
    return pd.DataFrame(rows)


def headline(table: pd.DataFrame, summ: pd.DataFrame) -> dict:
    """The claims side by side with the paper's."""
    pairs = table[(table.strategy != "karma") & table.karma_speedup.notna()].karma_speedup
    return {
        "geomean_speedup_over_all_feasible_baselines": geomean(pairs),
        "geomean_speedup_over_best_baseline": geomean(summ.speedup_over_best),
        "paper_average_speedup": PAPER_SPEEDUP,
        "worst_karma_over_bound": summ.karma_over_bound.max(),
        "models_where_karma_is_not_fastest": int((summ.speedup_over_best < 1 - 1e-9).sum()),
    }

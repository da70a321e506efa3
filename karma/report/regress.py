"""Regression tracking: the pipeline's headline numbers against a committed reference.

`collect` reads the tables the pipeline writes and keeps the numbers worth tracking, one row
each (metric, kind, value, min, max, target, note):

* ``simulated``: deterministic (analytic profiles, seeded planner); must match the reference
  within 1%.
* ``measured``: ratios timed on this machine from repeated, interleaved runs (value = median,
  min and max over the repeats; docs/machine.md: single runs move 10-20%, a busy machine more). Where
  both runs carry the model's prediction of the ratio (column predicted, from the profile
  measured in that run, at the processor's speed in its repeats: karma/runtime/drift.py), the
  ratio is compared as measured / predicted: a KARMA speedup over vDNN on a CPU that computes
  1.8x slower behind the same fixed emulated link is about half the reference's, as predicted,
  and only the part the model does not explain is a regression: a run whose whole range lies
  nearer the prediction than the reference's median is not one (the reference run may have been
  the disturbed one). A change is a regression when the spread cannot explain it: the reference
  median outside the new run's [min, max] widened by the reference's own spread (max - min) and
  by MEASURED_FLOOR of the value (three repeats underestimate the spread: two runs of the same
  code on one machine can move a speedup over its prediction by more than their own ranges); or
  the claim changes sign: the reference's whole range on one side of 1, the new run's whole range
  on the other (a new range that straddles 1 claims nothing), where the model predicts a clear
  difference (column predicted at least a factor 1 + MEASURED_NOISE from 1, either way: a predicted
  tie, such as 1.02, crosses 1 on noise alone; docs/machine.md puts this machine's noise on small
  ratios at 10-25%, and the step accuracy the model is held to, STEP_TIME_TARGET on each of the
  ratio's two steps, allows more: a ratio predicted at 1.10 can measure below 1 with both of its
  steps within their target). A measured number that is absent (KARMA absent or out of memory,
  or the strategy's own run out of memory) is a failure.
* ``accuracy``: measured / predicted (step time, peak, the data-parallel naive/pipelined
  ratio). A step time is judged within its repeat (karma/runtime/emulation.py, _relative_accuracy):
  each strategy's time over its prediction at the processor's speed in that repeat (STEP_TIME_TARGET;
  the speed at which the median of these is 1, karma/runtime/drift.py), KARMA's error less the median
  baseline's (none below: the planner's pick must not be where the model is most optimistic; over every
  measured model KARMA_EXCESS_TARGET, on one KARMA_EXCESS_MODEL_TARGET, which adds one step's noise), and
  the repeat's median of
  measured / predicted, the scale (STEP_SCALE_TARGET, wider: the machine's drift since the profile
  was measured moves it), so that drift is not read as a model error and an error on every plan
  alike still fails. The target the tables print (column target) must hold whatever the reference
  says, for the repeat closest to the prediction: fails when the run's whole range [min, max] lies
  outside 1 +- target (a peak: 1 + target above, 1 - PEAK_BELOW_TARGET below, see there). A busy
  machine slows some repeats, never speeds one up, so the median of three drifts with the load
  while the least disturbed repeat still tests the model.
* ``check``: 1 when a measured run shows what the model predicts (the data-parallel ratio's
  sign), 0 when not; 0 fails.
* ``reported``: printed for the record, not enforced (see its note).

`compare` gives every row a verdict: ok, REGRESSION, MISSING (a reference number the new run
does not have), FAILED (absent measurement, a target missed, a check failed), new (not in the
reference), or reported. `karma compare --strict` exits non-zero on REGRESSION, MISSING or
FAILED; the pipeline's regression rule runs without it and never fails on the verdicts.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd

from karma.core.errors import KarmaError
from karma.experiments.speedups import geomean

SIMULATED_TOLERANCE = 0.01
#: the lower end of this machine's run-to-run noise on small measured ratios (docs/machine.md: 10-25%)
MEASURED_FLOOR = 0.10
#: A predicted ratio within a factor 1 + this of 1 is a tie as far as a measured sign can tell
#: (docs/machine.md: the upper end of the 10-25% noise on small measured ratios)
MEASURED_NOISE = 0.25
#: |measured / predicted - 1| of a runtime step within its repeat (measured_vs_predicted), in the closest repeat
STEP_TIME_TARGET = 0.05
#: KARMA's |measured / predicted - 1| less the median baseline's: the plan a search picks must not be predicted
#: worse than the fixed rules' plans (the optimizer's curse, docs/profiles.md). Held over the measured models
#: together: the median over the models of each one's closest repeat
KARMA_EXCESS_TARGET = 0.02
#: the standard deviation of one step's within-repeat error on this machine, the baselines' (docs/regression.md)
STEP_NOISE = 0.035
#: KARMA's excess error on one model, in its closest repeat: the target above plus one step's noise, as one
#: model's three single steps cannot tell a bias of two points from noise (docs/regression.md)
KARMA_EXCESS_MODEL_TARGET = KARMA_EXCESS_TARGET + STEP_NOISE
#: of the absolute step (reported): the drift since the profile, which the within-repeat rows take out
STEP_ABSOLUTE_TARGET = 0.15
#: of a repeat's scale, the median of measured / predicted over its strategies: the drift of this shared machine
#: between the profile and the repeat (docs/machine.md: 10-25%) and any error the model makes on every plan alike
STEP_SCALE_TARGET = 0.30
PEAK_TARGET = 0.05  # of a runtime peak above its prediction (the runtime must not outgrow the model)
#: of a runtime peak below its prediction: where copies race the compute (swaps, host optimizers) the peak
#: depends on when a copy ends, and a quiet run can measure it several percent below the model's
#: (ZeRO-Offload's; docs/measurements/README.md); a model that over-estimates wastes memory but never runs
#: a plan out of it
PEAK_BELOW_TARGET = 0.10
DP_RATIO_TARGET = 0.15  # of the data-parallel naive / pipelined ratio (distributed_validation table)
TP_RATIO_TARGET = 0.15  # of the tensor-parallel tp / dp ratio (large_nlp table; reported only)
FAILING = ("REGRESSION", "MISSING", "FAILED")
COLUMNS = ["metric", "kind", "value", "min", "max", "target", "predicted", "note"]


def _read(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise KarmaError(f"missing {path}: run the pipeline first (snakemake --cores all)")
    return pd.read_csv(path)


def _get(row, name: str) -> float:
    value = getattr(row, name, float("nan"))
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _runtime_rows(runtime: pd.DataFrame) -> list[tuple]:
    nan = float("nan")
    rows = []
    for model, table in runtime.groupby("model", sort=False):
        karma = table[table.strategy == "karma"]
        karma_status = str(karma.status.iloc[0]) if len(karma) else "absent from the measured table"
        karma_ok = karma_status == "ok" and len(karma) and not math.isnan(_get(next(karma.itertuples()), "measured_s"))
        for r in table.itertuples():
            if str(r.status) == "OOM (simulated)":
                continue  # planned not to fit: nothing was run
            ran = str(r.status) == "ok" and not math.isnan(_get(r, "measured_s"))
            note = "" if ran else f"{r.strategy}: {r.status}"
            rows.append((f"runtime/{model}/{r.strategy}/step_measured_over_predicted", "reported",
                         _get(r, "measured_over_predicted"), _get(r, "measured_s_min") / _get(r, "predicted_s"),
                         _get(r, "measured_s_max") / _get(r, "predicted_s"), STEP_ABSOLUTE_TARGET, nan,
                         note or "absolute: with the drift since the profile; the _within_repeat row is enforced"))
            rows.append((f"runtime/{model}/{r.strategy}/step_over_predicted_within_repeat", "accuracy",
                         _get(r, "measured_over_predicted_rel"), _get(r, "measured_over_predicted_rel_min"),
                         _get(r, "measured_over_predicted_rel_max"), STEP_TIME_TARGET, nan, note))
            rows.append((f"runtime/{model}/{r.strategy}/peak_measured_over_predicted", "accuracy",
                         _get(r, "peak_measured_over_predicted"), nan, nan, PEAK_TARGET, nan, note))
            if r.strategy == "karma":
                continue
            if not karma_ok:
                note = f"karma: {karma_status}"
            rows.append((f"runtime/{model}/{r.strategy}/karma_speedup_measured", "measured",
                         _get(r, "karma_speedup_measured") if ran and karma_ok else float("nan"),
                         _get(r, "karma_speedup_measured_min"), _get(r, "karma_speedup_measured_max"), nan,
                         _speedup_predicted(r), note))
        if not len(karma):
            rows.append((f"runtime/{model}/karma/step_over_predicted_within_repeat", "accuracy", nan,
                         nan, nan, STEP_TIME_TARGET, nan, f"karma: {karma_status}"))
        rows += _ranking_rows(model, table)
        scaled = table[table.repeat_scale.notna()] if "repeat_scale" in table else table.iloc[:0]
        first = next(scaled.itertuples(), None)  # every row of a run holds its model's scale
        rows.append((f"runtime/{model}/step_scale_over_predicted", "accuracy",
                     *((_get(first, c) for c in ("repeat_scale", "repeat_scale_min", "repeat_scale_max"))
                       if first is not None else (nan, nan, nan)), STEP_SCALE_TARGET, nan,
                     "median over the strategies of measured / predicted, per repeat"))
    return rows + _pooled_excess_rows(rows)


def _pooled_excess_rows(rows: list[tuple]) -> list[tuple]:
    """KARMA's excess error over every measured model at once (enforced at KARMA_EXCESS_TARGET): value, min and
    max the median over the models of each one's median, closest and farthest repeat. A bias of the search
    shows on every model; one model's three single steps cannot tell two points from noise (STEP_NOISE), the
    median of several models can. None without two models."""
    per_model = [r for r in rows if r[0].endswith("/karma/excess_error_over_median_baseline")]
    if len(per_model) < 2:
        return []
    value, lo, hi = (statistics.median(r[i] for r in per_model) for i in (2, 3, 4))
    return [("runtime/karma/excess_error_over_median_baseline", "accuracy", value, lo, hi, KARMA_EXCESS_TARGET,
             float("nan"), f"median over {len(per_model)} models of each one's excess error (its median, closest "
             "and farthest repeat)")]


def _ranking_rows(model: str, table: pd.DataFrame) -> list[tuple]:
    """KARMA's excess error over the median baseline's (value 1 + excess, per repeat; enforced, at most
    KARMA_EXCESS_MODEL_TARGET in the closest repeat), and, reported, whether the pairs of strategies whose predicted
    margin exceeds their measured spread measured in the predicted order (1 or 0; karma/runtime/emulation.py).
    Absent from a table written before they existed."""
    nan = float("nan")
    if "order_pairs_tested" not in table:
        return []
    first = next(table[table.order_pairs_tested.notna()].itertuples(), None)  # every row of a run holds them
    if first is None:
        return []
    rows = []
    excess = [1 + _get(first, c) for c in ("karma_excess_error", "karma_excess_error_min", "karma_excess_error_max")]
    if not math.isnan(excess[0]):  # KARMA and at least one baseline ran every repeat
        rows.append((f"runtime/{model}/karma/excess_error_over_median_baseline", "accuracy", *excess,
                     KARMA_EXCESS_MODEL_TARGET, nan, "KARMA's |measured / predicted - 1| less the median baseline's, "
                     "per repeat (below: KARMA's error the smaller); over every model: runtime/karma/..."))
    wrong = first.order_disagreements if isinstance(first.order_disagreements, str) else ""
    tested = int(_get(first, "order_pairs_tested")) if not math.isnan(_get(first, "order_pairs_tested")) else 0
    rows.append((f"runtime/{model}/measured_order_agrees", "reported", 0.0 if wrong else 1.0, nan, nan, nan, nan,
                 f"{tested} pairs predicted apart by more than their measured spread"
                 + (f"; measured in the other order: {wrong}" if wrong else "")))
    return rows


def _speedup_predicted(row) -> float:
    """KARMA's predicted speedup over a strategy at the processor's speed in the repeats (karma/runtime/drift.py:
    drift moves the plans bound by compute and not those bound by the link); a table written before it
    existed has only the prediction at the profile's speed."""
    at_speed = _get(row, "karma_speedup_predicted_at_speed")
    return _get(row, "karma_speedup_predicted") if math.isnan(at_speed) else at_speed


def _reach_rows(reach: pd.DataFrame, case: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The reach table's largest batch and throughput there over in-core's per (granularity, model, strategy),
    and the granularity case's throughput over in-core per (precision, granularity): simulated; a strategy
    with no plan has no row (a number that disappears is MISSING)."""
    rows = []
    for r in reach.itertuples():
        key = f"reach/{r.granularity}/{r.model}/{r.strategy}"
        if not pd.isna(r.reach_batch):
            rows.append((f"{key}/reach_batch", float(r.reach_batch), "simulated"))
        if not pd.isna(r.vs_incore):
            rows.append((f"{key}/vs_incore", float(r.vs_incore), "simulated"))
    for r in case.itertuples():
        if not pd.isna(r.vs_incore):
            rows.append((f"reach_case/{r.model}-b{r.batch}/{r.precision}/{r.granularity}/vs_incore",
                         float(r.vs_incore), "simulated"))
    return rows


def _map_rows(table: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The fourth claim's map: per model and precision, the points where KARMA is faster and those compared;
    per per-GPU batch, the geometric mean over node counts of KARMA over the best Megatron layout."""
    rows = []
    for (model, precision), g in table.groupby(["model", "precision"], sort=False):
        compared = g.karma_over_best_mp.dropna()
        rows.append((f"nlp_map/{model}/{precision}/points_faster", float((compared > 1).sum()), "simulated"))
        rows.append((f"nlp_map/{model}/{precision}/points_compared", float(len(compared)), "simulated"))
        for batch, at in g.groupby("batch_per_gpu", sort=True):
            ratio = at.karma_over_best_mp.dropna()
            if len(ratio):
                rows.append((f"nlp_map/{model}/{precision}/b{batch}/karma_over_best_mp_geomean", geomean(ratio),
                             "simulated"))
    return rows


def collect(results: str | Path) -> pd.DataFrame:
    """One row per tracked number (COLUMNS; see the module docstring)."""
    results = Path(results)
    nan = float("nan")
    rows = []
    speedups = _read(results / "tables" / "speedups.csv")
    for r in speedups.itertuples():
        if r.status == "ok":
            rows.append((f"speedups/{r.model}/{r.strategy}/time_s", r.time_s, "simulated"))
            if r.strategy == "karma":
                rows.append((f"speedups/{r.model}/karma/time_over_bound", r.time_over_bound, "simulated"))
    scaling = _read(results / "tables" / "scaling.csv")
    top = scaling[scaling.gpus == scaling.gpus.max()]
    for r in top.itertuples():
        rows.append((f"scaling/{r.model}/{r.strategy}/efficiency_at_{int(r.gpus)}", r.efficiency, "simulated"))
        if pd.notna(getattr(r, "efficiency_vs_node", float("nan"))):
            rows.append((f"scaling/{r.model}/{r.strategy}/efficiency_vs_node_at_{int(r.gpus)}", r.efficiency_vs_node,
                         "simulated"))
    nlp = _read(results / "tables" / "large_nlp_summary.csv")
    for r in nlp.itertuples():
        rows.append((f"large_nlp/{r.model}/karma_over_best_mp_geomean", r.karma_over_best_mp_geomean, "simulated"))
    if (results / "tables" / "nlp_map.csv").exists():  # absent from a reduced run, as the reach tables
        rows += _map_rows(_read(results / "tables" / "nlp_map.csv"))
    reach, case = results / "tables" / "reach.csv", results / "tables" / "reach_granularity.csv"
    if reach.exists() or case.exists():  # absent from a reduced run (.ci/slurm); against the reference: MISSING
        rows += _reach_rows(_read(reach), _read(case))
    rows = [(metric, kind, value, nan, nan, nan, nan, "") for metric, value, kind in rows]
    rows += _runtime_rows(_read(results / "tables" / "measured_vs_predicted.csv"))
    dp = _read(results / "tables" / "distributed_validation.csv")
    for r in dp[dp.order == "pipelined"].itertuples():
        measured, predicted = _get(r, "naive_over_pipelined_measured"), _get(r, "naive_over_pipelined_predicted")
        rows.append((f"distributed/{r.model}/naive_over_pipelined_measured", "measured", measured,
                     _get(r, "naive_over_pipelined_measured_min"), _get(r, "naive_over_pipelined_measured_max"), nan,
                     predicted, ""))
        error = _get(r, "ratio_measured_over_predicted")
        rows.append((f"distributed/{r.model}/naive_over_pipelined_measured_over_predicted", "accuracy",
                     measured / predicted if math.isnan(error) else error, _get(r, "ratio_measured_over_predicted_min"),
                     _get(r, "ratio_measured_over_predicted_max"), DP_RATIO_TARGET, nan, f"predicted {predicted:.3f}"))
        rows.append((f"distributed/{r.model}/pipelining_faster_as_predicted", "check",
                     float((measured - 1) * (predicted - 1) > 0), nan, nan, nan, nan,
                     f"naive/pipelined measured {measured:.3f}, predicted {predicted:.3f}"))
    tp = _read(results / "tables" / "tp_validation.csv")
    for r in tp[tp.tp > 1].itertuples():
        measured, predicted = _get(r, "tp_over_dp_measured"), _get(r, "tp_over_dp_predicted")
        # reported, not tracked: its measured / predicted differs from machine to machine, as the cost
        # model does not capture what tensor parallelism costs on two CPU ranks
        rows.append((f"tp_validation/{r.model}/tp_over_dp_measured", "reported", measured,
                     _get(r, "tp_over_dp_measured_min"), _get(r, "tp_over_dp_measured_max"), nan, predicted,
                     f"predicted {predicted:.3f}; machine-dependent on CPU ranks: not enforced"))
        rows.append((f"tp_validation/{r.model}/tp_over_dp_measured_over_predicted", "reported",
                     measured / predicted, nan, nan, TP_RATIO_TARGET, nan,
                     f"predicted {predicted:.3f}; the Megatron cost model on 2 CPU ranks: not enforced"))
    return pd.DataFrame(rows, columns=COLUMNS)


def _measured_verdict(ref: float, ref_lo: float, ref_hi: float, now: float, lo: float, hi: float,
                      predicted: float = float("nan"), scaled: tuple[float, ...] | None = None) -> tuple[str, str]:
    """The spread rule on `scaled` (the six values over their runs' predictions, _over_predicted; the raw
    ones when None), the sign rule on the raw ratios."""
    if math.isnan(now):
        return "FAILED", "not measured"
    s_ref, s_ref_lo, s_ref_hi, s_now, s_lo, s_hi = scaled if scaled is not None else (ref, ref_lo, ref_hi, now, lo, hi)
    ref_spread = s_ref_hi - s_ref_lo if not (math.isnan(s_ref_lo) or math.isnan(s_ref_hi)) else 0.0
    s_lo = s_now if math.isnan(s_lo) else s_lo
    s_hi = s_now if math.isnan(s_hi) else s_hi
    widen = ref_spread + MEASURED_FLOOR * abs(s_ref)
    outside = not s_lo - widen <= s_ref <= s_hi + widen
    if outside and scaled is not None and _nearer_the_model(s_ref, s_lo, s_hi):
        return "ok", (f"nearer its prediction than the reference: {s_ref:.3f} of it then, [{s_lo:.3f}, {s_hi:.3f}] "
                      f"now (a disturbed reference run; refresh the reference)")
    if outside:
        what = " (each over its run's prediction)" if scaled is not None else ""
        return "REGRESSION", (f"reference {s_ref:.3f} outside [{s_lo:.3f}, {s_hi:.3f}] widened by {widen:.3f} "
                              f"(the reference's spread + {MEASURED_FLOOR:.0%}){what}")
    ref_lo = ref if math.isnan(ref_lo) else ref_lo
    ref_hi = ref if math.isnan(ref_hi) else ref_hi
    lo = now if math.isnan(lo) else min(lo, now)
    hi = now if math.isnan(hi) else max(hi, now)
    crossed = (ref_lo > 1 and hi < 1) or (ref_hi < 1 and lo > 1)
    if crossed and (math.isnan(predicted) or _predicts_a_difference(predicted)):
        return "REGRESSION", f"crosses 1: reference range [{ref_lo:.3f}, {ref_hi:.3f}], now [{lo:.3f}, {hi:.3f}]"
    if crossed:
        return "ok", f"crosses 1 where the model predicts a tie ({predicted:.3f})"
    return "ok", ""


def _nearer_the_model(s_ref: float, s_lo: float, s_hi: float) -> bool:
    """Whether the new run's whole range of measured / predicted lies nearer 1 (the model) than the reference's
    median, by factor either way: the model's ratio is simulated and held to 1%, so a measured ratio that moves
    towards it is a quieter run, not a regression; one that moves away from it, either way, is one (a baseline
    that runs slower than its model makes KARMA's measured speedup grow)."""
    if not s_ref > 0 or not s_lo > 0:
        return False
    far = max(s_ref, 1 / s_ref)
    return 1 / far <= s_lo and s_hi <= far


def _predicts_a_difference(predicted: float) -> bool:
    """Whether a predicted ratio is far enough from 1, either way (1.25 as much as 0.8), for a measured sign
    to test it."""
    return predicted > 0 and max(predicted, 1 / predicted) >= 1 + MEASURED_NOISE


def _over_predicted(row) -> tuple[float, ...] | None:
    """(reference, its min, max, now, its min, max) of a measured ratio, each divided by its own run's
    prediction, where both runs have one (the module docstring says why); None otherwise."""
    if math.isnan(row.predicted_reference) or math.isnan(row.predicted_now):
        return None
    return (row.value_reference / row.predicted_reference, row.min_reference / row.predicted_reference,
            row.max_reference / row.predicted_reference, row.value_now / row.predicted_now,
            row.min_now / row.predicted_now, row.max_now / row.predicted_now)


def _accuracy_verdict(now: float, lo: float, hi: float, target: float, below: float | None = None) -> tuple[str, str]:
    """FAILED when the run's whole range misses [1 - below, 1 + target] (below defaults to target; the
    module docstring says why)."""
    below = target if below is None else below
    lo = now if math.isnan(lo) else min(lo, now)
    hi = now if math.isnan(hi) else max(hi, now)
    if lo > 1 + target or hi < 1 - below:
        closest = lo if lo > 1 else hi
        return "FAILED", f"{closest:.3f} outside [1 - {below:g}, 1 + {target:g}] for every repeat"
    if now > 1 + target or now < 1 - below:
        return "ok", f"median {now:.3f} off the {target:g} target, repeat at {lo if now > 1 else hi:.3f} within it"
    return "ok", ""


def verdict(row) -> tuple[str, str]:
    """(verdict, why) of one merged row (compare)."""
    kind, now, ref = row.kind, row.value_now, row.value_reference
    note = row.note_now if isinstance(row.note_now, str) and row.note_now else ""
    present = row.present_now
    if kind == "reported":
        return "reported", note
    if not present:
        return "MISSING", "not in this run"
    if kind == "accuracy":
        if math.isnan(now):
            return "FAILED", note or "not measured"
        metric = str(row.metric)
        below = (PEAK_BELOW_TARGET if metric.endswith("peak_measured_over_predicted")
                 else math.inf if metric.endswith("excess_error_over_median_baseline") else None)
        found, why = _accuracy_verdict(now, row.min_now, row.max_now, row.target_now, below)
        return found, "; ".join(w for w in (why, note) if w)
    if kind == "check":
        return ("ok", note) if now == 1 else ("FAILED", note or "check failed")
    if kind == "measured" and math.isnan(now):
        return "FAILED", "; ".join(w for w in ("not measured", note) if w)
    if not row.present_reference or math.isnan(ref):
        return "new", "not in the reference" if not row.present_reference else "no reference value"
    if kind == "simulated":
        if math.isnan(now):
            return "MISSING", "not in this run"
        if ref == 0:  # a count that was zero (a map's points where KARMA is faster): any other value moved
            return ("ok", "") if now == 0 else ("REGRESSION", f"{now:g} where the reference has 0")
        change = now / ref - 1
        if abs(change) > SIMULATED_TOLERANCE:
            return "REGRESSION", f"{change:+.2%} (tolerance {SIMULATED_TOLERANCE:.0%})"
        return "ok", ""
    predicted = row.predicted_now if not math.isnan(row.predicted_now) else row.predicted_reference
    found, why = _measured_verdict(ref, row.min_reference, row.max_reference, now, row.min_now, row.max_now,
                                   predicted, _over_predicted(row))
    return found, "; ".join(w for w in (why, note) if w)


def compare(reference: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Every reference metric and every enforced current one, with the new value and a verdict."""
    reference = reference.copy()
    current = current.copy()
    for frame in (reference, current):
        for column in COLUMNS:
            if column not in frame.columns:
                frame[column] = "" if column == "note" else float("nan")
        frame["present"] = True
    merged = reference[COLUMNS + ["present"]].merge(current[COLUMNS + ["present"]], on=["metric", "kind"],
                                                    how="outer", suffixes=("_reference", "_now"), sort=False)
    merged["present_reference"] = merged.present_reference.astype("boolean").fillna(False).astype(bool)
    merged["present_now"] = merged.present_now.astype("boolean").fillna(False).astype(bool)
    for column in ("value", "min", "max", "target", "predicted"):
        for side in ("reference", "now"):
            merged[f"{column}_{side}"] = pd.to_numeric(merged[f"{column}_{side}"], errors="coerce")
    merged["change"] = merged.value_now / merged.value_reference - 1
    found = [verdict(r) for r in merged.itertuples()]
    merged["verdict"] = [v for v, _ in found]
    merged["why"] = [w for _, w in found]
    # reference order first, then what only this run has
    merged["_order"] = merged.present_reference.map({True: 0, False: 1})
    merged = merged.sort_values("_order", kind="stable").drop(columns=["_order"]).reset_index(drop=True)
    return merged


SHOWN = ["metric", "kind", "value_reference", "min_reference", "max_reference", "value_now", "min_now", "max_now",
         "change", "target_now", "predicted_now", "verdict", "why"]


def summary(diff: pd.DataFrame) -> str:
    counts = diff.verdict.value_counts()
    bad = int(diff.verdict.isin(FAILING).sum())
    parts = ", ".join(f"{counts[v]} {v}" for v in ("ok", "REGRESSION", "MISSING", "FAILED", "new", "reported")
                      if v in counts)
    return (f"{len(diff)} numbers: {parts} (simulated within {SIMULATED_TOLERANCE:.0%}; measured within their spread "
            f"+ {MEASURED_FLOOR:.0%} and not crossing 1 where a difference is predicted; accuracy within its target "
            f"for the run's closest repeat); {bad} failing")

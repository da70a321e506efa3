"""Regression tracking: simulated numbers within 1%, measured ones within their spread and not
crossing 1, measured-vs-predicted accuracy within the printed targets; `karma compare --strict`
fails on REGRESSION, MISSING and FAILED, and without --strict never fails on verdicts."""

import math

import pandas as pd
import pytest

from karma.cli.main import main
from karma.report.regress import COLUMNS, _runtime_rows, collect, compare

NAN = math.nan


def table(*rows) -> pd.DataFrame:
    rows = [row if len(row) == 7 else (*row, NAN) for row in rows]
    return pd.DataFrame([(m, k, v, lo, hi, t, p, "") for m, k, v, lo, hi, t, p in rows], columns=COLUMNS)


SIM = "speedups/m/karma/time_s"
MEAS = "runtime/m/vdnn/karma_speedup_measured"


def sim(value):
    return (SIM, "simulated", value, NAN, NAN, NAN)


def meas(value, lo, hi, metric=MEAS, predicted=NAN):
    return (metric, "measured", value, lo, hi, NAN, predicted)


def verdicts(reference, current):
    return dict(zip(compare(reference, current).metric, compare(reference, current).verdict, strict=True))


@pytest.mark.parametrize("now, expected", [(1.005, "ok"), (0.995, "ok"), (1.02, "REGRESSION"), (0.9, "REGRESSION")])
def test_simulated_numbers_are_exact_within_one_percent(now, expected):
    assert verdicts(table(sim(1.0)), table(sim(now)))[SIM] == expected


@pytest.mark.parametrize("now, expected", [(0.0, "ok"), (1.0, "REGRESSION")])
def test_a_simulated_zero_is_compared_exactly(now, expected):
    """A count the reference has at zero (the map's points where KARMA is faster) has no relative change."""
    assert verdicts(table(sim(0.0)), table(sim(now)))[SIM] == expected


@pytest.mark.parametrize("now, expected", [
    ((2.0, 1.9, 2.1), "ok"),
    ((1.8, 1.75, 1.85), "ok"),  # reference 2.0 inside [1.75, 1.85] widened by 0.2 + 10%
    ((2.3, 2.25, 2.4), "ok"),
    ((1.4, 1.35, 1.5), "REGRESSION"),  # reference far outside the new range
    ((2.7, 2.6, 2.8), "REGRESSION"),
    ((NAN, NAN, NAN), "FAILED"),  # not measured (its run or KARMA's ran out of memory)
])
def test_measured_numbers_within_their_spread(now, expected):
    reference = table(sim(1.0), meas(2.0, 1.9, 2.1))
    assert verdicts(reference, table(sim(1.0), meas(*now)))[MEAS] == expected


def test_a_measured_claim_that_changes_sign_is_a_regression():
    reference = table(meas(1.06, 1.03, 1.12))
    assert verdicts(reference, table(meas(1.04, 0.99, 1.08)))[MEAS] == "ok"
    assert verdicts(reference, table(meas(0.96, 0.94, 0.98)))[MEAS] == "REGRESSION"
    # a new range that straddles 1 claims nothing either
    assert verdicts(reference, table(meas(0.98, 0.96, 1.02)))[MEAS] == "ok"
    # a reference whose range straddles 1 claims nothing: noise across 1 is no regression
    assert verdicts(table(meas(1.01, 0.98, 1.04)), table(meas(0.99, 0.97, 1.02)))[MEAS] == "ok"


@pytest.mark.parametrize("predicted, expected", [(1.018, "ok"), (0.95, "ok"), (1.103, "ok"), (0.85, "ok"),
                                                 (1.3, "REGRESSION"), (0.78, "REGRESSION"), (NAN, "REGRESSION")])
def test_crossing_1_is_a_regression_only_where_the_model_predicts_a_difference(predicted, expected):
    """A brand-new-venv run: Megatron's capuchin ratio 0.914 [0.896, 0.975] against a reference of 1.019
    [1.017, 1.043], where the model predicts a tie (1.018): noise, not a regression."""
    reference = table(meas(1.019, 1.017, 1.043, predicted=predicted))
    assert verdicts(reference, table(meas(0.97, 0.955, 0.985, predicted=predicted)))[MEAS] == expected
    # the spread rule still holds for a predicted tie, on a move away from the model (0.8 [0.78, 0.82] is nearer
    # a prediction of 0.85 or 0.78 than the reference is: see the test below)
    assert verdicts(reference, table(meas(0.6, 0.58, 0.62, predicted=predicted)))[MEAS] == "REGRESSION"


def test_a_measured_ratio_is_compared_over_its_own_runs_prediction():
    """CI on a CPU 1.8x slower than the reference's, behind the same fixed emulated link (2026-12-01): KARMA
    over vDNN measured 3.74 [2.94, 4.11], predicted 3.87 from that run's measured profile; the reference
    6.90 [6.34, 7.12], predicted 7.35. The model explains the move; a move it does not explain still fails."""
    reference = table(meas(6.90, 6.34, 7.12, predicted=7.35))
    assert verdicts(reference, table(meas(3.74, 2.94, 4.11, predicted=3.87)))[MEAS] == "ok"
    assert verdicts(reference, table(meas(3.74, 2.94, 4.11, predicted=7.35)))[MEAS] == "REGRESSION"
    assert verdicts(table(meas(6.90, 6.34, 7.12)), table(meas(3.74, 2.94, 4.11, predicted=3.87)))[MEAS] == \
        "REGRESSION"  # no prediction in the reference: compared raw


@pytest.mark.parametrize("now, predicted, expected", [
    ((5.365, 5.195, 5.408), 5.446, "ok"),  # CI, 2026-12-03: 0.985 [0.954, 0.993] of its prediction
    ((4.8, 4.5, 5.2), 4.0, "ok"),  # 1.2 [1.125, 1.3]: nearer 1 than 1 / 0.727 = 1.376, by factor
    ((5.9, 5.6, 6.2), 4.0, "REGRESSION"),  # 1.475 [1.4, 1.55]: farther from the model, the other way
    ((2.0, 1.8, 2.1), 4.0, "REGRESSION"),  # 0.5 [0.45, 0.525]: farther from the model, the same way
    ((4.0, 2.6, 4.2), 4.0, "ok"),  # a range that reaches the reference is within its spread
])
def test_a_run_nearer_its_prediction_than_a_disturbed_reference_is_not_a_regression(now, predicted, expected):
    """The reference run measured KARMA over vDNN on ResNet-50 at 0.727 of its prediction (a busy machine);
    a quiet CI run, at 0.985, was called a regression. The model's ratio is simulated and held to 1%: a run that
    moves towards it is quieter; one that moves away from it, either way, still fails."""
    reference = table(meas(2.71, 2.564, 2.947, predicted=3.727))
    assert verdicts(reference, table(meas(*now, predicted=predicted)))[MEAS] == expected


def test_the_sign_rule_reads_the_raw_ratios_not_the_ones_over_their_predictions():
    reference = table(meas(1.15, 1.12, 1.18, predicted=1.35))  # 0.85 of its prediction
    # within the spread of the reference over its prediction, but KARMA is now measured slower where the model
    # predicts it 30% faster
    assert verdicts(reference, table(meas(0.97, 0.95, 0.99, predicted=1.3)))[MEAS] == "REGRESSION"
    # the same where the model predicts a difference smaller than the noise: the CI run of 2026-12-01 on
    # WRN-28-10, KARMA over SuperNeurons 0.87 [0.84, 0.95] predicted 1.10
    assert verdicts(reference, table(meas(0.97, 0.95, 0.99, predicted=1.12)))[MEAS] == "ok"


def test_noise_inside_the_spread_passes_for_every_repeat_order():
    """Any new run whose repeats fall inside the reference's range is never a regression."""
    reference = table(meas(1.3, 1.2, 1.45))
    for lo in (1.2, 1.25, 1.3):
        for hi in (1.3, 1.4, 1.45):
            assert verdicts(reference, table(meas((lo + hi) / 2, lo, hi)))[MEAS] == "ok"


def test_an_old_reference_without_spread_still_compares():
    reference = pd.DataFrame([(MEAS, "measured", 2.0)], columns=["metric", "kind", "value"])
    assert verdicts(reference, table(meas(2.0, 1.95, 2.1)))[MEAS] == "ok"
    assert verdicts(reference, table(meas(1.5, 1.45, 1.6)))[MEAS] == "REGRESSION"


@pytest.mark.parametrize("value, target, expected", [(1.1, 0.15, "ok"), (1.2, 0.15, "FAILED"), (0.96, 0.05, "ok"),
                                                     (0.94, 0.05, "FAILED"), (NAN, 0.15, "FAILED")])
def test_accuracy_is_held_to_its_target_whatever_the_reference(value, target, expected):
    metric = "runtime/m/karma/step_over_predicted_within_repeat"
    row = (metric, "accuracy", value, NAN, NAN, target)
    assert verdicts(table(), table(row))[metric] == expected
    assert verdicts(table((metric, "accuracy", 1.0, NAN, NAN, target)), table(row))[metric] == expected


@pytest.mark.parametrize("value, lo, hi, expected", [
    (1.152, 1.125, 1.254, "ok"),  # a brand-new-venv run: the median off, its least disturbed repeat within
    (1.2, 1.16, 1.3, "FAILED"),  # every repeat off the target
    (0.8, 0.7, 0.84, "FAILED"),
    (0.84, 0.8, 0.86, "ok"),
])
def test_accuracy_is_judged_on_the_repeat_closest_to_the_prediction(value, lo, hi, expected):
    metric = "runtime/m/checkpoint/step_over_predicted_within_repeat"
    row = (metric, "accuracy", value, lo, hi, 0.15)
    assert verdicts(table(), table(row))[metric] == expected


def test_a_reference_without_a_value_compares_as_new():
    assert verdicts(table(meas(NAN, NAN, NAN)), table(meas(1.2, 1.1, 1.3)))[MEAS] == "new"
    assert verdicts(table(meas(NAN, NAN, NAN)), table(meas(NAN, NAN, NAN)))[MEAS] == "FAILED"


def test_missing_new_checks_and_reported():
    reference = table(sim(1.0), ("x/check", "check", 1.0, NAN, NAN, NAN))
    current = table(("x/check", "check", 0.0, NAN, NAN, NAN), ("y/new", "measured", 1.2, 1.1, 1.3, NAN),
                    ("z/info", "reported", 3.0, NAN, NAN, 0.15))
    found = verdicts(reference, current)
    assert found == {SIM: "MISSING", "x/check": "FAILED", "y/new": "new", "z/info": "reported"}


# --- the command line on a whole results tree ---------------------------------------------------

WITHIN = {"measured_over_predicted_rel": 1.0, "measured_over_predicted_rel_min": 0.98,
          "measured_over_predicted_rel_max": 1.02, "repeat_scale": 1.05, "repeat_scale_min": 1.0,
          "repeat_scale_max": 1.1, "karma_excess_error": 0.0, "karma_excess_error_min": -0.01,
          "karma_excess_error_max": 0.01, "order_pairs_tested": 1, "order_disagreements": ""}
RUNTIME = [  # model m: vdnn and karma ran, karma 2x faster; incore did not fit (simulated)
    {"model": "m", "strategy": "incore", "status": "OOM (simulated)", "predicted_s": NAN, "measured_s": NAN},
    {"model": "m", "strategy": "vdnn", "status": "ok", "predicted_s": 2.0, "measured_s": 2.1, "measured_s_min": 2.0,
     "measured_s_max": 2.2, "measured_over_predicted": 1.05, "peak_measured_over_predicted": 1.0, **WITHIN,
     "karma_speedup_measured": 2.0, "karma_speedup_measured_min": 1.9, "karma_speedup_measured_max": 2.1,
     "karma_speedup_predicted": 2.0},
    {"model": "m", "strategy": "karma", "status": "ok", "predicted_s": 1.0, "measured_s": 1.05,
     "measured_s_min": 1.0, "measured_s_max": 1.1, "measured_over_predicted": 1.05, **WITHIN,
     "peak_measured_over_predicted": 0.99, "karma_speedup_measured": 1.0, "karma_speedup_measured_min": 1.0,
     "karma_speedup_measured_max": 1.0, "karma_speedup_predicted": 1.0},
]


def write_results(results, runtime=RUNTIME, karma_time=1.0, dp_ratio=1.15, reach_batch=200):
    (results / "tables").mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"model": "m", "strategy": "vdnn", "status": "ok", "time_s": 2.0, "time_over_bound": NAN},
                  {"model": "m", "strategy": "karma", "status": "ok", "time_s": karma_time, "time_over_bound": 1.01}]) \
        .to_csv(results / "tables/speedups.csv", index=False)
    pd.DataFrame([{"model": "m", "strategy": "s", "gpus": 8, "efficiency": 0.9}]).to_csv(
        results / "tables/scaling.csv", index=False)
    pd.DataFrame(runtime).to_csv(results / "tables/measured_vs_predicted.csv", index=False)
    pd.DataFrame([{"model": "m", "order": order, "naive_over_pipelined_measured": dp_ratio,
                   "naive_over_pipelined_measured_min": dp_ratio - 0.03,
                   "naive_over_pipelined_measured_max": dp_ratio + 0.03, "naive_over_pipelined_predicted": 1.2}
                  for order in ("pipelined", "naive")]).to_csv(results / "tables/distributed_validation.csv",
                                                               index=False)
    pd.DataFrame([{"model": "m", "karma_over_best_mp_geomean": 1.3}]).to_csv(
        results / "tables/large_nlp_summary.csv", index=False)
    pd.DataFrame([{"model": "m", "tp": tp, "tp_over_dp_measured": 1.1, "tp_over_dp_measured_min": 1.0,
                   "tp_over_dp_measured_max": 1.2, "tp_over_dp_predicted": 0.6} for tp in (1, 2)]).to_csv(
        results / "tables/tp_validation.csv", index=False)
    pd.DataFrame([{"granularity": "block", "model": "m", "strategy": s, "reach_batch": b, "vs_incore": v}
                  for s, b, v in (("incore", 100, 1.0), ("karma", reach_batch, 0.6), ("vdnn", NAN, NAN))]).to_csv(
        results / "tables/reach.csv", index=False)
    pd.DataFrame([{"model": "m", "batch": 400, "precision": p, "granularity": g, "vs_incore": v}
                  for p, g, v in (("fp32", "block", NAN), ("fp32", "layer", 0.2), ("fp16", "block", 0.6))]).to_csv(
        results / "tables/reach_granularity.csv", index=False)


@pytest.fixture
def recorded(tmp_path):
    results = tmp_path / "results"
    write_results(results)
    reference = tmp_path / "reference.csv"
    assert main(["reference", "--results", str(results), "--out", str(reference)]) == 0
    return results, reference


def compare_cli(results, reference, *extra):
    return main(["compare", "--results", str(results), "--reference", str(reference), *extra])


def test_the_same_run_passes_strict(recorded):
    results, reference = recorded
    assert compare_cli(results, reference, "--strict") == 0
    recorded_table = pd.read_csv(reference)
    assert {"metric", "kind", "value", "min", "max"} <= set(recorded_table.columns)
    # karma/report/readme.py reads these rows
    assert "speedups/m/karma/time_s" in set(recorded_table.metric)
    assert "speedups/m/karma/time_over_bound" in set(recorded_table.metric)


def test_noise_inside_the_spread_passes_strict(recorded, tmp_path):
    results, reference = recorded
    runtime = [dict(r) for r in RUNTIME]
    runtime[1].update(karma_speedup_measured=1.85, karma_speedup_measured_min=1.8, karma_speedup_measured_max=2.05,
                      measured_over_predicted=1.1)
    write_results(results, runtime, dp_ratio=1.12)
    assert compare_cli(results, reference, "--strict") == 0


def test_reach_is_tracked_as_simulated_numbers(recorded, tmp_path):
    """The reach table's batches and throughputs (issue 16) are deterministic: tracked within 1%, and a
    strategy's reach that moves or disappears fails."""
    results, reference = recorded
    metrics = set(pd.read_csv(reference).metric)
    assert {"reach/block/m/karma/reach_batch", "reach/block/m/karma/vs_incore",
            "reach_case/m-b400/fp32/layer/vs_incore", "reach_case/m-b400/fp16/block/vs_incore"} <= metrics
    assert not any(m.startswith("reach/block/m/vdnn") or m == "reach_case/m-b400/fp32/block/vs_incore"
                   for m in metrics)  # no plan: no row
    write_results(results, reach_batch=190)
    assert compare_cli(results, reference, "--strict") == 1
    for name in ("reach.csv", "reach_granularity.csv"):  # a run without the reach rule misses its numbers
        (results / "tables" / name).unlink()
    assert compare_cli(results, reference, "--strict") == 1
    assert compare_cli(results, reference, "--strict", "--kind", "accuracy") == 0


def test_karma_simulated_ten_percent_faster_in_the_reference_fails_strict(recorded):
    results, reference = recorded
    frame = pd.read_csv(reference)
    frame.loc[frame.metric == "speedups/m/karma/time_s", "value"] *= 0.9
    frame.to_csv(reference, index=False)
    assert compare_cli(results, reference) == 0  # the pipeline's rule: report, never fail
    assert compare_cli(results, reference, "--strict") == 1


@pytest.mark.parametrize("case", ["karma absent", "karma OOM"])
def test_a_measured_run_without_karma_fails_strict(recorded, case, tmp_path):
    results, reference = recorded
    runtime = [dict(r) for r in RUNTIME]
    if case == "karma absent":
        runtime = runtime[:2]
        runtime[1].update(karma_speedup_measured=NAN, karma_speedup_measured_min=NAN, karma_speedup_measured_max=NAN)
    else:
        runtime[2].update(status="OOM (measured): device out of memory", measured_s=NAN, measured_over_predicted=NAN,
                          peak_measured_over_predicted=NAN, measured_over_predicted_rel=NAN)
        for r in runtime:
            r.update(karma_speedup_measured=NAN, karma_speedup_measured_min=NAN, karma_speedup_measured_max=NAN)
    write_results(results, runtime)
    out = tmp_path / "regression.md"
    assert compare_cli(results, reference, "--out", str(out)) == 0
    text = out.read_text()
    assert "FAILED" in text and "karma" in text
    assert compare_cli(results, reference, "--strict") == 1


def test_a_baseline_measured_out_of_memory_fails_strict(recorded):
    results, reference = recorded
    runtime = [dict(r) for r in RUNTIME]
    runtime[1].update(status="OOM (measured): over", measured_s=NAN, measured_over_predicted=NAN,
                      karma_speedup_measured=NAN)
    write_results(results, runtime)
    assert compare_cli(results, reference, "--strict") == 1


@pytest.mark.parametrize("change, expected", [
    # every repeat's step off its 0.05 target within the repeat
    ({"measured_over_predicted_rel": 1.2, "measured_over_predicted_rel_min": 1.17}, 1),
    ({"measured_over_predicted_rel": 1.2}, 0),  # the median off it, the least disturbed repeat (0.98) within
    ({"measured_over_predicted": 1.3, "measured_s_min": 1.25}, 0),  # absolute: reported, not enforced
    ({"repeat_scale": 1.4, "repeat_scale_min": 1.35, "repeat_scale_max": 1.5}, 1),  # every plan 35% slow
    ({"peak_measured_over_predicted": 1.07}, 1),  # peak above its prediction by more than 0.05
    ({"measured_over_predicted_rel": 1.12, "peak_measured_over_predicted": 1.03}, 0),
    # a step 5.1% off in its closest repeat; KARMA's error on one model 6% over the median baseline's in every
    # repeat (3%: within one step's noise of the target), and 5-12% under it (fine: only KARMA's plan predicted
    # worse fails); the measured order is reported only
    ({"measured_over_predicted_rel": 1.06, "measured_over_predicted_rel_min": 1.051}, 1),
    ({"karma_excess_error": 0.07, "karma_excess_error_min": 0.06, "karma_excess_error_max": 0.08}, 1),
    ({"karma_excess_error": 0.04, "karma_excess_error_min": 0.03, "karma_excess_error_max": 0.05}, 0),
    ({"karma_excess_error": -0.1, "karma_excess_error_min": -0.12, "karma_excess_error_max": -0.05}, 0),
    ({"order_disagreements": "karma / vdnn predicted 0.500, measured 1.100"}, 0),
])
def test_printed_targets_are_enforced(recorded, change, expected):
    results, reference = recorded
    runtime = [dict(r) for r in RUNTIME]
    whole_run = {"repeat_scale", "karma_excess_error", "order_disagreements"} & set(change)
    for row in runtime[1:] if whole_run else runtime[2:]:  # a run's scale (and ranking) is on each of its rows
        row.update(change)
    write_results(results, runtime)
    assert compare_cli(results, reference, "--strict") == expected


@pytest.mark.parametrize("ratio, expected", [(1.15, 0), (0.95, 1), (1.45, 1)])
def test_the_data_parallel_ratio_agrees_with_the_model_in_sign_and_within_its_target(recorded, ratio, expected):
    results, reference = recorded
    write_results(results, dp_ratio=ratio)
    assert compare_cli(results, reference, "--strict") == expected


def test_kind_compares_only_those_numbers(recorded):
    """.ci/slurm holds a Slurm run's simulated numbers to a local run's; its measurements may differ."""
    results, reference = recorded
    runtime = [dict(r) for r in RUNTIME][:2]
    runtime[1].update(karma_speedup_measured=NAN, karma_speedup_measured_min=NAN, karma_speedup_measured_max=NAN)
    write_results(results, runtime)
    assert compare_cli(results, reference, "--strict") == 1
    assert compare_cli(results, reference, "--strict", "--kind", "simulated") == 0
    frame = pd.read_csv(reference)
    frame.loc[frame.metric == "speedups/m/karma/time_s", "value"] *= 0.9
    frame.to_csv(reference, index=False)
    assert compare_cli(results, reference, "--strict", "--kind", "simulated") == 1


@pytest.mark.parametrize("value, expected", [(1.04, "ok"), (1.06, "FAILED"), (0.934, "ok"), (0.89, "FAILED")])
def test_a_peak_may_fall_below_its_prediction_by_more_than_it_may_rise(value, expected):
    """Above the model by more than 5% is a runtime outgrowing its plan; below by up to 10% is a copy
    that ended early (a quiet run: ZeRO-Offload's peak at 0.934 of the prediction)."""
    metric = "runtime/m/zero-offload/peak_measured_over_predicted"
    assert verdicts(table(), table((metric, "accuracy", value, NAN, NAN, 0.05)))[metric] == expected


def test_the_reach_cases_rows_are_enforced_like_the_others():
    """The reach case (model `<model>-layer`, issue 16) has no special rule: KARMA out of memory there fails."""
    runtime = pd.DataFrame([
        {"strategy": "vdnn", "status": "ok", "predicted_s": 2.0, "measured_s": 2.1, "measured_over_predicted": 1.05,
         "peak_measured_over_predicted": 1.2, "karma_speedup_measured": NAN, "karma_speedup_predicted": 2.0},
        {"strategy": "karma", "status": "OOM (measured): over", "predicted_s": 1.0, "measured_s": NAN,
         "measured_over_predicted": NAN, "peak_measured_over_predicted": NAN},
    ])
    verdicts = {}
    for model in ("resnet50-layer", "resnet50"):
        rows = pd.DataFrame(_runtime_rows(runtime.assign(model=model)), columns=COLUMNS)
        found = compare(rows.iloc[:0], rows)
        assert found.verdict.isin(["FAILED"]).any()
        verdicts[model] = list(found.verdict)
    assert verdicts["resnet50-layer"] == verdicts["resnet50"]


@pytest.mark.parametrize("change, order", [
    ({}, "1 pairs"),
    ({"order_disagreements": "karma / vdnn predicted 0.500, measured 1.100"},
     "measured in the other order: karma / vdnn"),
])
def test_karmas_excess_error_is_enforced_and_the_measured_order_reported_beside_each_run(tmp_path, change, order):
    results = tmp_path / "results"
    runtime = [dict(r) for r in RUNTIME]
    for row in runtime[1:]:
        row.update(change)
    write_results(results, runtime)
    table = collect(results).set_index("metric")
    assert table.loc["runtime/m/karma/excess_error_over_median_baseline", "kind"] == "accuracy"
    assert table.loc["runtime/m/measured_order_agrees", "kind"] == "reported"
    assert order in table.loc["runtime/m/measured_order_agrees", "note"]


@pytest.mark.parametrize("closest, expected", [((0.03, 0.03, -0.05), "FAILED"), ((0.05, -0.01, -0.05), "ok")])
def test_karmas_excess_error_over_every_model_is_held_to_two_points(closest, expected):
    """Each model's closest repeat within two points and one step's noise, and their median within two points:
    three models each 3 points over fail together, one model 5 points over among two under does not."""
    runtime = []
    for name, excess in zip("abc", closest, strict=True):
        for row in RUNTIME:
            runtime.append({**row, "model": name, "karma_excess_error": excess + 0.01,
                            "karma_excess_error_min": excess, "karma_excess_error_max": excess + 0.02})
    rows = pd.DataFrame(_runtime_rows(pd.DataFrame(runtime)), columns=COLUMNS)
    found = compare(rows.iloc[:0], rows).set_index("metric").verdict
    assert found["runtime/karma/excess_error_over_median_baseline"] == expected
    assert (found[[f"runtime/{m}/karma/excess_error_over_median_baseline" for m in "abc"]] == "ok").all()

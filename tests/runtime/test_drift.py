"""Step accuracy within each repeat at the processor's speed of that repeat (karma/runtime/drift.py,
karma/runtime/emulation.py _relative_accuracy), and the runtime rows karma/report/regress.py makes of it."""

import math

import pandas as pd
import pytest

from karma.core.hardware import load
from karma.plan.plan import Block, unchecked
from karma.profile.profile import Profile
from karma.report.regress import _runtime_rows
from karma.runtime.drift import at_speed, fit_speed, predictor
from karma.runtime.emulation import _relative_accuracy, karma_excess_error, order_disagreements
from karma.sim.simulate import simulate
from tests.chains import make_unit

NAN = float("nan")


def test_a_drift_every_strategy_shares_is_the_repeats_scale_and_a_plan_the_model_misjudges_stays_off():
    """Step accuracy within each repeat (karma/runtime/emulation.py): the machine 20% slower in the second
    repeat and 10% faster in the third moves every ratio alike and only the scale; a strategy the model
    predicts 30% fast is off in every repeat whatever the drift; an OOM strategy takes no part."""
    predicted = {"a": 1.0, "b": 2.0, "c": 4.0, "d": 1.0}
    drift = [1.0, 1.2, 0.9]
    results = {"a": {"times": [1.0 * k for k in drift]}, "b": {"times": [2.0 * k for k in drift]},
               "c": {"times": [4.0 * 1.3 * k for k in drift]}, "d": {"error": "OOM"}}
    df = pd.DataFrame({"strategy": list(predicted), "predicted_s": list(predicted.values())})
    expected = _relative_accuracy(df, results, 3, lambda f: {name: t * f for name, t in predicted.items()})
    assert [e["a"] for e in expected] == pytest.approx(drift)
    assert (df.processor_speed_min.iloc[0], df.processor_speed.iloc[0], df.processor_speed_max.iloc[0]) == \
        pytest.approx((0.9, 1.0, 1.2))
    rel = dict(zip(df.strategy, df.measured_over_predicted_rel, strict=True))
    assert rel["a"] == pytest.approx(1.0) and rel["b"] == pytest.approx(1.0) and rel["c"] == pytest.approx(1.3)
    assert math.isnan(rel["d"])
    assert (df.repeat_scale_min.iloc[0], df.repeat_scale.iloc[0], df.repeat_scale_max.iloc[0]) == \
        pytest.approx((0.9, 1.0, 1.2))
    rows = {r[0]: r for r in _runtime_rows(df.assign(model="m", status=["ok", "ok", "ok", "OOM (measured)"],
                                                      measured_s=[1.0, 2.0, 5.2, NAN], plan="K"))}
    assert rows["runtime/m/step_scale_over_predicted"][2:6] == pytest.approx((1.0, 0.9, 1.2, 0.3))
    assert rows["runtime/m/c/step_over_predicted_within_repeat"][1] == "accuracy"
    assert rows["runtime/m/c/step_measured_over_predicted"][1] == "reported"


def test_strategies_the_processor_does_not_move_fall_back_to_one_scale():
    """Plans all bound by the link (predictions that do not move with the processor's speed): no speed explains
    a repeat 20% over them (drift.fit_speed gives None), and every prediction is scaled by the repeat's median
    ratio instead, as before drift.py; their columns processor_speed stay empty."""
    predicted = {"a": 1.0, "b": 2.0}
    results = {"a": {"times": [1.2, 1.2]}, "b": {"times": [2.4, 2.4 * 1.1]}}
    df = pd.DataFrame({"strategy": list(predicted), "predicted_s": list(predicted.values())})
    expected = _relative_accuracy(df, results, 2, lambda f: dict(predicted))
    assert [e["a"] for e in expected] == pytest.approx([1.2, 1.2 * 1.05])
    rel = dict(zip(df.strategy, df.measured_over_predicted_rel_max, strict=True))
    assert rel["a"] == pytest.approx(1.0) and rel["b"] == pytest.approx(1.1 / 1.05)
    assert df.processor_speed.isna().all()


def test_a_link_bound_plan_keeps_its_time_when_the_processor_drifts():
    """The drift moves compute, not the link (karma/runtime/drift.py): on a machine 20% slower than its profile
    a swap plan bound by the link runs at its prediction and a recompute plan 20% over it. Judged against one
    scale of every prediction both were off by 10%; at the fitted speed both are within 1% of it (so is
    KARMA's predicted speedup at that speed of the measured one), and a run at the profile's speed fits 1."""
    unit = make_unit(forward_time=0.01, backward_time=0.02, saved_bytes=int(4e9), recompute_extra_time=0.001)
    profile = Profile("m", "small", 1, "measured", "cpu", "sgd", (unit,) * 4)
    hw = load("v100-abci")

    def plan(name, policy):
        blocks = tuple(Block(i, i + 1, policy) for i in range(3)) + (Block(3, 4, "keep"),)
        return unchecked(model="m", batch=1, units=4, blocks=blocks, weights="resident", prefetch_depth=1,
                         strategy=name)

    plans = {"vdnn": plan("vdnn", "swap"), "karma": plan("karma", "recompute")}
    slow_profile, slow_hw = at_speed(profile, hw, 1.2)
    measured = {name: simulate(slow_profile, p, slow_hw).makespan for name, p in plans.items()}
    predicted = {name: simulate(profile, p, hw).makespan for name, p in plans.items()}
    assert measured["vdnn"] / predicted["vdnn"] == pytest.approx(1.0, abs=0.01)  # bound by the link
    assert measured["karma"] / predicted["karma"] == pytest.approx(1.2, abs=0.01)  # bound by compute
    predict = predictor(profile, hw, float("inf"), plans)
    factor = fit_speed(predict, measured)
    assert 1.0 < factor <= 1.2 + 1e-6
    for name in plans:
        assert measured[name] / predict(factor)[name] == pytest.approx(1.0, abs=0.01)
    assert fit_speed(predict, {name: predicted[name] for name in plans}) == pytest.approx(1.0, rel=1e-6)


def test_karmas_excess_error_is_its_error_less_the_median_baselines_per_repeat():
    times = {"karma": [1.10, 1.00], "a": [2.0, 2.0], "b": [3.3, 3.0], "c": [1.0, 1.0]}
    expected = [{"karma": 1.0, "a": 2.0, "b": 3.0, "c": 1.0}] * 2
    # repeat 0: karma 0.10 off, baselines 0, 0.10, 0 (median 0); repeat 1: all exact
    assert karma_excess_error(times, expected) == pytest.approx((0.05, 0.0, 0.10))
    assert karma_excess_error({"a": [1.0]}, [{"a": 1.0}]) is None


def test_the_measured_order_is_tested_where_the_prediction_is_further_apart_than_the_spread():
    expected = [{"x": 1.0, "y": 1.2, "z": 1.0}] * 3
    # x / y predicted 0.833: spread of the measured ratio 0.95-1.05 (about 10%) is less apart, so it is tested
    times = {"x": [1.0, 1.0, 1.0], "y": [0.95, 1.0, 0.97], "z": [1.0, 1.5, 0.8]}
    tested, wrong = order_disagreements(times, expected)
    # x / y tested and measured the other way; x / z and y / z within their (large) spread
    assert tested == 1 and len(wrong) == 1 and wrong[0].startswith("x / y predicted 0.833")
    times["y"] = [1.15, 1.2, 1.25]
    assert order_disagreements(times, expected) == (1, [])

"""The speedup summary (karma/experiments/speedups.py): the strongest baseline named, vDNN out of the mean, and,
for a plan over 1.05 of the bound, whose fault it is from the long search `compare` ran."""

from unittest import mock

import pandas as pd
import pytest

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.experiments import speedups
from karma.experiments.long_search import blame
from karma.profile.profile import Profile
from tests.chains import make_unit


def _table(karma_s: float, long_s: float | None, bound: float = 1.0) -> pd.DataFrame:
    rows = [("vdnn", 5.0), ("rotor", 1.1), ("checkpoint", 1.2), ("karma", karma_s)]
    return pd.DataFrame([{
        "model": "m", "batch": 8, "strategy": name, "status": "ok", "time_s": t, "karma_speedup": t / karma_s,
        "time_over_bound": t / bound, "bound_s": bound, "long_search_s": long_s if name == "karma" else None,
        "planning_s": 0.1, "source": "simulated on test"} for name, t in rows])


def test_one_plans_blame():
    assert blame(1.04, 1.04) == "-"
    assert blame(1.052, 1.047) == "search"
    assert blame(1.068, 1.068) == "bound or plan space"


def test_the_summary_names_the_strongest_baseline_and_leaves_vdnn_out_of_the_mean():
    row = speedups.summary(_table(1.0, None)).iloc[0]
    assert row.strongest_baseline == "rotor" and abs(row.speedup_over_strongest - 1.1) < 1e-12
    assert abs(row.geomean_speedup_without_vdnn - (1.1 * 1.2) ** 0.5) < 1e-12
    assert row.over_bound_blame == "" and row.note == ""


def test_a_plan_over_the_bound_target_says_whose_fault_it_is():
    search = speedups.summary(_table(1.06, 1.03)).iloc[0]
    assert search.over_bound_blame == "search" and "finds 1.030 of the bound" in search.note
    bound = speedups.summary(_table(1.06, 1.06)).iloc[0]
    assert bound.over_bound_blame == "bound or plan space"
    unknown = speedups.summary(_table(1.06, None)).iloc[0]
    assert unknown.over_bound_blame == "unknown" and "karma.experiments.planner_gap" in unknown.note
    head = speedups.headline(_table(1.06, 1.03), speedups.summary(_table(1.06, 1.03)))
    assert head["models_over_bound_target"] == "m (1.060: search)"


def test_compare_runs_the_long_search_only_for_a_plan_over_the_target():
    hw = load("v100-abci")
    units = tuple(make_unit(f"u{i}", forward_time=1e-3, backward_time=2e-3, saved_bytes=1e8, input_bytes=1e7,
                            output_bytes=1e7, param_bytes=1e6, optimizer_bytes=1e6) for i in range(4))
    profile = Profile(model="chain", size="tiny", batch=1, source="analytic", device=hw.name, optimizer="sgd",
                      units=units)
    for target, searched in ((1e12, False), (1.05, True)):
        with mock.patch.object(speedups, "lower_bound", return_value=1e-6), \
                mock.patch.object(speedups, "BOUND_TARGET", target), \
                mock.patch.object(speedups, "long_search", return_value=0.5) as long:
            table, _ = speedups.compare(profile, hw, ["checkpoint", "karma"])
        assert long.called == searched
        assert table.long_search_s.notna().tolist() == [False, searched]
    with mock.patch.object(speedups, "lower_bound", return_value=1e-6), \
            mock.patch.object(speedups, "LONG_SEARCH_UNITS", 3), mock.patch.object(speedups, "long_search") as long:
        table, _ = speedups.compare(profile, hw, ["karma"])
    assert not long.called and table.long_search_s.isna().all()  # too long a chain: the note says what to run


def test_a_strategy_simulated_below_the_bound_stops_the_comparison():
    """The bound is below every plan the simulator accepts (karma/sim/bound.py); a time under it means the
    simulator or the bound is wrong, and the pipeline stops rather than report it."""
    hw = load("v100-abci")
    units = tuple(make_unit(f"u{i}", forward_time=1e-3, backward_time=2e-3, saved_bytes=1e8, input_bytes=1e7,
                            output_bytes=1e7, param_bytes=1e6, optimizer_bytes=1e6) for i in range(4))
    profile = Profile(model="chain", size="tiny", batch=1, source="analytic", device=hw.name, optimizer="sgd",
                      units=units)
    table, _ = speedups.compare(profile, hw, ["checkpoint", "karma"])
    assert (table.time_over_bound >= 1).all()
    with mock.patch.object(speedups, "lower_bound", return_value=1.0), \
            pytest.raises(KarmaError, match="below the lower bound"):
        speedups.compare(profile, hw, ["checkpoint", "karma"])


def test_a_margin_within_the_models_measured_error_is_a_tie():
    runtime = pd.DataFrame([
        {"model": "m", "strategy": "karma", "measured_over_predicted_rel": 1.04},
        {"model": "m", "strategy": "rotor", "measured_over_predicted_rel": 0.97},
        {"model": "other", "strategy": "karma", "measured_over_predicted_rel": None}])
    bands = speedups.error_bands(runtime)
    assert bands == {"m": pytest.approx(0.04)}
    assert speedups.verdict(1.03, 0.04) == "tie" and speedups.verdict(0.97, 0.04) == "tie"
    assert speedups.verdict(1.05, 0.04) == "win" and speedups.verdict(0.95, 0.04) == "loss"
    assert speedups.verdict(1.05, None) == "win, model error not measured"
    assert speedups.verdict(None, 0.04) == "only KARMA fits"
    summ = speedups.with_margins(speedups.summary(_table(1.0, None)), bands)  # rotor 1.1 over KARMA's 1.0
    assert summ.verdict.tolist() == ["win"] and summ.model_error_measured.tolist() == [pytest.approx(0.04)]
    assert speedups.with_margins(speedups.summary(_table(1.07, None)), bands).verdict.tolist() == ["tie"]

"""The bound's schedules as plans (karma/experiments/bound_schedule.py): every layout at every depth, summarised."""

import math

from karma.core.hardware import load
from karma.experiments.bound_schedule import DEPTHS, schedule_rows, summary, verdict
from karma.experiments.cases import Case
from karma.planner.planner import plan
from karma.sim.bound import lower_bound
from karma.sim.simulate import simulate


def test_each_layouts_schedule_is_simulated_at_every_depth_and_summarised():
    case = Case("resnet50-b64-3gb", "resnet50", batch=64, capacity_gb=3.0)
    hw = load(case.hardware)
    profile, capacity = case.profile(hw), case.capacity_gb * 1e9
    karma = simulate(profile, plan(profile, hw, capacity), hw, capacity, record=False).time
    rows = schedule_rows(case.name, profile, hw, capacity, karma, lower_bound(profile, hw, capacity))
    layouts = {row["layout"] for row in rows}
    assert layouts and len(rows) == len(layouts) * len(DEPTHS)
    bound = rows[0]["bound_s"]
    for row in rows:
        assert (row["time_s"] is not None) == row["fits"]
        assert row["schedule_s"] >= bound * (1 - 1e-9) and row["karma_s"] >= bound * (1 - 1e-9)
        assert row["unlimited_time_s"] >= bound * (1 - 1e-9)
        if row["fits"]:
            assert row["time_s"] >= row["unlimited_time_s"] * (1 - 1e-9)
    line = summary(rows).iloc[0]
    fitting = [row["time_s"] for row in rows if row["fits"]]
    assert math.isclose(line.karma_over_bound, rows[0]["karma_s"] / bound)
    if fitting:
        assert math.isclose(line.schedule_fitting_over_bound, min(fitting) / bound)
    else:
        assert line.schedule_fitting_over_bound is None or math.isnan(line.schedule_fitting_over_bound)
    words = verdict(rows)
    assert ("no plan of it fits" in words) == (not fitting)

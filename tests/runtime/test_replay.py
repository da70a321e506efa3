"""Replaying a runtime table's plan from the run's saved profile (karma/runtime/replay.py)."""

import math
from pathlib import Path

import pandas as pd
import pytest

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.plan.plan import Plan
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from karma.runtime.emulation import emulated_hardware, run_steps
from karma.runtime.rates import Rates
from karma.runtime.replay import replan, row_of
from karma.sim.simulate import in_core_peak_bytes, simulate
from karma.strategies import get
from models import build

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A profile saved and read back as the rule does, and the row a run of it would write."""
    profile = analytic_profile(build("megatron-1.2b", "small", 8, device="meta"), load("v100-abci"))
    path = tmp_path_factory.mktemp("run") / "m.profile.json"
    profile.to_json(path)
    rates = Rates(100e6, 100e6, 4e9, 4e9, "emulated")
    planned = in_core_peak_bytes(profile) * 0.6
    plan = get("karma")(profile, emulated_hardware(profile, rates, planned), planned)
    row = {"model": "megatron-1.2b", "batch": 8, "strategy": "karma", "plan": plan.policies(),
           "capacity_MB": planned / 0.95 / 1e6, "h2d_Bps": rates.h2d, "d2h_Bps": rates.d2h,
           "device_optimizer_Bps": rates.memory_bw, "host_optimizer_Bps": rates.host_update,
           "planned_capacity_bytes": planned}
    return Profile.from_json(path), pd.DataFrame([row])


def test_the_saved_profile_and_exact_rates_give_back_the_plan_the_table_ran(run):
    profile, table = run
    plan, seconds, peak = replan(profile, row_of(table, "karma"))
    assert plan.policies() == table.plan.iloc[0] and seconds > 0 and 0 < peak <= table.planned_capacity_bytes.iloc[0]


def test_a_replay_that_finds_another_plan_or_lacks_the_rates_says_so(run):
    profile, table = run
    with pytest.raises(KarmaError, match="differs"):
        replan(profile, row_of(table.assign(plan="K|K"), "karma"))
    with pytest.raises(KarmaError, match="rerun its rule"):
        row_of(table.drop(columns="h2d_Bps"), "karma")
    with pytest.raises(KarmaError, match="no row"):
        row_of(table, "vdnn")


@pytest.fixture(scope="module")
def reach_run():
    """A pipeline run's reach case (resnet50 small, layer units, batch 64) saved with the profile it was planned
    on, and the plan KARMA made there, which ran out of the emulated device (93.6 MB asked of 87.1, predicted
    78.9): a recompute block with its checkpoint on the host whose last units the profile costs at nothing
    to recompute (docs/measurements/README.md, "A reach plan that runs out")."""
    row = row_of(pd.read_csv(DATA / "reach_oom_resnet50.csv"), "karma")
    profile = Profile.from_json(DATA / "reach_oom_resnet50.profile.json")
    rates = Rates(row.h2d_Bps, row.d2h_Bps, row.device_optimizer_Bps, row.host_optimizer_Bps, "emulated")
    hw = emulated_hardware(profile, rates, float(row.planned_capacity_bytes))
    return row, profile, hw, Plan.from_json(DATA / "reach_oom_resnet50.plan.json")


def _measured_peak(row, profile, plan) -> float:
    chain = build("resnet50", profile.size, int(row.batch), seed=1, granularity="layer")
    return run_steps(chain, plan, math.inf, row.h2d_Bps, 0)[0].peak_bytes


@pytest.mark.slow
def test_a_recompute_of_no_duration_still_holds_its_checkpoint_beside_what_it_makes(reach_run):
    """The plan that ran out: its simulated peak is the runtime's (it was 16.8 MB short: the checkpoint's copy
    of the skip was freed before the outputs its zero-time recompute makes again were counted)."""
    row, profile, hw, plan = reach_run
    predicted = simulate(profile, plan, hw, math.inf).peak_bytes
    assert predicted > row.capacity_MB * 1e6  # the planner no longer takes it
    assert _measured_peak(row, profile, plan) == pytest.approx(predicted, rel=0.05)


@pytest.mark.slow
def test_the_plan_karma_makes_on_that_profile_runs_in_the_capacity(reach_run):
    row, profile, hw, _ = reach_run
    plan = get("karma")(profile, hw, float(row.planned_capacity_bytes))
    assert simulate(profile, plan, hw, math.inf).peak_bytes <= row.capacity_MB * 1e6
    assert _measured_peak(row, profile, plan) <= row.capacity_MB * 1e6

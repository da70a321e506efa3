"""The command line: writes profiles, and bad input is one line with exit status 2."""

import json
import subprocess
import sys

import pytest

from karma.cli.args import GRANULARITIES
from karma.cli.main import main
from karma.planner.config import PlannerConfig
from karma.profile.profile import Profile
from karma.sim.simulate import in_core_peak_bytes
from models.chain import GRANULARITIES as ZOO


def test_profile_writes_json_and_csv(tmp_path, capsys):
    out, table = tmp_path / "p.json", tmp_path / "p.csv"
    assert main(["profile", "resnet1001", "--size", "tiny", "--out", str(out), "--csv", str(table)]) == 0
    data = json.loads(out.read_text())
    assert data["model"] == "resnet1001" and data["source"] == "analytic" and len(data["units"]) == 8
    assert table.read_text().startswith("name,forward_time")
    assert "simulated: analytic profile on v100-abci" in capsys.readouterr().out


def test_measured_profile_on_cpu(tmp_path):
    out = tmp_path / "m.json"
    assert main(["profile", "wrn28-10", "--size", "tiny", "--source", "measured", "--hardware", "cpu",
                 "--reps", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["device"].startswith("cpu")


@pytest.mark.parametrize("args, words", [
    (["profile", "resnet51"], "valid: "),
    (["profile", "resnet50", "--size", "huge"], "valid: paper, small, tiny"),
    (["profile", "resnet50", "--batch", "0"], "positive integer"),
    (["profile", "resnet50", "--hardware", "v200"], "valid: "),
    (["profile", "resnet50", "--source", "measured", "--hardware", "v100-abci"], "valid: cpu, cuda"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, words):
    out = tmp_path / "never.json"
    proc = subprocess.run([sys.executable, "-m", "karma", *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr and not out.exists()


def test_lists():
    assert main(["models"]) == 0 and main(["hardware"]) == 0


def test_plan_then_simulate(tmp_path, capsys):
    profile, plan, timeline = tmp_path / "p.json", tmp_path / "plan.json", tmp_path / "tl.csv"
    assert main(["profile", "resnet1001", "--size", "tiny", "--out", str(profile)]) == 0
    capacity = in_core_peak_bytes(Profile.from_json(profile)) * 0.8 / 1e9
    assert main(["plan", str(profile), "--capacity-gb", str(capacity), "--out", str(plan)]) == 0
    assert "plan/bound" in capsys.readouterr().out
    assert main(["simulate", str(profile), str(plan), "--capacity-gb", str(capacity),
                 "--timeline", str(timeline)]) == 0
    assert "simulated on v100-abci" in capsys.readouterr().out
    assert timeline.read_text().startswith("resource,op,block,start,end")


def test_a_longer_search_is_a_config_the_plan_records(tmp_path):
    """`karma plan --seed --search-factor` set KARMA's PlannerConfig, which the plan file records; a baseline
    has no planner settings (one line, exit 2)."""
    profile, plan = tmp_path / "p.json", tmp_path / "plan.json"
    assert main(["profile", "resnet1001", "--size", "tiny", "--out", str(profile)]) == 0
    capacity = in_core_peak_bytes(Profile.from_json(profile)) * 0.8 / 1e9
    assert main(["plan", str(profile), "--capacity-gb", str(capacity), "--seed", "3", "--search-factor", "2",
                 "--out", str(plan)]) == 0
    config = json.loads(plan.read_text())["notes"]["planner"]
    assert config["seed"] == 3 and config["coarse_work"] == 2 * PlannerConfig().coarse_work
    proc = subprocess.run([sys.executable, "-m", "karma", "plan", str(profile), "--strategy", "rotor", "--seed", "1",
                           "--out", str(tmp_path / "never.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "planner settings are KARMA's" in proc.stderr


def test_capacity_below_any_plan_is_one_line(tmp_path):
    profile = tmp_path / "p.json"
    assert main(["profile", "resnet1001", "--size", "tiny", "--out", str(profile)]) == 0
    proc = subprocess.run([sys.executable, "-m", "karma", "plan", str(profile), "--capacity-gb", "0.000001",
                           "--out", str(tmp_path / "never.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "the most frugal plan found needs" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "never.json").exists()


def test_malformed_plan_is_one_line(tmp_path):
    profile, plan = tmp_path / "p.json", tmp_path / "bad.json"
    assert main(["profile", "resnet1001", "--size", "tiny", "--out", str(profile)]) == 0
    plan.write_text('{"version": 1, "model": "resnet1001", "batch": 2, "units": 8, "blocks": [{"start": 0}]}')
    proc = subprocess.run([sys.executable, "-m", "karma", "simulate", str(profile), str(plan)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "'blocks[0]' needs 'start' and 'stop'" in proc.stderr


def test_run_trains_here_and_prints_measured_beside_predicted(capsys):
    assert main(["run", "wrn28-10", "--size", "tiny", "--batch", "4", "--capacity-fraction", "1.5",
                 "--steps", "1", "--link-mbs", "1000"]) == 0
    out = capsys.readouterr().out
    assert "measured on cpu-emulated (link 1000.0 MB/s)" in out and "simulator on the measured profile" in out


@pytest.mark.parametrize("args, words", [
    (["run", "wrn28-10", "--size", "tiny", "--strategy", "incore", "--capacity-mb", "1"], "the simulator rejects"),
    (["run", "wrn28-10", "--size", "tiny", "--device", "cuda"], "CUDA"),
    (["run", "wrn28-10", "--size", "tiny", "--strategy", "nope"], "unknown strategy"),
])
def test_run_refuses_bad_requests_in_one_line(args, words):
    proc = subprocess.run([sys.executable, "-m", "karma", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and words in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_megatron_finds_the_best_layout(capsys):
    assert main(["megatron", "megatron-8.3b", "--gpus", "32", "--zero"]) == 0
    out = capsys.readouterr().out
    assert "tp=8 dp=4" in out and "sequences/s" in out and "[simulated, analytic profile]" in out


@pytest.mark.parametrize("args, words", [
    (["megatron-8.3b", "--gpus", "32", "--tp", "6"], "does not divide the 32 heads"),
    (["turing-nlg-17b", "--gpus", "4"], "no layout fits: the smallest needs"),
    (["resnet50", "--gpus", "4"], "unknown GPT model 'resnet50'; valid: megatron-1.2b"),
    (["megatron-8.3b", "--gpus", "32", "--tp", "8", "--micro-batch", "1", "--recompute"], "does not fit"),
])
def test_megatron_refuses_bad_layouts_in_one_line(capsys, args, words):
    assert main(["megatron", *args]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_the_command_line_granularities_are_the_zoos():
    assert tuple(GRANULARITIES) == ZOO


def test_profile_and_plan_at_layer_granularity(tmp_path):
    """A bottleneck split into layers: more units, each boundary's storages named, and a plan that fits."""
    out = tmp_path / "p.json"
    assert main(["profile", "resnet50", "--size", "tiny", "--granularity", "layer", "--out", str(out)]) == 0
    units = json.loads(out.read_text())["units"]
    assert len(units) > 20 and any(len(u["boundary_out"]) == 2 for u in units)
    plan = tmp_path / "plan.json"
    assert main(["plan", str(out), "--strategy", "karma", "--capacity-gb", "0.1", "--out", str(plan)]) == 0
    assert json.loads(plan.read_text())["units"] == len(units)

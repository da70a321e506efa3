"""Every bad input is one line on stderr and exit status 2, and nothing is written (issue 14, item 4).

Files (profiles, plans, hardware, references) are checked where they are read, each field for
type and range (karma.core.errors.number); command-line numbers must be finite and positive.
"""

import json
import math
import subprocess
import sys

import pytest
import yaml

from karma.cli.main import main
from karma.core.errors import KarmaError, finite_everywhere
from karma.core.hardware import PRESET_DIR, load
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from models import build
from tests.workflow.test_workflow import copy_workflow, run


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A valid profile (resnet1001 tiny, analytic), an all-keep plan for it, and a hardware file."""
    where = tmp_path_factory.mktemp("good")
    profile = analytic_profile(build("resnet1001", "tiny", device="meta"), load("v100-abci"))
    plan = from_policies(profile.model, profile.batch, ["keep"] * len(profile.units))
    files = {"profile": where / "p.json", "plan": where / "plan.json", "hardware": where / "hw.yaml"}
    files["profile"].write_text(json.dumps(profile.to_dict()))
    files["plan"].write_text(json.dumps(plan.to_dict()))
    files["hardware"].write_text((PRESET_DIR / "v100-abci.yaml").read_text())
    return files


def fails(capsys, args, words):
    """`karma ARGS` exits 2 with one line on stderr that starts with the program name and says `words`."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as done:  # argparse's usage errors
        status = done.code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("karma"), err
    assert words in err, err


def changed(good, kind, tmp_path, change):
    """A copy of the good `kind` file with `change` applied to its parsed data."""
    path = tmp_path / good[kind].name
    if kind == "hardware":
        data = yaml.safe_load(good[kind].read_text())
        change(data)
        path.write_text(yaml.safe_dump(data))
    else:
        data = json.loads(good[kind].read_text())
        change(data)
        path.write_text(json.dumps(data))  # NaN and Infinity as Python's json writes them
    return path


def unit(field, value, k=0):
    return lambda d: d["units"][k].__setitem__(field, value)


def top(field, value):
    return lambda d: d.__setitem__(field, value)


def zero_times(d):
    for u in d["units"]:
        u["forward_time"] = u["backward_time"] = 0


@pytest.mark.parametrize("change, words", [
    (lambda d: d["units"].__setitem__(0, 5), "unit 0 must be an object, got 5"),
    (unit("forward_time", "0.1"), "field 'units[0].forward_time' must be a finite number >= 0, got '0.1'"),
    (unit("forward_time", -3.9), "field 'units[0].forward_time' must be a finite number >= 0, got -3.9"),
    (unit("backward_time", math.nan), "field 'units[0].backward_time' must be a finite number >= 0, got nan"),
    (unit("forward_flops", math.inf), "'units[0].forward_flops' must be a finite number >= 0, got inf"),
    (unit("saved_bytes", -1, 2), "field 'units[2].saved_bytes' must be an integer >= 0, got -1"),
    (unit("saved_bytes", True), "'units[0].saved_bytes' must be an integer >= 0, got True"),
    (unit("param_bytes", 1.5), "'units[0].param_bytes' must be an integer >= 0, got 1.5"),
    (unit("output_bytes", 10 ** 400), "'units[0].output_bytes' must be an integer >= 0"),
    (unit("backward_workspace_bytes", "x"), "'units[0].backward_workspace_bytes' must be an integer, got 'x'"),
    (unit("name", 3), "field 'units[0].name' must be a string, got 3"),
    (unit("colour", "red"), "unit 0 has unknown field 'colour'"),
    (lambda d: d["units"][1].pop("saved_bytes"), "unit 1 lacks field 'saved_bytes'"),
    (top("optimizer", "rmsprop"), "unknown optimizer 'rmsprop'; valid: adam, sgd"),
    (top("dtype", "fp8"), "unknown dtype 'fp8'; valid: bfloat16, float16, float32"),
    (top("batch", "2"), "field 'batch' must be an integer >= 1, got '2'"),
    (top("batch", 0), "field 'batch' must be an integer >= 1, got 0"),
    (top("source", "guessed"), "profile source must be 'analytic' or 'measured'"),
    (top("device", None), "field 'device' must be a string, got None"),
    (top("units", {}), "field 'units' must be a non-empty list of unit objects"),
    (top("units", []), "field 'units' must be a non-empty list of unit objects"),
    (top("version", 2), "field 'version' must be 3, got 2 (written by an older version"),
    (top("colour", "red"), "unknown field 'colour'"),
    (lambda d: d.pop("optimizer"), "missing field 'optimizer'"),
    (zero_times, "every unit's forward and backward time is 0"),
])
def test_bad_profile_field(good, tmp_path, capsys, change, words):
    fails(capsys, ["simulate", changed(good, "profile", tmp_path, change), good["plan"]], words)


def block(field, value):
    return lambda d: d["blocks"][0].__setitem__(field, value)


@pytest.mark.parametrize("change, words", [
    (top("notes", "junk"), "field 'notes' must be an object, got 'junk'"),
    (top("notes", [1]), "field 'notes' must be an object"),
    (top("predicted_time", "fast"), "field 'predicted_time' must be a finite number >= 0 or null, got 'fast'"),
    (top("predicted_time", -1), "field 'predicted_time' must be a finite number >= 0 or null, got -1"),
    (top("predicted_peak", math.nan), "field 'predicted_peak' must be a finite number >= 0 or null, got nan"),
    (top("predicted_peak", True), "field 'predicted_peak' must be a finite number >= 0 or null, got True"),
    (top("optimizer", "cpu"), "field 'optimizer' must be one of device, host, got 'cpu'"),
    (top("weights", 1), "field 'weights' must be one of resident, streamed, got 1"),
    (top("batch", True), "field 'batch' must be an integer >= 1, got True"),
    (top("prefetch_depth", 1.0), "field 'prefetch_depth' must be an integer >= 0, got 1.0"),
    (top("model", ["resnet1001"]), "field 'model' must be a string"),
    (top("strategy", None), "field 'strategy' must be a string, got None"),
    (top("blocks", "all"), "field 'blocks' must be a non-empty list of block objects"),
    (top("blocks", []), "field 'blocks' must be a non-empty list of block objects"),
    (top("units", 9), "field 'blocks' covers 8 units, the model has 9"),
    (top("colour", "red"), "unknown field 'colour'"),
    (top("version", "1"), "field 'version' must be 1, got '1'"),
    (lambda d: d.pop("batch"), "missing field 'batch'"),
    (block("policy", ["keep"]), "field 'blocks[0].policy' must be one of keep, swap, recompute, got ['keep']"),
    (block("checkpoint", "disk"), "field 'blocks[0].checkpoint' must be one of device, host, got 'disk'"),
    (block("stop", 1.0), "field 'blocks[0].stop' must be an integer >= 1, got 1.0"),
    (block("start", -1), "field 'blocks[0].start' must be an integer >= 0, got -1"),
    (block("stop", 3), "blocks must tile the units in order"),
    (block("colour", 3), "unknown field 'blocks[0].colour'"),
    (lambda d: d["blocks"].__setitem__(0, 7), "field 'blocks[0]' needs 'start' and 'stop'"),
])
def test_bad_plan_field(good, tmp_path, capsys, change, words):
    fails(capsys, ["simulate", good["profile"], changed(good, "plan", tmp_path, change)], words)


def test_a_plan_for_another_chain_is_refused(good, tmp_path, capsys):
    plan = tmp_path / "other.json"
    plan.write_text(json.dumps(from_policies("resnet1001", 2, ["keep"] * 9).to_dict()))
    fails(capsys, ["simulate", good["profile"], plan], "plan is for resnet1001 batch 2 (9 units), the profile is")


def hw(field, value):
    return lambda d: d.__setitem__(field, value)


@pytest.mark.parametrize("change, words", [
    (hw("h2d_gbs", -12), "field 'h2d_gbs' must be a positive number, got -12"),
    (hw("h2d_gbs", 0), "field 'h2d_gbs' must be a positive number, got 0"),
    (hw("d2h_gbs", math.nan), "field 'd2h_gbs' must be a positive number, got nan"),
    (hw("sustained_tflops", math.inf), "field 'sustained_tflops' must be a positive number, got inf"),
    (hw("device_memory_gb", "16 GB"), "field 'device_memory_gb' must be a positive number, got '16 GB'"),
    (hw("kernel_launch_us", True), "field 'kernel_launch_us' must be a positive number, got True"),
    (hw("gpus_per_node", 4.0), "field 'gpus_per_node' must be an integer >= 1, got 4.0"),
    (hw("name", [1]), "field 'name' must be a string, got [1]"),
    (hw("link_duplex", "triple"), "field 'link_duplex' must be 'full' or 'half'"),
    (hw("hbm_gbs", 3), "unknown field 'hbm_gbs'"),
    (lambda d: d.pop("h2d_gbs"), "missing field 'h2d_gbs'"),
])
def test_bad_hardware_field(good, tmp_path, capsys, change, words):
    path = changed(good, "hardware", tmp_path, change)
    fails(capsys, ["simulate", good["profile"], good["plan"], "--hardware", path], words)


BAD_FILES = {
    "empty": (b"", "empty {kind} file"),
    "blank": (b"  \n", "empty {kind} file"),
    "array": (b"[1, 2]", "expected a JSON object, got list"),
    "number": (b"3", "expected a JSON object, got int"),
    "broken": (b'{"version": ', "not valid JSON (Expecting value at line 1)"),
    "latin-1": (b'{"model": "r\xe9snet"}', "not a UTF-8 text file (byte 12), not a {kind} file"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
@pytest.mark.parametrize("kind", ["profile", "plan"])
def test_bad_json_file(good, tmp_path, capsys, kind, case):
    content, words = BAD_FILES[case]
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    files = {**good, kind: path}
    fails(capsys, ["simulate", files["profile"], files["plan"]], words.format(kind=kind))


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("kind", ["profile", "plan", "hardware"])
def test_a_directory_or_a_missing_file(good, tmp_path, capsys, kind, missing):
    path = tmp_path / "given.yaml"
    if not missing:
        path.mkdir()
    given = {**good, kind: path}
    fails(capsys, ["simulate", given["profile"], given["plan"], "--hardware", given["hardware"]],
          f"{kind} file not found" if missing else f"given.yaml: is a directory, not a {kind} file")


@pytest.mark.parametrize("content, words", [
    (b"\xff\xfe\x00", "not a UTF-8 text file (byte 0), not a hardware file"),
    (b"", "empty hardware file"),
    (b"# nothing\n", "expected a mapping of fields, got NoneType"),
    (b"- 1\n- 2\n", "expected a mapping of fields, got list"),
    (b"a: [1, 2", "not valid YAML"),
])
def test_bad_hardware_file(good, tmp_path, capsys, content, words):
    path = tmp_path / "hw.yaml"
    path.write_bytes(content)
    fails(capsys, ["simulate", good["profile"], good["plan"], "--hardware", path], words)


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "0", "abc", "1e400", "-inf"])
@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_capacity_must_be_finite_and_positive(good, tmp_path, capsys, command, value):
    files = [good["profile"]] + ([good["plan"]] if command == "simulate" else [])
    out = tmp_path / "never.json"
    fails(capsys, [command, *files, f"--capacity-gb={value}"] + (["--out", out] if command == "plan" else []),
          f"argument --capacity-gb: must be a positive number, got '{value}'")
    assert not out.exists()


@pytest.mark.parametrize("args, words", [
    (["run", "wrn28-10", "--capacity-fraction", "nan"], "argument --capacity-fraction: must be a positive number"),
    (["run", "wrn28-10", "--capacity-fraction", "-0.5"], "argument --capacity-fraction: must be a positive"),
    (["run", "wrn28-10", "--capacity-mb", "inf"], "argument --capacity-mb: must be a positive number, got 'inf'"),
    (["run", "wrn28-10", "--link-mbs", "0"], "argument --link-mbs: must be a positive number, got '0'"),
    (["run", "wrn28-10", "--steps", "0"], "argument --steps: must be a positive integer, got '0'"),
    (["run", "wrn28-10", "--batch", "1.5"], "argument --batch: must be a positive integer, got '1.5'"),
    (["run", "wrn28-10", "--batch", "true"], "argument --batch: must be a positive integer, got 'true'"),
    (["run", "wrn28-10", "--threads", "-2"], "argument --threads: must be a positive integer, got '-2'"),
    (["profile", "resnet50", "--batch", "-1"], "argument --batch: must be a positive integer, got '-1'"),
    (["profile", "resnet50", "--reps", "nan"], "argument --reps: must be a positive integer, got 'nan'"),
    (["megatron", "megatron-1.2b", "--gpus", "0"], "argument --gpus: must be a positive integer, got '0'"),
])
def test_command_line_numbers(capsys, args, words):
    fails(capsys, args, words)


def test_plan_refuses_a_plan_that_does_not_fit(good, tmp_path, capsys):
    """The in-core baseline's plan needs the whole footprint: under a smaller capacity `karma plan`
    exits 2 with the simulator's reason and writes no plan (nor a temporary file)."""
    out = tmp_path / "oom.json"
    fails(capsys, ["plan", good["profile"], "--strategy", "incore", "--capacity-gb", "0.001", "--out", out],
          "the incore plan for resnet1001 batch 2 does not fit in 0.001 GB (needs ")
    assert list(tmp_path.iterdir()) == []


def test_an_output_path_that_is_a_directory(good, tmp_path, capsys):
    fails(capsys, ["plan", good["profile"], "--out", tmp_path], "is a directory; give a file name to write")
    fails(capsys, ["simulate", good["profile"], good["plan"], "--timeline", tmp_path], "is a directory")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("content, words", [
    (b"", "empty reference file"),
    (b"\xe9", "not a UTF-8 text file"),
    (b"a,b\n1,2\n", "missing column 'metric'"),
    (b"metric,kind,value\nx,simulated,fast\n", "column 'value' must hold numbers"),
])
def test_bad_reference(tmp_path, capsys, content, words):
    path = tmp_path / "metrics.csv"
    path.write_bytes(content)
    fails(capsys, ["compare", "--reference", path, "--results", tmp_path], words)


def test_the_issue_cases_in_a_real_process(good, tmp_path):
    """`python -m karma` itself: exit 2, one line, no traceback (the issue's first case)."""
    bad = changed(good, "profile", tmp_path, lambda d: d["units"].__setitem__(0, 5))
    proc = subprocess.run([sys.executable, "-m", "karma", "simulate", str(bad), str(good["plan"])],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("karma: error: ") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


@pytest.mark.parametrize("config, words", [
    ({"runtime": {"capacity_fraction": math.nan}}, "'config: runtime: capacity_fraction' must be a finite number"),
    ({"runtime": {"link_mbs": math.inf}}, "'config: runtime: link_mbs' must be a finite number, got inf"),
    ({"scaling": {"nodes": [1, -math.inf]}}, "'config: scaling: nodes[1]' must be a finite number"),
])
def test_a_config_number_must_be_finite(config, words):
    """The pipeline's schema lets NaN and inf through its bounds; workflow/rules/common.smk calls this."""
    with pytest.raises(KarmaError, match=words.replace("[", r"\[").replace("]", r"\]")):
        finite_everywhere(config, "config")
    finite_everywhere({"runtime": {"capacity_fraction": 0.5, "link_mbs": None}, "nodes": [1, 2]}, "config")


@pytest.mark.slow
def test_the_pipeline_refuses_a_nan_in_its_config(tmp_path):
    cwd = copy_workflow(tmp_path)
    config = yaml.safe_load((cwd / "config/config.yaml").read_text())
    config["runtime"]["capacity_fraction"] = math.nan
    (cwd / "config/config.yaml").write_text(yaml.safe_dump(config))
    proc = run(cwd, "-n", "--cores", "1")
    assert proc.returncode != 0
    assert "'config: runtime: capacity_fraction' must be a finite number, got nan" in proc.stdout + proc.stderr
    assert sorted(p.name for p in (cwd / "results").iterdir()) == ["reference"]  # nothing written

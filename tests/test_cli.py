"""The command line: writes profiles, and bad input is one line with exit status 2."""

import json
import subprocess
import sys

import pytest

from karma.cli import main


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

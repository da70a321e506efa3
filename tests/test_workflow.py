"""The Snakemake pipeline: schema in step with the registry, lint clean, bad config named."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from models.registry import MODELS

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def test_schema_lists_exactly_the_registered_models():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert schema["definitions"]["model"]["enum"] == list(MODELS)


def copy_workflow(tmp_path) -> Path:
    for name in ["Snakefile", "workflow", "config", "profiles"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    shutil.copy(ROOT / "environment.yml", tmp_path / "environment.yml")
    return tmp_path


def run(cwd, *args):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_lint_is_clean(tmp_path):
    proc = run(copy_workflow(tmp_path), "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr


def test_dry_run_plans_every_profile(tmp_path):
    proc = run(copy_workflow(tmp_path), "-n", "--cores", "1")
    assert proc.returncode == 0, proc.stderr
    assert "profile_analytic" in proc.stdout and "footprint_table" in proc.stdout


@pytest.mark.parametrize("key, value, words", [
    ("paper_models", ["resnet51"], "resnet51"),
    ("hardware", "v200", "valid: "),
    ("colour", "red", "colour"),
])
def test_bad_config_names_the_key(tmp_path, key, value, words):
    cwd = copy_workflow(tmp_path)
    config = yaml.safe_load((cwd / "config/config.yaml").read_text())
    config[key] = value
    (cwd / "config/config.yaml").write_text(yaml.safe_dump(config))
    proc = run(cwd, "-n", "--cores", "1")
    assert proc.returncode != 0
    assert words in proc.stdout + proc.stderr
    assert not (cwd / "results").exists()

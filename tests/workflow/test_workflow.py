"""The Snakemake pipeline: schema in step with the registry, lint clean, bad config named."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from models.registry import MODELS

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def test_schema_lists_exactly_the_registered_models():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert schema["definitions"]["model"]["enum"] == list(MODELS)


def copy_workflow(tmp_path) -> Path:
    for name in ["Snakefile", "workflow", "config", "profiles"]:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    shutil.copy(ROOT / "environment.yml", tmp_path / "environment.yml")
    shutil.copytree(ROOT / "results" / "reference", tmp_path / "results" / "reference")
    return tmp_path


@pytest.mark.slow
def test_a_baseline_file_and_an_extra_model_in_the_config_reach_the_table(tmp_path):
    """The README's 'adding a baseline' and 'your own model' recipes, end to end on a small config."""
    cwd = copy_workflow(tmp_path)
    baselines = cwd / "baselines"
    shutil.copytree(ROOT / "baselines", baselines)
    (baselines / "keep_half.py").write_text(
        "from karma.plan.plan import from_policies\n\n\n"
        "def plan(profile, hw, capacity):\n"
        "    n = len(profile.units)\n"
        "    labels = ['swap'] * (n // 2) + ['keep'] * (n - n // 2)\n"
        "    return from_policies(profile.model, profile.batch, labels, strategy='keep-half')\n")
    config = yaml.safe_load((cwd / "config/config.yaml").read_text())
    config.update(paper_models=["resnet50", "megatron-2.5b"], speedup_models=["resnet50"],
                  gantt_model="resnet50", strategies=["vdnn", "keep-half", "karma"])
    config["large_nlp"]["models"] = ["megatron-2.5b"]
    config["extra_models"] = [{"name": "my-mlp", "spec": "examples.own_model:mlp", "batch": 64},
                              {"name": "my-unet", "spec": "examples.unet:unet", "batch": 2,  # several-tensor cuts
                               "options": {"set": {"width": 16, "resolution": 16, "mults": [1, 2], "blocks": 1}}}]
    config["runtime"]["models"], config["runtime"]["reach"]["models"] = [], []  # nothing measured: quick
    (cwd / "config/config.yaml").write_text(yaml.safe_dump(config))
    env = {**__import__("os").environ, "PYTHONPATH": f"{cwd}:{ROOT}"}
    proc = subprocess.run([*SNAKEMAKE, "--cores", "2", "results/tables/speedups.csv"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pd.read_csv(cwd / "results/tables/speedups.csv")
    assert "keep-half" in set(table.strategy)
    mine = table[table.model == "my-mlp"]
    assert set(mine.strategy) == {"vdnn", "keep-half", "karma"} and (mine.batch == 64).all()
    assert set(table[table.model == "my-unet"].strategy) == {"vdnn", "keep-half", "karma"}
    summary = pd.read_csv(cwd / "results/tables/speedup_summary.csv")
    assert summary.verdict.str.endswith("model error not measured").all()


def run(cwd, *args):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_lint_is_clean(tmp_path):
    proc = run(copy_workflow(tmp_path), "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_dry_run_plans_every_profile(tmp_path):
    proc = run(copy_workflow(tmp_path), "-n", "--cores", "1")
    assert proc.returncode == 0, proc.stderr
    for rule in ["profile_analytic", "footprint_table", "compare_strategies", "speedup_table",
                 "gantt", "validate_runtime", "runtime_table", "scaling", "scaling_table", "validate_distributed",
                 "distributed_table", "large_nlp", "large_nlp_whatif", "validate_tensor_parallel",
                 "large_nlp_table", "regression"]:
        assert rule in proc.stdout


@pytest.mark.parametrize("extra", sorted(p.name for p in (ROOT / "config").glob("*.yaml") if p.name != "config.yaml"))
@pytest.mark.slow
def test_every_config_file_dry_runs_on_top_of_the_default(tmp_path, extra):
    """config/cluster.yaml and config/slurm-test.yaml are read over config/config.yaml (docs/pipeline.md):
    each must pass the config checks of workflow/rules/common.smk on its own models."""
    proc = run(copy_workflow(tmp_path), "-n", "--cores", "1", "--configfile", "config/config.yaml",
               f"config/{extra}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("key, value, words", [
    ("paper_models", ["resnet51"], "resnet51"),
    ("hardware", "v200", "valid: "),
    ("colour", "red", "colour"),
    ("strategies", ["karma", "vdnn2"], "valid: "),
    ("gantt_model", "resnet51", "resnet51"),
    ("large_nlp", {"models": ["megatron-2.5b"], "nodes": [1], "whatif_hardware": ["v999"], "whatif_nodes": [1],
                   "map": {"precisions": ["fp16"], "nodes": [1], "max_batch": 1},
                   "validate": {"ranks": 2, "models": ["megatron-1.2b"], "global_batch": 8, "steps": 1}},
     "whatif_hardware': unknown hardware 'v999'; valid: "),
    ("large_nlp", {"models": ["turing-nlg-17b"], "nodes": [1], "whatif_hardware": [], "whatif_nodes": [1],
                   "validate": {"ranks": 2, "models": ["megatron-1.2b"], "global_batch": 8, "steps": 1},
                   "sizes": 3}, "sizes"),
])
@pytest.mark.slow
def test_bad_config_names_the_key(tmp_path, key, value, words):
    cwd = copy_workflow(tmp_path)
    config = yaml.safe_load((cwd / "config/config.yaml").read_text())
    config[key] = value
    (cwd / "config/config.yaml").write_text(yaml.safe_dump(config))
    proc = run(cwd, "-n", "--cores", "1")
    assert proc.returncode != 0
    assert words in proc.stdout + proc.stderr
    assert sorted(p.name for p in (cwd / "results").iterdir()) == ["reference"]  # nothing written


@pytest.mark.slow
def test_the_slurm_profile_dry_runs_with_mpi_jobs_under_srun(tmp_path):
    cwd = copy_workflow(tmp_path)
    proc = run(cwd, "--workflow-profile", "workflow/profiles/slurm", "--configfile", "config/config.yaml",
               "config/cluster.yaml", "-n", "-p")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "srun --mpi=pmi2 -n 8 python -m karma.experiments.validate_tensor_parallel" in proc.stdout
    assert "srun --mpi=pmi2 -n 8 python -m karma.experiments.validate_data_parallel" in proc.stdout


def test_the_slurm_profile_asks_for_gpus_the_way_the_executor_accepts():
    """snakemake-executor-plugin-slurm refuses --gres inside slurm_extra: GPUs go through its `gpu`
    resource, one per MPI rank (issue 17; .ci/slurm runs this profile on a real one-node Slurm)."""
    profile = yaml.safe_load((ROOT / "workflow/profiles/slurm/config.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "config/cluster.yaml").read_text())
    rules = profile["set-resources"]
    assert not any("gres" in str(r.get("slurm_extra", "")) for r in rules.values())
    assert rules["profile_measured"]["gpu"] == rules["validate_runtime"]["gpu"] == 1
    assert rules["validate_distributed"]["gpu"] == cluster["distributed"]["ranks"]
    assert rules["validate_tensor_parallel"]["gpu"] == cluster["large_nlp"]["validate"]["ranks"]
    assert all(rules[r]["tasks_per_gpu"] == 1 and rules[r]["mpi"].startswith("srun")
               for r in ("validate_distributed", "validate_tensor_parallel"))


def test_the_local_slurm_node_has_the_machines_cpus_whatever_omp_num_threads_says(tmp_path):
    """GNU nproc honours OMP_NUM_THREADS: a node sized by it has one CPU, and `srun -n 2` waits forever."""
    conf = tmp_path / "etc" / "slurm.conf"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "KARMA_SLURM_CONF": str(conf), "KARMA_SLURM_STATE": str(tmp_path)}
    subprocess.run(["bash", str(ROOT / "workflow/cluster/local-slurm.sh"), "config"], env=env, check=True)
    node = next(line for line in conf.read_text().splitlines() if line.startswith("NodeName="))
    assert f" CPUs={os.cpu_count()} " in node, node
    assert (conf.parent / "gres.conf").exists()


def schema_keys(node: dict, path: str = "") -> list[str]:
    """Every property of the config schema, as `a.b` (`a[].b` inside arrays)."""
    keys = []
    for name, sub in node.get("properties", {}).items():
        key = f"{path}.{name}" if path else name
        keys.append(key)
        if isinstance(sub, dict):
            if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
                keys += schema_keys(sub["items"], f"{key}[]")
            keys += schema_keys(sub, key)
    return keys


def test_config_readme_documents_every_schema_key():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    documented = set(re.findall(r"^\| `([^`]+)` \|", (ROOT / "config/README.md").read_text(), re.M))
    keys = schema_keys(schema)
    assert keys and [k for k in keys if k not in documented] == []
    assert [k for k in documented if k not in keys] == []

"""Megatron tensor / hybrid parallelism over real MPI ranks (karma/parallel/hybrid_parallel.py)."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from karma.runtime.optim import new_optimizer
from models import build

MPIEXEC = Path(sys.executable).parent / "mpiexec"
MODEL, STEPS = "megatron-1.2b", 3
pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec (mpich wheel) not installed")


def launch(ranks: int, module: str, *args, timeout: int = 180):
    """Every multi-rank run has a timeout: a collective called by only some ranks would hang."""
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", module, MODEL, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def one_process_on_the_global_batch(size: str, global_batch: int):
    chain = build(MODEL, size, global_batch, seed=0, overrides={"dropout": 0.0})
    optimizer = new_optimizer("sgd", list(chain.units.parameters()))
    for step in range(STEPS):
        optimizer.zero_grad()
        chain.step_loss(*chain.make_batch(seed=step)).backward()
        optimizer.step()
    return chain.units.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("ranks, tp, size", [(2, 2, "tiny"), (4, 4, "small"), (4, 2, "tiny"), (2, 1, "tiny")])
def test_split_layers_match_the_unsplit_model_and_train_like_one_process(tmp_path, ranks, tp, size):
    out = tmp_path / "weights.pt"
    global_batch = 4
    proc = launch(ranks, "karma.parallel.hybrid_parallel", "--tp", str(tp), "--size", size, "--global-batch",
                  str(global_batch), "--steps", str(STEPS), "--no-dropout", "--optimizer", "sgd", "--check",
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"tp {tp} x dp {ranks // tp}" in proc.stdout and "measured on cpu" in proc.stdout
    result = torch.load(out)
    assert result["check"]["output"] < 1e-4 and result["check"]["gradients"] < 1e-5, result["check"]
    expected = one_process_on_the_global_batch(size, global_batch)
    assert set(result["state"]) == set(expected)
    for key, value in expected.items():
        torch.testing.assert_close(result["state"][key], value, rtol=1e-5, atol=1e-5, msg=key)


def test_a_degree_that_does_not_divide_the_heads_is_one_line(tmp_path):
    proc = launch(4, "karma.parallel.hybrid_parallel", "--tp", "4", "--out", str(tmp_path / "never.pt"), timeout=60)
    assert proc.returncode != 0
    assert "tensor-parallel degree 4 does not divide the 2 heads" in proc.stderr
    assert "valid degrees: 1, 2" in proc.stderr
    assert not (tmp_path / "never.pt").exists()


@pytest.mark.slow  # an end-to-end run of 9-15 s: CI's slow step (README, Tests and CI)
def test_validation_against_the_cost_model_writes_both_layouts(tmp_path):
    out = tmp_path / "tp.csv"
    proc = launch(2, "karma.experiments.validate_tensor_parallel", "--size", "tiny", "--global-batch", "4",
                  "--steps", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = pd.read_csv(out)
    assert list(table.tp) == [1, 2] and list(table.dp) == [2, 1]
    assert (table.predicted_s > 0).all() and (table.measured_s > 0).all()
    assert table.tp_allreduce_s.iloc[0] == 0 and table.tp_allreduce_s.iloc[1] > 0
    assert table.source.str.contains("measured on cpu").all()

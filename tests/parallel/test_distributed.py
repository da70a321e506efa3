"""Data parallel out-of-core over real MPI ranks (mpiexec from the mpich wheel)."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from karma.parallel.data_parallel import Paced
from karma.plan.plan import from_policies
from karma.runtime.execute import make_optimizer
from models import build

MPIEXEC = Path(sys.executable).parent / "mpiexec"
MODEL, GLOBAL_BATCH, STEPS = "megatron-1.2b", 4, 3
pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec (mpich wheel) not installed")


def launch(ranks: int, *args, timeout: int = 120):
    """Every multi-rank run has a timeout: a collective called by only some ranks would hang."""
    cmd = [str(MPIEXEC), "-n", str(ranks), sys.executable, "-m", "karma.parallel.data_parallel", MODEL, "--no-dropout",
           "--optimizer", "sgd", "--global-batch", str(GLOBAL_BATCH), "--steps", str(STEPS), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def one_process_on_the_global_batch():
    torch.manual_seed(0)
    chain = build(MODEL, "tiny", GLOBAL_BATCH, seed=0, overrides={"dropout": 0.0})
    chain.optimizer = "sgd"
    optimizer = make_optimizer(chain)
    for step in range(STEPS):
        optimizer.zero_grad()
        chain.step_loss(*chain.make_batch(seed=step)).backward()
        optimizer.step()
    return chain.units.state_dict()


# the four-rank runs (13-14 s each on 2 cores) run with the slow tests; two ranks cover every order and layout
FOUR = pytest.mark.slow


@pytest.mark.parametrize("ranks, order, weights, emulated", [
    (2, "pipelined", "streamed", False), (2, "naive", "streamed", False),
    pytest.param(4, "pipelined", "streamed", False, marks=FOUR),
    pytest.param(4, "naive", "streamed", False, marks=FOUR),
    (2, "pipelined", "resident", False), pytest.param(4, "naive", "resident", False, marks=FOUR),
    (2, "pipelined", "streamed", True), (2, "naive", "resident", True)])
def test_ranks_train_like_one_process_on_the_global_batch(tmp_path, ranks, order, weights, emulated):
    """Also with the network and the host optimizer emulated (karma.parallel.data_parallel.Paced): pacing only waits."""
    out = tmp_path / "weights.pt"
    plan = tmp_path / "plan.json"
    per_rank = GLOBAL_BATCH // ranks
    n = len(build(MODEL, "tiny", device="meta"))
    from_policies(MODEL, per_rank, (["swap", "recompute", "keep"] * n)[:n], weights=weights,
                  prefetch_depth=2).to_json(plan)
    paced = ["--network-mbs", "50", "--host-mbs", "100"] if emulated else []
    proc = launch(ranks, "--order", order, "--plan", str(plan), "--out", str(out), *paced)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{ranks} ranks, {order}" in proc.stdout and "measured on cpu-emulated" in proc.stdout
    got = torch.load(out)["state"]
    for (key, a), b in zip(one_process_on_the_global_batch().items(), got.values(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=key)


def test_a_failing_rank_ends_every_rank_with_its_name(tmp_path):
    out = tmp_path / "never.pt"
    proc = launch(2, "--fail-on-rank", "1", "--out", str(out), timeout=60)
    assert proc.returncode != 0
    assert "rank 1: error:" in proc.stderr and "injected fault" in proc.stderr
    assert not out.exists()


def test_a_global_batch_the_ranks_cannot_share_is_one_line_per_rank(tmp_path):
    cmd = [str(MPIEXEC), "-n", "3", sys.executable, "-m", "karma.parallel.data_parallel", MODEL, "--global-batch", "4",
           "--out", str(tmp_path / "never.pt")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "does not split over 3 ranks" in proc.stderr
    assert not (tmp_path / "never.pt").exists()


@pytest.mark.slow  # an end-to-end run of 9-15 s: CI's slow step (README, Tests and CI)
def test_validation_against_the_model_writes_both_orders(tmp_path):
    out = tmp_path / "dp.csv"
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "karma.experiments.validate_data_parallel", MODEL,
           "--size", "tiny", "--batch", "2",
           "--steps", "1", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]

    table = pd.read_csv(out)
    assert list(table.order) == ["pipelined", "naive"]
    assert (table.measured_s > 0).all() and (table.predicted_s > 0).all()
    assert table.source.str.contains("measured on cpu-emulated").all()
    assert (table.repeats == 3).all()  # the default: median and range of 3 interleaved repeats
    for name in ("naive_over_pipelined_measured", "naive_over_pipelined_predicted", "ratio_measured_over_predicted"):
        assert (table[f"{name}_min"] <= table[name]).all() and (table[name] <= table[f"{name}_max"]).all()
    assert (table.network_MBs > 0).all() and (table.host_update_MBs > 0).all()


def test_paced_resources_queue_in_order():
    """An emulated resource serves one job after another: deadlines add up from when it is free."""
    pace = Paced()
    now = time.perf_counter()
    first = pace.reserve(0.2, now)
    second = pace.reserve(0.1, now)
    assert first == pytest.approx(now + 0.2) and second == pytest.approx(now + 0.3)
    later = pace.reserve(0.1, now + 1.0)
    assert later == pytest.approx(now + 1.1)


def test_a_dying_rank_ends_the_job_naming_it(tmp_path):
    """mpiexec ends every rank and names a PID; the ranks' first lines map it to its rank. It names the
    first process it sees end, and it ends the survivors with the same SIGKILL the dying rank got, so
    that may be either rank (2026-12-01: rank 0 once in a full run, rank 1 otherwise)."""
    out = tmp_path / "never.pt"
    proc = launch(2, "--die-on-rank", "1", "--out", str(out), timeout=60)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "BAD TERMINATION" in text
    pid = re.search(r"PID (\d+) RUNNING", text).group(1)
    ranks = dict(re.findall(r"rank (\d) of 2 is pid (\d+)", text))
    assert set(ranks) == {"0", "1"} and pid in ranks.values()
    assert not out.exists()


def test_ranks_that_disagree_on_the_plan_all_exit(tmp_path):
    per_rank = GLOBAL_BATCH // 2
    n = len(build(MODEL, "tiny", device="meta"))
    from_policies(MODEL, per_rank, ["keep"] * n, weights="streamed").to_json(tmp_path / "plan0.json")
    from_policies(MODEL, per_rank, ["swap"] * n, weights="streamed").to_json(tmp_path / "plan1.json")
    proc = launch(2, "--plan", str(tmp_path / "plan{rank}.json"), "--out", str(tmp_path / "never.pt"), timeout=60)
    assert proc.returncode != 0 and "ranks disagree on the model or the plan" in proc.stderr
    assert not (tmp_path / "never.pt").exists()

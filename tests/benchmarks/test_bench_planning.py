"""Benchmarks (pytest-benchmark), skipped in the test run; run them with

    pytest tests/benchmarks --benchmark-only

Targets from the planner issue: KARMA's planner on ResNet-1001 at paper size
under 2 s; the whole six-model strategy table under 60 s (this machine).
Reported, not asserted: wall-clock time is never a test verdict.
"""

import pytest

from karma.hardware import load
from karma.plan import from_policies
from karma.planner import plan
from karma.profile_analytic import analytic_profile
from karma.simulate import simulate
from karma.speedups import compare
from models import build
from models.registry import PAPER_SIX

V100 = load("v100-abci")
STRATEGIES = ["incore", "vdnn", "checkpoint", "superneurons", "zero-offload", "karma"]


@pytest.fixture(scope="module")
def resnet1001():
    return analytic_profile(build("resnet1001", "paper", device="meta"), V100)


def test_planner_resnet1001_paper(benchmark, resnet1001):
    result = benchmark.pedantic(plan, args=(resnet1001, V100, V100.device_memory), rounds=3, iterations=1)
    assert result.units == len(resnet1001.units)


def test_simulate_resnet1001_swap_all(benchmark, resnet1001):
    p = from_policies("resnet1001", resnet1001.batch, ["swap"] * len(resnet1001.units))
    benchmark(simulate, resnet1001, p, V100, None, False)


def test_six_model_table(benchmark):
    profiles = [analytic_profile(build(m, "paper", device="meta"), V100) for m in PAPER_SIX]

    def table():
        return [compare(p, V100, STRATEGIES)[0] for p in profiles]

    benchmark.pedantic(table, rounds=1, iterations=1)

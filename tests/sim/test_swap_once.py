"""A tensor two adjacent swapped blocks both save is copied once each way, in the simulator and the
runtime alike (vDNN offloads each layer's input once: Rhu et al. 2016, Sec. III-B)."""

import math

import pytest

from karma.core.hardware import load
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from karma.runtime.emulation import run_steps
from karma.sim.simulate import simulate
from models import build

V100 = load("v100-abci")


@pytest.mark.parametrize("name", ["resnet50", "megatron-1.2b"])
def test_the_runtime_moves_what_the_simulator_says_for_swapped_neighbours(name):
    n = len(build(name, "tiny", device="meta"))
    profile = analytic_profile(build(name, "tiny", 2, device="meta"), V100)
    plan = from_policies(name, 2, ["swap"] * n, prefetch_depth=2)
    sim = simulate(profile, plan, V100, capacity=math.inf)
    memory, reports = run_steps(build(name, "tiny", 2, seed=0), plan, math.inf, 1e9, 1)
    run = reports[0]
    assert run.bytes_d2h == run.bytes_h2d == pytest.approx(sim.bytes_d2h, rel=0.03)
    shared = sum(profile.shared_boundary_bytes(i) for i in range(n - 1))
    assert sim.bytes_d2h == sim.bytes_h2d == profile.activation_bytes()  # each storage once
    assert (shared > 0) == (name == "resnet50")  # ResNet's blocks save their output and input: one tensor
    assert memory.peak_bytes == pytest.approx(sim.peak_bytes, rel=0.05)

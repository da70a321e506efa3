"""The performance model of data parallel out-of-core training (network + host updates)."""

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.experiments.scaling import interpolate
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from karma.sim.network import allreduce_time, ring
from karma.sim.simulate import in_core_peak_bytes, simulate
from models import build
from tests.chains import V100, chains
from tests.fuzz import examples
from tests.sim.test_simulate import random_plan

SETTINGS = settings(max_examples=examples(30), deadline=None, suppress_health_check=list(HealthCheck))


def test_ring_all_reduce_is_the_alpha_beta_closed_form():
    assert ring(8e9, 4, 1e9, 1e-6) == pytest.approx(2 * 3 * 1e-6 + 2 * 3 / 4 * 8)
    assert allreduce_time(1e9, V100, 1) == 0.0
    assert allreduce_time(1e9, V100, 4) == pytest.approx(ring(1e9, 4, V100.intra_node_bw, V100.intra_node_latency))


def test_all_reduce_grows_with_the_gpu_count():
    times = [allreduce_time(1e9, V100, g) for g in (1, 2, 4, 8, 16, 64, 256, 2048)]
    assert times == sorted(times)


@pytest.mark.parametrize("gpus", [0, 6, -4, 2.5])
def test_a_gpu_count_the_nodes_cannot_form_is_refused(gpus):
    with pytest.raises(KarmaError, match="GPU"):
        allreduce_time(1.0, V100, gpus)


@SETTINGS
@given(chains(), st.data(), st.sampled_from([4, 8, 64, 2048]))
def test_pipelined_is_never_slower_than_naive_and_one_gpu_is_a_lower_bound(case, data, gpus):
    profile, hw, _ = case
    plan = random_plan(data, profile)
    one = simulate(profile, plan, hw, capacity=math.inf)
    pipelined = simulate(profile, plan, hw, capacity=math.inf, gpus=gpus)
    naive = simulate(profile, plan, hw, capacity=math.inf, gpus=gpus, order="naive")
    assert one.time <= pipelined.time * (1 + 1e-12) <= naive.time * (1 + 1e-12)
    assert pipelined.busy["network"] == pytest.approx(naive.busy["network"])


@SETTINGS
@given(chains(), st.data())
def test_an_infinitely_fast_network_costs_nothing(case, data):
    profile, hw, _ = case
    plan = random_plan(data, profile)
    fast = replace(hw, inter_node_bw=1e30, intra_node_bw=1e30, inter_node_latency=0.0, intra_node_latency=0.0,
                   host_memory_bw=0.0)
    one = simulate(profile, plan, fast, capacity=math.inf)
    many = simulate(profile, plan, fast, capacity=math.inf, gpus=64)
    assert many.time == pytest.approx(one.time, rel=1e-12)
    # the naive order still waits for the whole backward before the host updates
    assert simulate(profile, plan, fast, capacity=math.inf, gpus=64, order="naive").time >= one.time


@SETTINGS
@given(chains(), st.data(), st.sampled_from([1, 2, 4, 8]))
def test_the_ranks_of_a_node_share_its_host_memory(case, data, gpus):
    """With a free network, each rank of a node updates at its share of the node's update rate, and the
    iteration lasts at least as long as the node's host memory needs to serve every rank's link copies and
    host updates (host_memory_time)."""
    profile, hw, _ = case
    plan = random_plan(data, profile)
    fast = replace(hw, inter_node_bw=1e30, intra_node_bw=1e30, inter_node_latency=0.0, intra_node_latency=0.0,
                   gpus_per_node=4, host_memory_bw=data.draw(st.floats(1e9, 400e9)))
    ranks = min(gpus, 4)
    share = simulate(profile, plan, replace(fast, host_memory_bw=0.0, host_update_bw=fast.host_update_bw / ranks),
                     capacity=math.inf)
    node = simulate(profile, plan, fast, capacity=math.inf, gpus=gpus)
    traffic = share.bytes_h2d + share.bytes_d2h + share.busy.get("host", 0.0) * fast.host_update_bw / ranks
    assert node.time == pytest.approx(max(share.time, ranks * traffic / fast.host_memory_bw), rel=1e-12)
    assert node.time == pytest.approx(simulate(profile, plan, fast, capacity=math.inf, gpus=gpus,
                                               reference=True).time, rel=1e-12)


@pytest.mark.parametrize("preset", ["v100-abci", "dgx2h"])
def test_four_ranks_on_one_node_are_slower_than_one_where_the_host_binds(preset):
    """Megatron-LM 8.3B in fp16, weights streamed and updated on the host: a rank alone on its node has the
    node's host to itself; with a rank on every GPU each gets its share of the updates, and the node's memory
    serves every rank's copies besides."""
    hw = load(preset)
    profile = analytic_profile(build("megatron-8.3b", "paper", device="meta", precision="fp16"), hw)
    plan = from_policies(profile.model, profile.batch, ["recompute"] * len(profile.units), weights="streamed",
                         optimizer="host")
    one = simulate(profile, plan, hw, capacity=math.inf)
    node = simulate(profile, plan, hw, capacity=math.inf, gpus=hw.gpus_per_node)
    assert node.time > one.time * 1.2
    unshared = replace(hw, host_memory_bw=0.0)  # each GPU a host of its own, at the node's whole rate
    assert one.time == pytest.approx(simulate(profile, plan, unshared, capacity=math.inf).time, rel=1e-12)
@SETTINGS
@given(chains(), st.data(), st.sampled_from([1, 4]))
def test_host_updates_after_the_backward_start_when_it_ends_and_are_never_faster(case, data, gpus):
    """ZeRO-Offload's order (Plan.update_order 'after-backward'): no block's host update starts before the
    last backward ends, and the iteration takes at least as long as with KARMA's pipelined updates."""
    profile, hw, _ = case
    plan = replace(random_plan(data, profile), optimizer="host")
    after = replace(plan, update_order="after-backward")
    pipelined = simulate(profile, plan, hw, capacity=math.inf, gpus=gpus)
    deferred = simulate(profile, after, hw, capacity=math.inf, gpus=gpus)
    backward_end = max(e.end for e in deferred.timeline if e.op == "backward")
    assert all(e.start >= backward_end for e in deferred.timeline if e.op == "optimizer step")
    assert deferred.time >= pipelined.time * (1 - 1e-12)
    assert deferred.time == pytest.approx(simulate(profile, after, hw, capacity=math.inf, gpus=gpus,
                                                   record=False).time, rel=1e-12)


def test_interpolated_profile_equals_a_real_one_at_an_intermediate_batch():
    one = analytic_profile(build("wrn28-10", "tiny", 1, device="meta"), V100)
    big = analytic_profile(build("wrn28-10", "tiny", 8, device="meta"), V100)
    real = analytic_profile(build("wrn28-10", "tiny", 4, device="meta"), V100)
    mid = interpolate(one, big, 4)
    assert mid.activation_bytes() == real.activation_bytes()
    # the workspace is a peak of live tensors, not exactly linear in the batch
    assert in_core_peak_bytes(mid) == pytest.approx(in_core_peak_bytes(real), rel=0.02)
    assert mid.forward_time() == pytest.approx(real.forward_time(), rel=0.02)

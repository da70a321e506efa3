"""The compiled simulator (karma/sim/compiled.py) against the Python reference it was written from
(karma/sim/simulate.py, `reference=True`): the same iteration for random plans of every kind of chain
(block, layer, mixed; random and adversarial costs; precisions), every weight layout, prefetch depths
0-4, data parallel orders and shards, half and full duplex links, capacities that fit and that do not."""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.plan.plan import UPDATE_ORDERS, Block, Plan
from karma.profile.analytic import analytic_profile
from karma.sim.compiled import simulate_compiled
from karma.sim.network import nodes_for
from karma.sim.simulate import in_core_peak_bytes, simulate
from models import build
from tests.chains import LAYOUTS, V100, adversarial_chains, chains
from tests.fuzz import examples

REL = 1e-12
#: real chains with boundary storages or precisions of their own: (model, precision, granularity, split)
REAL = [("resnet50", "fp32", "layer", ()), ("resnet50", "fp16", "layer", ()), ("resnet50", "fp32", "block", ("stem",)),
        ("wrn28-10", "bf16", "layer", ()), ("megatron-1.2b", "fp16", "block", ()), ("vgg16", "fp32", "block", ())]


@functools.cache
def real_profile(model: str, precision: str, granularity: str, split: tuple[str, ...]):
    chain = build(model, "tiny", device="meta", precision=precision, granularity=granularity, split=frozenset(split))
    return analytic_profile(chain, V100)


def assert_same(profile, plan, hw, capacity, gpus=1, order="pipelined", host_updates=None, optimizer_shards=1):
    """Every number of the result, and the memory in use after every allocation and free, in order."""
    kw = dict(gpus=gpus, order=order, host_updates=host_updates, optimizer_shards=optimizer_shards)
    compiled = simulate(profile, plan, hw, capacity=capacity, record=False, **kw)
    reference = simulate(profile, plan, hw, capacity=capacity, record=True, reference=True, **kw)
    assert compiled.reason == reference.reason
    assert (compiled.time is None) == (reference.time is None)
    if reference.time is not None:
        assert compiled.time == pytest.approx(reference.time, rel=REL, abs=0)
    assert compiled.makespan == pytest.approx(reference.makespan, rel=REL, abs=0)
    assert compiled.peak_bytes == pytest.approx(reference.peak_bytes, rel=REL, abs=0)
    assert compiled.busy.keys() == reference.busy.keys()
    for queue, busy in reference.busy.items():
        assert compiled.busy[queue] == pytest.approx(busy, rel=REL, abs=0), queue
    assert compiled.bytes_h2d == pytest.approx(reference.bytes_h2d, rel=REL, abs=0)
    assert compiled.bytes_d2h == pytest.approx(reference.bytes_d2h, rel=REL, abs=0)
    host_side = plan.host_optimizer if host_updates is None else (host_updates or plan.host_optimizer)
    levels = simulate_compiled(profile, plan, hw, capacity, host_side, gpus, nodes_for(gpus, hw), order,
                               optimizer_shards, memory=True).memory
    assert len(levels) == len(reference.memory)
    scale = REL * max(reference.peak_bytes, 1.0)
    for (t, level), (t_ref, level_ref) in zip(levels, reference.memory, strict=True):
        assert t == pytest.approx(t_ref, rel=REL, abs=0) and level == pytest.approx(level_ref, rel=0, abs=scale)


@st.composite
def plans(draw, n: int, model: str = "random", batch: int = 1) -> Plan:
    """Any tiling of n units, any policy and checkpoint place per block, any layout and depth 0-4."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1)) if n > 1 else set())
    bounds = [0, *cuts, n]
    policy = st.sampled_from(["keep", "swap", "recompute"])
    blocks = tuple(Block(a, b, draw(policy), draw(st.sampled_from(["device", "host"])))
                   for a, b in zip(bounds[:-1], bounds[1:], strict=False))
    weights, optimizer = draw(st.sampled_from(LAYOUTS))
    return Plan(model=model, batch=batch, units=n, blocks=blocks, weights=weights, optimizer=optimizer,
                prefetch_depth=draw(st.integers(0, 4)), update_order=draw(st.sampled_from(UPDATE_ORDERS)))


@st.composite
def parallel(draw) -> dict:
    """Data parallel settings: ranks (one node or several), all-reduce order, host updates, ZeRO-1 shards."""
    return {"gpus": draw(st.sampled_from([1, 1, 2, 4, 8, 16])), "order": draw(st.sampled_from(["pipelined", "naive"])),
            "host_updates": draw(st.sampled_from([None, None, True, False])),
            "optimizer_shards": draw(st.sampled_from([1, 1, 2]))}


@given(st.one_of(chains(max_units=10), adversarial_chains()), st.data())
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_chains_simulate_the_same_compiled(case, data):
    profile, hw, capacity = case
    plan = data.draw(plans(len(profile.units)))
    assert_same(profile, plan, hw, data.draw(st.sampled_from([capacity, float("inf")])), **data.draw(parallel()))


@given(st.sampled_from(REAL), st.data())
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_real_chains_simulate_the_same_compiled(real, data):
    """Boundary storages (layer and mixed chains), tied weights (Megatron), 16-bit precisions; times redrawn
    per unit, zeros included (a recompute of no duration holds what it uses through its instant)."""
    profile = real_profile(*real)
    if data.draw(st.booleans()):
        time = st.one_of(st.just(0.0), st.floats(1e-6, 1e-2))
        units = tuple(replace(u, forward_time=data.draw(time), backward_time=data.draw(time),
                              recompute_extra_time=data.draw(st.sampled_from([0.0, -u.forward_time, 1e-3])))
                      for u in profile.units)
        profile = replace(profile, units=units)
    link = data.draw(st.sampled_from(["full", "half"]))
    hw = replace(V100, h2d_bw=data.draw(st.floats(1e9, 100e9)), link_duplex=link)
    plan = data.draw(plans(len(profile.units), profile.model, profile.batch))
    capacity = in_core_peak_bytes(profile) * data.draw(st.sampled_from([0.3, 0.6, 1.0, float("inf")]))
    assert_same(profile, plan, hw, capacity, **data.draw(parallel()))


def test_every_real_chain_is_followed_by_its_storages_or_not_at_all():
    """The cases above cover both attributions: storages followed one by one, and one tensor per boundary."""
    kinds = {real_profile(*real).storages for real in REAL}
    assert kinds == {True, False}

"""The Megatron cost model (karma/parallel/megatron_model.py) and the large-NLP comparison, on the meta device."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.experiments.large_nlp import KARMA, MEGATRON, ZERO, compare, summary
from karma.parallel.megatron_model import (
    Layout,
    best_layout,
    check_placement,
    dp_view,
    shard_profile,
    simulate_layout,
    tp_allreduce_time,
    with_tp_comm,
)
from karma.parallel.tensor_parallel import check_degree
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from karma.sim.simulate import simulate
from models import build
from tests.fuzz import examples

HW = load("v100-abci")
MODEL = "megatron-2.5b"  # h 1920, 20 heads, 54 layers


def test_one_way_tensor_parallel_is_plain_data_parallel():
    full = analytic_profile(build(MODEL, "paper", 2, device="meta"), HW)
    assert shard_profile(MODEL, "paper", 2, 1, HW, True).units == full.units
    plan = from_policies(MODEL, 2, ["keep"] * len(full.units), segments=list(range(len(full.units))))
    want = simulate(full, plan, HW, gpus=8, host_updates=False, record=False, capacity=math.inf)
    got = simulate_layout(MODEL, Layout(1, 8, 2), HW.__class__(**{**HW.to_dict(), "device_memory": math.inf}))
    assert got.time == pytest.approx(want.time) and got.tp_comm_s == 0


@pytest.mark.parametrize("tp", [2, 4, 5])
def test_a_shard_does_one_tp_th_of_a_layers_flops_and_holds_its_share_of_the_weights(tp):
    full = shard_profile(MODEL, "paper", 1, 1, HW, False).units[1]
    shard = shard_profile(MODEL, "paper", 1, tp, HW, False).units[1]
    assert shard.forward_flops * tp == pytest.approx(full.forward_flops, rel=1e-12)
    assert shard.backward_flops * tp == pytest.approx(full.backward_flops, rel=1e-12)
    h = 1920
    # 12h^2/tp weights, column-parallel biases (3h + 4h)/tp, replicated row biases (2h) and LayerNorms (4h)
    assert shard.param_bytes == 4 * (12 * h * h // tp + 7 * h // tp + 6 * h)


def test_every_layer_pays_two_all_reduces_forward_and_two_backward():
    profile = shard_profile(MODEL, "paper", 2, 4, HW, False)
    calls = []
    timed, total = with_tp_comm(profile, 4, lambda n: calls.append(n) or 1.0, False, 1920)
    layers = sum(u.name.startswith("layer") for u in profile.units)
    assert set(calls) == {2 * 1024 * 1920 * 4}  # (micro-batch, seq, hidden) fp32
    assert total == 4 * layers
    assert sum(u.forward_time for u in timed.units) == pytest.approx(sum(u.forward_time for u in profile.units)
                                                                     + 2 * layers)
    _, vocab_total = with_tp_comm(profile, 4, lambda n: 1.0, True, 1920)
    assert vocab_total == 4 * layers + 1 + 3 + 1  # embedding forward; head: 3 loss reductions + backward


@settings(max_examples=examples(15), deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 20]), micro=st.integers(1, 4), dp=st.sampled_from([1, 2, 8]))
def test_checkpointing_and_zero_never_need_more_memory(tp, micro, dp):
    results = {(r, z): simulate_layout(MODEL, Layout(tp, dp, micro, 1, r, z), HW)
               for r in (False, True) for z in (False, True)}
    assert results[True, False].peak_bytes <= results[False, False].peak_bytes
    assert results[False, True].peak_bytes <= results[False, False].peak_bytes
    if dp > 1:
        assert results[False, True].peak_bytes < results[False, False].peak_bytes
    for r in results.values():
        assert (r.time is None) == (r.peak_bytes > HW.device_memory)


def test_more_tensor_parallelism_holds_less_per_gpu():
    peaks = [simulate_layout(MODEL, Layout(tp, 1, 1, recompute=True), HW).peak_bytes for tp in (1, 2, 4)]
    assert peaks[0] > peaks[1] > peaks[2]


def test_gradient_accumulation_costs_its_passes_and_keeps_the_gradients():
    one = simulate_layout(MODEL, Layout(4, 2, 2, 1, True), HW)
    two = simulate_layout(MODEL, Layout(4, 2, 1, 2, True), HW)
    half = simulate_layout(MODEL, Layout(4, 2, 1, 1, True), HW)
    assert two.time > half.time and two.peak_bytes > half.peak_bytes
    assert one.layout.replica_batch == two.layout.replica_batch == 2


def test_network_views():
    assert tp_allreduce_time(1e9, 1, HW) == 0
    assert tp_allreduce_time(1e9, 8, HW) > tp_allreduce_time(1e9, 4, HW)  # 8 crosses InfiniBand
    view = dp_view(HW, 2)
    assert view.gpus_per_node == 2 and view.inter_node_bw == HW.inter_node_bw / 2
    assert dp_view(HW, 8).gpus_per_node == 1 and dp_view(HW, 8).inter_node_bw == HW.inter_node_bw / 4


def test_bad_layouts_are_one_line():
    with pytest.raises(KarmaError, match="does not divide the 20 heads.*valid degrees: 1, 2, 4, 5, 10, 20"):
        check_degree(8, 1920, 20)
    with pytest.raises(KarmaError, match="neither divides a v100-abci node of 4 GPUs nor spans whole nodes"):
        check_placement(5, HW)
    best, why = best_layout("turing-nlg-17b", HW, 4, 4, zero=True)
    assert best is None and why.startswith("no layout fits: the smallest needs") and "16.0 GB" in why


def test_large_nlp_rows_are_labelled_and_consistent():
    profile = analytic_profile(build("megatron-8.3b", "paper", device="meta"), HW)
    plan = from_policies("megatron-8.3b", profile.batch, ["recompute"] * len(profile.units), weights="streamed",
                         segments=list(range(len(profile.units))))
    table = compare(profile, plan, HW, [1, 8])
    assert set(table.strategy) == {KARMA, MEGATRON, ZERO} and len(table) == 6
    ok = table[table.status == "ok"]
    assert (ok.sequences_per_s == ok.global_batch / ok.time_s).all()
    assert table.source.str.startswith("simulated on v100-abci").all()
    one_node = table[(table.nodes == 1) & (table.strategy != KARMA)]
    assert one_node.time_s.isna().all() and one_node.status.str.startswith("no layout fits").all()
    s = summary(table)
    assert s.karma_min_nodes.iloc[0] == 1 and s.zero_min_nodes.iloc[0] == 8

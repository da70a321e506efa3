"""The performance model's concurrency analysis, as properties over random chains."""

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from karma.plan.plan import Block, Plan, from_policies
from karma.profile.profile import Profile
from karma.sim.simulate import optimizer_traffic_bytes, simulate
from tests.chains import V100, adversarial_chains, chains, make_unit, plan_space
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
INF_LINK = replace(V100, h2d_bw=1e30, d2h_bw=1e30, host_memory_bw=0.0)  # and no limit of the host memory behind it


def plan_of(profile: Profile, label: str, **kw) -> Plan:
    return from_policies(profile.model, profile.batch, [label] * len(profile.units), **kw)


def step_time(profile: Profile, hw) -> float:
    return optimizer_traffic_bytes(profile.param_bytes(), profile.optimizer) / hw.memory_bw


@SETTINGS
@given(chains())
def test_all_keep_is_the_sum_of_forward_and_backward(case):
    profile, hw, _ = case
    result = simulate(profile, plan_of(profile, "keep"), hw, capacity=math.inf)
    expected = profile.forward_time() + profile.backward_time() + step_time(profile, hw)
    assert result.time == pytest.approx(expected, rel=1e-12)
    assert result.peak_bytes == pytest.approx(profile.in_core_peak_bytes(), rel=1e-12)
    assert result.bytes_h2d == result.bytes_d2h == 0


@SETTINGS
@given(chains(), st.integers(1, 4))
def test_swap_all_over_an_infinitely_fast_link_costs_nothing(case, depth):
    profile, _, _ = case
    keep = simulate(profile, plan_of(profile, "keep"), INF_LINK, capacity=math.inf)
    swap = simulate(profile, plan_of(profile, "swap", prefetch_depth=depth), INF_LINK, capacity=math.inf)
    assert swap.time == pytest.approx(keep.time, rel=1e-9)


def uniform(n: int, f: float, b: float, saved: float) -> Profile:
    unit = make_unit(forward_time=f, backward_time=b, saved_bytes=int(saved), input_bytes=1, output_bytes=1)
    return Profile("uniform", "tiny", 1, "analytic", "v100-abci", "sgd", tuple([unit] * n))


@pytest.mark.parametrize("n, f, b, transfer", [
    (5, 1.0, 2.0, 3.0),  # link slower than forward and backward
    (4, 1.0, 2.0, 1.5),  # link slower than forward, faster than backward
    (6, 2.0, 4.0, 1.0),  # link faster than both: fully hidden but for the ends
])
def test_swap_all_matches_the_two_stage_pipeline_closed_form(n, f, b, transfer):
    """Swap every unit, all prefetches issued at once (depth >= n), full duplex.

    Forward: compute then copy out is a two-stage flow shop, the last copy
    ends at f + (n-1) max(f, t) + t. Backward: copies in, each then its
    backward: the last backward ends at (end of forward) + t + (n-1) max(t, b) + b.
    """
    bw = 1e9
    profile = uniform(n, f, b, transfer * bw)
    hw = replace(V100, h2d_bw=bw, d2h_bw=bw)
    plan = plan_of(profile, "swap", prefetch_depth=n)
    result = simulate(profile, plan, hw, capacity=math.inf)
    forward_copies_end = f + (n - 1) * max(f, transfer) + transfer
    # the first prefetch (last unit) waits for its own swap-out, the others queue behind it
    backward_end = forward_copies_end + transfer + (n - 1) * max(transfer, b) + b
    assert result.makespan == pytest.approx(backward_end, rel=1e-12)


@SETTINGS
@given(chains(min_units=2), st.data())
def test_recompute_adds_exactly_the_recomputed_forward_and_its_measured_premium(case, data):
    profile, hw, _ = case
    n = len(profile.units)
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    blocks = [Block(i, i + 1) for i in range(start)] + [Block(start, stop, "recompute")] + \
             [Block(i, i + 1) for i in range(stop, n)]
    plan = Plan(profile.model, profile.batch, n, tuple(blocks))
    keep = simulate(profile, plan_of(profile, "keep"), hw, capacity=math.inf)
    rec = simulate(profile, plan, hw, capacity=math.inf)
    extra = sum(profile.units[i].recompute_time(i == stop - 1) for i in range(start, stop))
    assert rec.time == pytest.approx(keep.time + extra, rel=1e-12)


def random_plan(data, profile: Profile) -> Plan:
    labels = data.draw(st.lists(st.sampled_from(["keep", "swap", "recompute"]), min_size=len(profile.units),
                                max_size=len(profile.units)))
    checkpoint = data.draw(st.sampled_from(["device", "host"]))
    return from_policies(profile.model, profile.batch, labels, checkpoint=checkpoint,
                         weights=data.draw(st.sampled_from(["resident", "streamed"])),
                         prefetch_depth=data.draw(st.integers(1, 3)))


@SETTINGS
@given(chains(), st.data(), st.floats(1.01, 10.0))
def test_time_never_decreases_when_the_link_or_compute_slows(case, data, factor):
    profile, hw, _ = case
    plan = random_plan(data, profile)
    base = simulate(profile, plan, hw, capacity=math.inf).time
    slow_link = replace(hw, h2d_bw=hw.h2d_bw / factor, d2h_bw=hw.d2h_bw / factor)
    assert simulate(profile, plan, slow_link, capacity=math.inf).time >= base * (1 - 1e-12)
    slow = replace(profile, units=tuple(replace(u, forward_time=u.forward_time * factor,
                                                backward_time=u.backward_time * factor,
                                                recompute_extra_time=u.recompute_extra_time * factor,
                                                recompute_inner_extra_time=u.recompute_inner_extra_time * factor)
                                        for u in profile.units))
    assert simulate(slow, plan, hw, capacity=math.inf).time >= base * (1 - 1e-12)


@SETTINGS
@given(adversarial_chains(), st.data())
def test_no_link_is_so_fast_that_it_needs_more_memory_than_the_plan_was_checked_for(case, data):
    """Weights resident and the optimizer on the device, frees may wait for the link (a swap-out's
    device copy, an offloaded checkpoint) and a copy to the device takes its memory when it is issued,
    at a point of the compute order, or, for a prefetch issued before its own swap-out ended, when that
    copy out ends and frees the block's device copy. With (nearly) instant copies every free comes as
    early in that order as it can, so no faster link (the runtime's runs ahead when the compute is
    slower than profiled) needs more than the plan's own peak, within 1% (the prefetch tied to its
    swap-out's end: 0.44% at most over 600 drawn cases, 2026-12-01; none over 1500 drawn cases of
    this layout, 2026-12-02). Before copies were allocated at issue this failed: KARMA's WRN-28-10
    runtime plan was checked at 131.5 MB and peaked at 137.3 MB with instant copies (140.1-141.0 MB in
    the threaded runtime of two CI runs, over the 139.4 MB emulated device). With streamed weights or
    the host optimizer it does not hold (the next test); a slower link may need more or less (a
    prefetch it delays lets a download end first), so only this bound is claimed."""
    profile, hw, _ = case
    # ops of no duration are left out: their frees follow every allocation at their instant
    # (karma/sim/schedule.py's tie rule, conservative), which reorders with the link where no real op does
    profile = replace(profile, units=tuple(replace(u, forward_time=max(u.forward_time, 1e-6),
                                                   backward_time=max(u.backward_time, 1e-6)) for u in profile.units))
    plans = [p for p in plan_space(len(profile.units)) if (p.weights, p.optimizer) == ("resident", "device")]
    plan = plans[data.draw(st.integers(0, len(plans) - 1))]
    # a million times faster, not infinitely: a copy of no duration would be such an op
    fast = replace(hw, h2d_bw=hw.h2d_bw * 1e6, d2h_bw=hw.d2h_bw * 1e6)
    instant = simulate(profile, plan, fast, capacity=math.inf, record=False).peak_bytes
    assert instant <= simulate(profile, plan, hw, capacity=math.inf, record=False).peak_bytes * 1.01


def test_a_compute_op_that_waited_for_an_upload_can_need_more_memory_on_a_faster_link():
    """CI's counter-example of 2026-12-01 to the bound above over every layout: with streamed weights,
    block 1's forward waits for its upload (a weight tied with block 0), which ends 4 ps after block
    0's swap-out does, so at this link the swap-out's device copy is gone when block 1 allocates its
    5 MB workspace (6 MB peak); on a link a million times faster block 1 runs as soon as block 0 is
    done, with that copy in flight (7 MB). The host optimizer's gradient downloads do the same in the
    backward, behind a prefetch. So where weights or gradients cross the link the plan's peak holds
    at its own link only; the runtime cases of the pipeline are the same at both links or less
    (checked 2026-12-02 on the three runtime models' plans of every strategy: issue 12's note)."""
    units = (make_unit("u0", forward_time=1e-6, backward_time=1e-6, saved_bytes=1e6, input_bytes=1e6,
                       output_bytes=1e6, param_bytes=1e6, optimizer_bytes=1e6, shared_param_bytes=1e6),
             make_unit("u1", forward_time=1e-6, backward_time=1e-6, input_bytes=1e6, output_bytes=1e6,
                       workspace_bytes=5e6, tied_param_bytes=1e6),
             make_unit("u2", forward_time=1e-6, backward_time=1e-6, input_bytes=1e6, output_bytes=1e6))
    profile = Profile(model="random", size="tiny", batch=1, source="analytic", device=V100.name, optimizer="sgd",
                      units=units)
    hw = replace(V100, memory_bw=5e10, h2d_bw=5e8, d2h_bw=500250126.0, host_update_bw=1e9)
    plan = from_policies("random", 1, ["swap", "keep", "swap"], weights="streamed", prefetch_depth=3,
                         optimizer="host")
    fast = replace(hw, h2d_bw=hw.h2d_bw * 1e6, d2h_bw=hw.d2h_bw * 1e6)
    assert simulate(profile, plan, hw, capacity=math.inf, record=False).peak_bytes == 6e6
    assert simulate(profile, plan, fast, capacity=math.inf, record=False).peak_bytes == 7e6


@SETTINGS
@given(chains(), st.data())
def test_over_capacity_is_rejected_with_the_reason_never_a_time(case, data):
    profile, hw, _ = case
    plan = random_plan(data, profile)
    free = simulate(profile, plan, hw, capacity=math.inf)
    assume(free.peak_bytes > 0)  # a chain that holds nothing cannot be over any capacity
    tight = simulate(profile, plan, hw, capacity=free.peak_bytes * 0.99)
    assert tight.time is None and not tight.feasible
    assert "over the" in tight.reason and "block" in tight.reason
    fits = simulate(profile, plan, hw, capacity=free.peak_bytes)
    assert fits.feasible and fits.time == pytest.approx(free.time)


@SETTINGS
@given(chains(), st.data())
def test_timeline_respects_queues_and_bytes(case, data):
    profile, hw, _ = case
    plan = random_plan(data, profile)
    result = simulate(profile, plan, hw, capacity=math.inf)
    by_queue = {}
    for e in result.timeline:
        assert e.end >= e.start >= 0
        by_queue.setdefault(e.resource, []).append(e)
    for events in by_queue.values():  # an in-order queue never runs two ops at once
        for a, b in zip(events, events[1:], strict=False):
            assert b.start >= a.end - 1e-12
    for resource, busy in result.busy.items():
        assert busy == pytest.approx(sum(e.end - e.start for e in by_queue[resource]))
    assert result.makespan == pytest.approx(max(e.end for e in result.timeline))


def test_half_duplex_link_serialises_both_directions():
    profile = uniform(4, 1.0, 2.0, 3e9)
    full = simulate(profile, plan_of(profile, "swap", prefetch_depth=4), replace(V100, h2d_bw=1e9, d2h_bw=1e9),
                    capacity=math.inf)
    half = simulate(profile, plan_of(profile, "swap", prefetch_depth=4),
                    replace(V100, h2d_bw=1e9, d2h_bw=1e9, link_duplex="half"), capacity=math.inf)
    assert "link" in half.busy and half.time >= full.time


def test_streamed_weights_move_weights_twice_up_and_gradients_down():
    profile = uniform(3, 1.0, 2.0, 1e9)
    profile = replace(profile, units=tuple(replace(u, param_bytes=1e9, optimizer_bytes=1e9) for u in profile.units))
    result = simulate(profile, plan_of(profile, "keep", weights="streamed"), V100, capacity=math.inf)
    assert result.bytes_h2d == 6e9 and result.bytes_d2h == 3e9
    assert result.busy["host"] == pytest.approx(3 * optimizer_traffic_bytes(1e9, "sgd") / V100.host_update_bw)


def test_a_recompute_of_no_duration_hands_the_output_gradient_over_after_it_is_made():
    """The gradient of a recomputed block's output is held through its recompute and handed to the
    block's first backward. A recompute and a kept unit's backward of no duration put all of it at
    one time; the hand-over was ordered before the kept backward's allocation, so the gradient went
    uncounted while the kept unit's backward held it (200 MB short here; a plan over the capacity
    passed, and the lower bound, right about it, failed its exhaustive test: hypothesis, 2026-12-04).
    A nanosecond of compute must not change the peak."""
    def chain(t):
        units = (make_unit("a", forward_time=t, backward_time=1.0, saved_bytes=int(100e6), input_bytes=int(50e6),
                           output_bytes=int(200e6)),
                 make_unit("b", forward_time=1.0, backward_time=t, saved_bytes=int(200e6),
                           saved_input_bytes=int(200e6), input_bytes=int(200e6), output_bytes=int(10e6),
                           backward_workspace_bytes=int(1000e6)))
        return Profile("mini", "tiny", 1, "analytic", "v100-abci", "sgd", units)

    plan = Plan(model="mini", batch=1, units=2, blocks=(Block(0, 1, "recompute", "device"),
                                                         Block(1, 2, "keep", "device")),
                weights="resident", prefetch_depth=1, optimizer="device")
    peaks = [simulate(chain(t), plan, V100).peak_bytes for t in (0.0, 1e-9, 1e-3)]
    assert peaks[0] == peaks[1] == peaks[2] == 1450e6


def test_a_prefetch_issued_with_a_backward_of_no_duration_is_held_beside_it():
    """Depth 1: block 0's copy back is issued when block 1's backward starts, its destination allocated
    then, beside what that backward holds (3 MB here), even when the backward takes no time."""
    units = tuple(make_unit(f"u{i}", saved_bytes=int(1e6), saved_output_bytes=int(1e6), input_bytes=int(1e6),
                            output_bytes=int(1e6)) for i in range(2))
    profile = Profile("mini", "tiny", 1, "analytic", "v100-abci", "sgd", units)
    plan = Plan(model="mini", batch=1, units=2, blocks=(Block(0, 1, "swap", "device"), Block(1, 2, "keep", "device")),
                weights="resident", prefetch_depth=1, optimizer="device")
    hw = replace(V100, h2d_bw=0.5e9, d2h_bw=0.5e9)
    assert simulate(profile, plan, hw, capacity=float("inf")).peak_bytes == 3e6


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(adversarial_chains(min_units=1, max_units=4), st.data())
def test_an_op_of_no_duration_counts_no_less_memory_than_one_of_a_nanosecond(case, data):
    """Ops of no duration share one time, where the ledger keeps program order: whatever is allocated
    at an op's start (a prefetch issued with a backward, a gradient held through a recompute) must come
    before that op's own frees, as it does when the op takes a nanosecond. Under-counting here let plans
    over the capacity pass (the bound's exhaustive test found one, 2026-12-04); counting more is only
    conservative, so the check is one-sided."""
    profile, hw, _ = case
    plans = plan_space(len(profile.units))
    plan = plans[data.draw(st.integers(0, len(plans) - 1))]
    nano = replace(profile, units=tuple(replace(u, forward_time=u.forward_time + 1e-9,
                                                backward_time=u.backward_time + 1e-9) for u in profile.units))
    zero = simulate(profile, plan, hw, capacity=float("inf"), record=False).peak_bytes
    assert zero >= simulate(nano, plan, hw, capacity=float("inf"), record=False).peak_bytes - 1.0


def test_weights_uploaded_as_a_forward_of_no_duration_starts_are_held_beside_its_workspace():
    """Streamed weights at depth 1: block 1's weights go up as block 0's forward starts, so they are allocated
    beside that forward's 3 MB workspace (4 MB), also when the forward takes no time (the property test above
    found the simulator freeing the workspace first: 3 MB)."""
    units = (make_unit("u0", input_bytes=int(1e6), output_bytes=int(1e6), workspace_bytes=int(3e6)),
             make_unit("u1", input_bytes=int(1e6), output_bytes=int(1e6), param_bytes=int(1e6),
                       optimizer_bytes=int(1e6)))
    profile = Profile("mini", "tiny", 1, "analytic", "v100-abci", "sgd",
                      tuple(replace(u, forward_time=0.0, backward_time=0.0) for u in units))
    plan = Plan(model="mini", batch=1, units=2, blocks=(Block(0, 1, "swap", "device"), Block(1, 2, "keep", "device")),
                weights="streamed", prefetch_depth=1, optimizer="host")
    hw = replace(V100, h2d_bw=0.5e9, d2h_bw=0.5e9)
    for reference in (True, False):
        assert simulate(profile, plan, hw, capacity=float("inf"), record=False, reference=reference).peak_bytes == 4e6


def test_a_prefetch_is_not_queued_behind_the_upload_of_weights_updated_after_it_was_issued():
    """Host updates with resident weights: a block's updated weights go back up when its update ends, so a
    prefetch the compute issued before that goes first (the runtime's link queues copies as they are
    submitted): the backward that waits for it does not wait out the late upload too."""
    mb = 1e6
    units = (make_unit("a", forward_time=0.01, backward_time=0.02, saved_bytes=10 * mb, output_bytes=10 * mb,
                       input_bytes=10 * mb, param_bytes=1 * mb, optimizer_bytes=1 * mb),
             make_unit("b", forward_time=0.01, backward_time=0.02, saved_bytes=10 * mb, output_bytes=10 * mb,
                       input_bytes=10 * mb, param_bytes=1 * mb, optimizer_bytes=1 * mb),
             make_unit("c", forward_time=0.01, backward_time=0.02, saved_bytes=10 * mb, output_bytes=1 * mb,
                       input_bytes=10 * mb, param_bytes=500 * mb, optimizer_bytes=500 * mb))
    profile = Profile(model="m", size="s", batch=1, source="analytic", device="x", optimizer="sgd", units=units)
    plan = Plan(model="m", batch=1, units=3, prefetch_depth=1, optimizer="host",
                blocks=(Block(0, 1, "recompute", "host"), Block(1, 2, "keep"), Block(2, 3, "keep")))
    hw = replace(V100, h2d_bw=1e9, d2h_bw=1e9)
    events = simulate(profile, plan, hw, capacity=math.inf).timeline
    prefetch = next(e for e in events if e.op == "prefetch checkpoint")
    upload = next(e for e in events if e.op == "upload weights" and e.block == 2)
    assert prefetch.end <= upload.start
    recompute = next(e for e in events if e.op == "recompute")
    assert recompute.start < upload.end  # the backward went on while block c's weights were still going up

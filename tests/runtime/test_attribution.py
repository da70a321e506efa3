"""The term-by-term attribution of a measured step against its prediction (karma/runtime/attribution.py):
the terms add up to the step on either timeline, a difference lands in the term that made it, and the
runtime's own timeline splits the same way."""

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.plan.plan import from_policies
from karma.runtime.attribution import TERMS, attribute, block_differences, report, step_terms
from karma.runtime.emulation import run_steps
from karma.sim.simulate import simulate
from models.registry import build
from tests.chains import chains
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def plans(data, n: int):
    labels = data.draw(st.lists(st.sampled_from(["keep", "swap", "recompute"]), min_size=n, max_size=n))
    return from_policies("random", 1, labels, checkpoint=data.draw(st.sampled_from(["device", "host"])),
                         weights=data.draw(st.sampled_from(["resident", "streamed"])),
                         optimizer=data.draw(st.sampled_from(["device", "host"])),
                         prefetch_depth=data.draw(st.integers(0, 3)))


@SETTINGS
@given(chains(), st.data())
def test_the_terms_add_up_to_the_simulated_step(case, data):
    profile, hw, _ = case
    plan = plans(data, len(profile.units))
    if plan.weights == "streamed" and plan.optimizer == "device":
        plan = replace(plan, optimizer="host")
    result = simulate(profile, plan, hw, capacity=math.inf)
    terms = step_terms(result.timeline, result.time)
    assert set(terms) == set(TERMS) and min(terms.values()) >= -1e-12
    assert sum(terms.values()) == pytest.approx(result.time, rel=1e-9)
    same = attribute(result.timeline, result.time, result.timeline, result.time)
    assert (same.difference_s.abs() < 1e-12).all()


@SETTINGS
@given(chains(), st.data(), st.floats(1e-4, 1.0))
def test_a_slower_forward_is_blamed_on_the_forward(case, data, delay):
    """Stretch one block's forward and shift everything after it: the whole difference is the forward's."""
    profile, hw, _ = case
    plan = plans(data, len(profile.units))
    if plan.weights == "streamed" and plan.optimizer == "device":
        plan = replace(plan, optimizer="host")
    result = simulate(profile, plan, hw, capacity=math.inf)
    forwards = [e for e in result.timeline if e.resource == "compute" and e.op == "forward"]
    slow = forwards[data.draw(st.integers(0, len(forwards) - 1))]
    measured = [replace(e, end=e.end + delay) if e is slow else
                replace(e, start=e.start + delay, end=e.end + delay) if e.start >= slow.end else e
                for e in result.timeline]
    table = attribute(measured, result.time + delay, result.timeline, result.time).set_index("term")
    assert table.loc["forward", "difference_s"] == pytest.approx(delay, rel=1e-9, abs=1e-12)
    assert table.loc["forward", "share"] == pytest.approx(1.0, rel=1e-6)
    others = table[(table.kind == "term") & (table.index != "forward")]
    assert (others.difference_s.abs() < 1e-9).all()
    worst = block_differences(measured, result.timeline, most=1).iloc[0]
    assert (worst.term, worst.block) == ("forward", slow.block)


def test_a_measured_step_splits_into_the_same_terms():
    """The runtime's timeline of a real step on the emulated device: compute records every block's forward
    and backward, copies carry the simulator's names, and the terms add up to the measured step."""
    chain = build("resnet50", "tiny", seed=1)
    plan = from_policies(chain.name, chain.batch, ["swap", "recompute", "keep"] + ["keep"] * (len(chain) - 3),
                         checkpoint="host")
    _, reports = run_steps(chain, plan, math.inf, 1e9, 1)
    step = reports[-1]
    terms = step_terms(step.timeline, step.time)
    assert sum(terms.values()) == pytest.approx(step.time, rel=1e-9)
    assert terms["forward"] > 0 and terms["backward and recompute"] > 0
    blocks = {(e.op, e.block) for e in step.timeline if e.resource == "compute"}
    assert {(op, k) for op in ("forward", "backward") for k in range(len(plan.blocks))} <= blocks
    # copies are named as the simulator names them: a swap's, a host checkpoint's
    assert {("d2h", "swap out", 0), ("d2h", "offload checkpoint", 1), ("h2d", "prefetch checkpoint", 1)} <= \
        {(e.resource, e.op, e.block) for e in step.timeline}
    text = report(attribute(step.timeline, step.time, step.timeline, step.time),
                  block_differences(step.timeline, step.timeline))
    assert "waits between compute operations" in text and "busy d2h: swap out" in text


def test_waiting_for_a_copy_back_is_a_wait_not_backward_compute():
    """On a slow link the backward of a swapped block waits for its prefetch: the runtime records that as a
    gap on the compute queue, as the simulator does, not as backward compute."""
    chain = build("resnet50", "tiny", seed=1)
    plan = from_policies(chain.name, chain.batch, ["swap"] * len(chain), prefetch_depth=1)
    fast = run_steps(chain, plan, math.inf, 1e12, 1)[1][-1]
    link = max(fast.bytes_h2d, 1) / 0.3  # the copies back take about 0.3 s in all
    slow = run_steps(chain, plan, math.inf, link, 1)[1][-1]
    terms = step_terms(slow.timeline, slow.time)
    assert terms["waits between compute operations"] > 0.1
    assert terms["backward and recompute"] < step_terms(fast.timeline, fast.time)["backward and recompute"] + 0.1

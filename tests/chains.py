"""Random chains for property tests: profiles with arbitrary costs, and brute force."""

from __future__ import annotations

import functools
import itertools
from dataclasses import replace

from hypothesis import strategies as st

from karma.core.hardware import load
from karma.plan.plan import Block, Plan, from_policies
from karma.profile.profile import Profile, UnitProfile
from karma.sim.simulate import in_core_peak_bytes, simulate

V100 = load("v100-abci")
MB = 1e6


def make_unit(name: str = "u", **kw) -> UnitProfile:
    """A unit with every field zero but those given."""
    fields = dict(forward_time=0.0, backward_time=0.0, forward_flops=0.0, backward_flops=0.0, forward_bytes=0.0,
                  backward_bytes=0.0, saved_bytes=0, saved_input_bytes=0, saved_output_bytes=0, input_bytes=0,
                  output_bytes=0, param_bytes=0, buffer_bytes=0, optimizer_bytes=0, workspace_bytes=0,
                  backward_workspace_bytes=0)
    fields.update(kw)
    return UnitProfile(name=name, **fields)


@st.composite
def units(draw, n: int) -> tuple[UnitProfile, ...]:
    out = []
    prev_out = draw(st.integers(1, 200)) * MB
    for i in range(n):
        fwd = draw(st.floats(1e-3, 50e-3))
        saved = draw(st.integers(0, 2000)) * MB
        output = draw(st.integers(1, 400)) * MB
        params = draw(st.integers(0, 300)) * MB
        out.append(UnitProfile(
            name=f"u{i}", forward_time=fwd, backward_time=fwd * draw(st.floats(1.0, 3.0)),
            forward_flops=0.0, backward_flops=0.0, forward_bytes=0.0, backward_bytes=0.0,
            saved_bytes=saved, saved_input_bytes=0, saved_output_bytes=0, input_bytes=prev_out,
            output_bytes=output, param_bytes=params, buffer_bytes=0, optimizer_bytes=params,
            workspace_bytes=draw(st.integers(0, 300)) * MB,
            backward_workspace_bytes=draw(st.integers(0, 300)) * MB,
            # measured premiums; the last of a segment may skip a tail
            recompute_extra_time=fwd * draw(st.sampled_from([0.0, 0.0, 0.3, 1.0, -0.5])),
            recompute_inner_extra_time=fwd * draw(st.sampled_from([0.0, 0.0, 0.3, 1.0, -0.2])),
        ))
        prev_out = output
    return tuple(out)


@st.composite
def chains(draw, min_units: int = 1, max_units: int = 8):
    """(profile, hardware, capacity): capacity between what checkpointing every unit
    needs (resident weights) and a little over the in-core peak, so most cases are tight."""
    n = draw(st.integers(min_units, max_units))
    profile = Profile("random", "tiny", 1, "analytic", "v100-abci", draw(st.sampled_from(["sgd", "adam"])),
                      draw(units(n)))
    hw = replace(V100, h2d_bw=draw(st.floats(1e9, 100e9)), link_duplex=draw(st.sampled_from(["full", "half"])))
    hw = replace(hw, d2h_bw=hw.h2d_bw * draw(st.floats(0.5, 2.0)))

    lean = simulate(profile, from_policies("random", 1, ["recompute"] * n, segments=list(range(n))), hw,
                    record=False).peak_bytes
    full = in_core_peak_bytes(profile)
    capacity = lean + (full - lean) * draw(st.floats(0.0, 1.05))
    return profile, hw, capacity


@st.composite
def adversarial_units(draw, n: int) -> tuple[UnitProfile, ...]:
    """Units drawn to break claims: outputs saved by both neighbours (shared boundaries), a weight
    tied between the first unit and a later one, large or negative backward workspaces, zero and
    tiny times, parameter bytes as large as activations, and backwards making their input gradient last."""
    size = st.one_of(st.just(0), st.integers(1, 50), st.integers(50, 3000))
    tie = n > 1 and draw(st.booleans())
    tied_at = draw(st.integers(1, n - 1)) if tie else -1
    out = []
    prev_out = draw(st.integers(1, 500)) * MB
    for i in range(n):
        fwd = draw(st.one_of(st.just(0.0), st.floats(1e-4, 1e-3), st.floats(1e-3, 2.0)))
        output = draw(st.integers(1, 800)) * MB
        saved_in = draw(st.sampled_from([0, prev_out, prev_out // 2]))
        saved_out = draw(st.sampled_from([0, output]))
        saved = saved_in + saved_out + draw(size) * MB
        params = draw(size) * MB
        out.append(UnitProfile(
            name=f"u{i}", forward_time=fwd, backward_time=draw(st.one_of(st.just(0.0), st.floats(0.0, 4.0))),
            forward_flops=0.0, backward_flops=0.0, forward_bytes=0.0, backward_bytes=0.0,
            saved_bytes=saved, saved_input_bytes=saved_in, saved_output_bytes=saved_out, input_bytes=prev_out,
            output_bytes=output, param_bytes=params, buffer_bytes=draw(st.sampled_from([0, 1, 20])) * MB,
            optimizer_bytes=params * draw(st.sampled_from([1, 2])),
            workspace_bytes=draw(size) * MB,
            backward_workspace_bytes=draw(st.one_of(size, st.integers(-200, 0), st.integers(3000, 12000))) * MB,
            # premiums even on a free forward; a recompute as cheap as nothing
            recompute_extra_time=draw(st.one_of(st.just(0.0), st.just(-fwd), st.floats(0.0, 2.0))),
            recompute_inner_extra_time=draw(st.one_of(st.just(0.0), st.just(-fwd), st.floats(0.0, 2.0))),
            # a backward in two ops, weights then input (models/lean_layers.py)
            input_grad_last=i > 0 and draw(st.booleans()),
        ))
        prev_out = output
    if tie:
        shared = draw(st.integers(1, max(1, out[0].param_bytes // MB))) * MB if out[0].param_bytes else 0
        out[0] = replace(out[0], shared_param_bytes=shared)
        out[tied_at] = replace(out[tied_at], tied_param_bytes=shared)
    return tuple(out)


@st.composite
def adversarial_chains(draw, min_units: int = 1, max_units: int = 5):
    """(profile, hardware, capacity) with the capacity at some plan's own peak (that plan just
    fits) or anywhere between the leanest plan and a little over in-core: where claims break."""
    n = draw(st.integers(min_units, max_units))
    profile = Profile("random", "tiny", 1, "analytic", "v100-abci", draw(st.sampled_from(["sgd", "adam"])),
                      draw(adversarial_units(n)))
    bw = st.one_of(st.floats(0.5e9, 5e9), st.floats(5e9, 200e9))
    hw = replace(V100, h2d_bw=draw(bw), d2h_bw=draw(bw), link_duplex=draw(st.sampled_from(["full", "half"])),
                 host_update_bw=draw(st.floats(1e9, 100e9)), memory_bw=draw(st.floats(50e9, 3000e9)))
    plans = plan_space(n)
    chosen = plans[draw(st.integers(0, len(plans) - 1))]
    peak = simulate(profile, chosen, hw, capacity=float("inf"), record=False).peak_bytes
    if draw(st.booleans()):
        capacity = peak * draw(st.sampled_from([1.0, 1.0, 1.01, 1.1]))
    else:
        capacity = draw(st.floats(0.1, 1.05)) * in_core_peak_bytes(profile)
    return profile, hw, capacity


def tilings(n: int):
    """Every way to cut units 0..n-1 into blocks of consecutive units, as (start, stop) lists."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [n]
        yield list(zip(bounds[:-1], bounds[1:], strict=False))


#: What one block can do: (policy, checkpoint place).
BLOCK_CHOICES = (("keep", "device"), ("swap", "device"), ("recompute", "device"), ("recompute", "host"))
#: Weight layouts: resident with the optimizer on the device or on the host (ZeRO-Offload), streamed.
LAYOUTS = (("resident", "device"), ("resident", "host"), ("streamed", "host"))


def all_plans(n: int, model: str = "random", batch: int = 1):
    """Every plan `karma.plan.plan.Plan` can express for n units: any tiling, any policy and checkpoint
    place per block, every prefetch depth 0..blocks (0: on demand; deeper is the same), every weight layout."""
    for tiling in tilings(n):
        for choices in itertools.product(BLOCK_CHOICES, repeat=len(tiling)):
            blocks = tuple(Block(a, b, pol, place) for (a, b), (pol, place) in zip(tiling, choices, strict=True))
            for depth in range(0, len(blocks) + 1):
                for weights, optimizer in LAYOUTS:
                    yield Plan(model=model, batch=batch, units=n, blocks=blocks, weights=weights,
                               prefetch_depth=depth, optimizer=optimizer)


@functools.cache
def plan_space(n: int, model: str = "random", batch: int = 1) -> tuple[Plan, ...]:
    """`all_plans` as a tuple, built once per (n, model, batch): a property test draws one plan of the space per
    example, and listing it again each time (thousands of Plans at four units) was most of those tests' time."""
    return tuple(all_plans(n, model, batch))


def exhaustive_best(profile, hw, capacity):
    """(time, plan) of the fastest feasible plan in the whole plan space, or (None, None)."""
    best, best_plan = None, None
    for plan in plan_space(len(profile.units), profile.model, profile.batch):
        result = simulate(profile, plan, hw, capacity, record=False)
        if result.feasible and (best is None or result.time < best):
            best, best_plan = result.time, plan
    return best, best_plan

"""The layer chain's lean layers (models/lean_layers.py): the same gradients as PyTorch's own, and the
memory they free early, predicted by the simulator and measured by the runtime."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from karma.core.hardware import load
from karma.plan.plan import from_policies
from karma.planner.config import PlannerConfig
from karma.planner.planner import plan as karma_plan
from karma.profile.analytic import analytic_profile
from karma.sim.simulate import simulate
from models.lean_layers import conv_input_grad_last, relu_saving_mask
from models.registry import build
from tests.fuzz import examples
from tests.models.test_layer_units import serial_peak

SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck), database=None)


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([1, 3, 5]), st.integers(1, 2), st.integers(0, 2),
       st.integers(1, 2), st.booleans(), st.integers(0, 2**16))
def test_a_convolution_making_its_input_gradient_last_gives_pytorchs_gradients(groups, per_group, kernel, stride,
                                                                               padding, dilation, bias, seed):
    torch.manual_seed(seed)
    conv = nn.Conv2d(2 * groups, per_group * groups, kernel, stride, padding, dilation, groups, bias)
    x = torch.randn(2, 2 * groups, 11, 11, requires_grad=True)
    y = conv(x)
    grad = torch.randn_like(y)
    y.backward(grad)
    want = [x.grad, conv.weight.grad] + ([conv.bias.grad] if bias else [])
    x2 = x.detach().clone().requires_grad_(True)
    conv.zero_grad(set_to_none=True)
    y2 = conv_input_grad_last(conv, x2)
    assert torch.equal(y, y2)
    y2.backward(grad)
    got = [x2.grad, conv.weight.grad] + ([conv.bias.grad] if bias else [])
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


def test_the_relu_saves_a_one_byte_mask_and_gives_pytorchs_gradient():
    torch.manual_seed(0)
    x = torch.randn(4, 8, 5, 5, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = relu_saving_mask(x)
    assert [(t.dtype, t.shape) for t in saved] == [(torch.bool, x.shape)]
    grad = torch.randn_like(y)
    y.backward(grad)
    x2 = x.detach().clone().requires_grad_(True)
    torch.relu(x2).backward(grad)
    assert torch.equal(y, torch.relu(x)) and torch.equal(x.grad, x2.grad)


def test_a_swapped_convolutions_input_goes_before_its_input_gradient_as_the_simulator_says():
    """Every layer swapped, copies back one block ahead: the simulator's peak with the convolutions'
    backward in two ops is below the one with one op, and the runtime measures the lower one."""
    fast = dataclasses.replace(load("v100-abci"), h2d_bw=1e15, d2h_bw=1e15)
    profile = analytic_profile(build("resnet50", "small", 64, device="meta", granularity="layer"), fast)
    n = len(profile.units)
    assert sum(u.input_grad_last for u in profile.units) == sum("conv" in u.name or "downsample0" in u.name
                                                                for u in profile.units[1:])
    fused = dataclasses.replace(profile, units=tuple(dataclasses.replace(u, input_grad_last=False)
                                                     for u in profile.units))
    plan = from_policies("resnet50", 64, ["swap"] * n, weights="streamed", prefetch_depth=1, optimizer="host")
    predicted = simulate(profile, plan, fast, capacity=math.inf).peak_bytes
    assert predicted < 0.97 * simulate(fused, plan, fast, capacity=math.inf).peak_bytes
    measured = serial_peak("resnet50", 64, plan)
    assert measured == pytest.approx(predicted, rel=0.01)


def test_resnet50_at_batch_1440_plans_into_a_16_gb_v100_at_layer_granularity():
    """Issue 16's case (Hayakawa & Narihira 2020 trained it on a 16 GB V100): the most frugal plan, and
    KARMA's planner at a tenth of its budget, fit the v100-abci preset's 16.0 GB usable."""
    hw = load("v100-abci")
    profile = analytic_profile(build("resnet50", "paper", 1440, device="meta", granularity="layer"), hw)
    n = len(profile.units)
    frugal = from_policies("resnet50", 1440, ["swap"] * n, weights="streamed", prefetch_depth=0, optimizer="host")
    assert simulate(profile, frugal, hw).peak_bytes <= hw.device_memory
    found = karma_plan(profile, hw, hw.device_memory, config=PlannerConfig().longer(0.1))
    assert simulate(profile, found, hw).feasible

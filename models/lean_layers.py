"""Layers of a layer chain whose backward frees memory early: a convolution that makes its input
gradient last, and a ReLU that saves a 1-byte mask.

PyTorch's convolution backward makes both gradients in one call, so its saved input, the
output's gradient and the new input gradient are alive together. Inside a residual block the
skip's gradient is alive too, buffered until the main path's gradient reaches the block input:
at ResNet-50 batch 1440, `layer2_0_conv1`'s backward holds its saved input, the skip's
gradient and the new input gradient (4.6 GB each) and its output's gradient (2.3 GB), 16.19 GB,
more than a 16 GB V100 (docs/profiles.md, *Granularity*). The input gradient needs only the weights and the output's
gradient (the transposed convolution, Dumoulin & Visin 2016, Sec. 4), so computing the weight
gradient first lets a saved input that nothing else holds (a swapped block's prefetched copy,
a recomputed tensor) be freed before the input gradient is allocated. Same kernels
(`aten.convolution_backward`, one output mask each), so the same numbers as the fused call
(tests/models/test_lean_layers.py).

A convolution's input is usually a ReLU's output, which PyTorch's ReLU saves for its own
backward: the ReLU, whose backward runs later, would still hold it. Its backward needs only
where the output is positive, so the ReLU here saves that, a bool (1 byte an element, a
quarter of fp32), and the convolution is the input's last reader. The price: the mask is
saved beside the output the convolution saves, so keeping everything costs more (ResNet-50
b1440 at layer granularity, in-core peak 138.8 GB instead of 125.1); with both, the most
frugal plan of that case needs 15.03 GB instead of 16.19. Both run only in layer chains
(models/layer_units.py); block units keep PyTorch's own layers.

Only fp32 and plain 16-bit weights for the convolution: under autocast its saved input would
be the uncast one, so it falls back to the module itself there.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from karma.core.precision import MetaAutocast


def splittable(conv: nn.Module) -> bool:
    """Whether `conv` is a 2-d convolution this module can run (zero padding given as numbers)."""
    return isinstance(conv, nn.Conv2d) and conv.padding_mode == "zeros" and not isinstance(conv.padding, str)


def _autocast_on(x: torch.Tensor) -> bool:
    if x.device.type != "meta" and torch.is_autocast_enabled(x.device.type):
        return True
    return any(isinstance(m, MetaAutocast) for m in torch.overrides._get_current_function_mode_stack())


def conv_input_grad_last(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`conv(x)`, with the backward of the module docstring where it applies (else `conv(x)` itself)."""
    if not splittable(conv) or _autocast_on(x) or not torch.is_grad_enabled():
        return conv(x)
    return _InputGradLast.apply(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)


class _InputGradLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation, groups):
        ctx.save_for_backward(x, weight)
        ctx.conv = (tuple(stride), tuple(padding), tuple(dilation), groups, bias is not None)
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx, grad):
        stride, padding, dilation, groups, has_bias = ctx.conv
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        x, weight = ctx.saved_tensors
        bias_sizes = [weight.shape[0]] if has_bias else None
        gw = gb = gx = None
        if need_w or (need_b and has_bias):
            _, gw, gb = torch.ops.aten.convolution_backward(
                grad, x, weight, bias_sizes, stride, padding, dilation, False, [0, 0], groups,
                [False, need_w, need_b and has_bias])
        shape = x.shape
        del x  # the saved input goes before the input gradient is made (the module docstring)
        if need_x:
            empty = grad.new_empty(1).expand(shape)  # the shape only (torch.nn.grad.conv2d_input does the same)
            gx = torch.ops.aten.convolution_backward(
                grad, empty, weight, None, stride, padding, dilation, False, [0, 0], groups,
                [True, False, False])[0]
        return gx, gw, gb, None, None, None, None


def relu_saving_mask(x: torch.Tensor) -> torch.Tensor:
    """`torch.relu(x)`, saving only where it is positive (the module docstring)."""
    return _MaskedRelu.apply(x) if torch.is_grad_enabled() and x.requires_grad else torch.relu(x)


class _MaskedRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.relu(x)
        ctx.save_for_backward(out > 0)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask

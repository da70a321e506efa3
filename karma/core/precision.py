"""Precision: fp32, or automatic mixed precision in fp16 or bf16 (docs/design.md, Precision).

Mixed precision here is the layout of Micikevicius et al., "Mixed Precision
Training" (ICLR 2018), as Megatron-LM, DeepSpeed/ZeRO and apex's O2 level run
it: the model's weights are 16-bit copies (BatchNorm's affine weights stay
fp32, apex's keep_batchnorm_fp32), the optimizer owns fp32 master weights and
its fp32 state, the forward runs under torch.autocast (16-bit GEMMs and
convolutions, 16-bit activations, fp32 where autocast says so) and fp16 scales
the loss (a dynamic loss scale; bf16 needs none). Per weight with Adam that is
2 (16-bit weight) + 2 (16-bit gradient) + 4 (fp32 master) + 8 (two fp32
moments) = 16 bytes, against 4 + 4 + 8 = 16 in fp32: mixed precision saves
activations and moves half the bytes, not weight memory.

In a Profile this reads: `param_bytes` are the weights as the model holds them
(2 bytes per 16-bit weight), `optimizer_bytes` what lives wherever the
optimizer runs (fp32 masters of the 16-bit weights plus the fp32 state), so
the simulator's formulas hold unchanged in every precision; `dtype` names it.

On the meta device torch.autocast does nothing (meta tensors carry no
autocast dispatch key), so the analytic profile traces under `MetaAutocast`, a
torch-function mode that casts the inputs of the same operators CUDA's
autocast casts (PyTorch's "Automatic Mixed Precision package" op lists), above
autograd as autocast is, so saved tensors are the 16-bit copies.
"""

from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from karma.core.errors import KarmaError
from karma.core.precision_bytes import MASTER_BYTES, STATE_TENSORS, check, mixed

#: precision name (CLI, config) -> torch dtype of compute and activations
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def keeps_fp32(module: torch.nn.Module) -> bool:
    """Modules whose weights stay fp32 under mixed precision: BatchNorm (apex O2's
    keep_batchnorm_fp32; its kernels take 16-bit input with fp32 weights)."""
    return isinstance(module, torch.nn.modules.batchnorm._BatchNorm)


def to_precision(model: torch.nn.Module, precision: str) -> torch.nn.Module:
    """Cast the weights the model holds to the precision's 16-bit type (in place, same Parameter
    objects, so chains sharing them see it); buffers and BatchNorm weights stay fp32."""
    if not mixed(precision):
        return model
    dtype = DTYPES[precision]
    for m in model.modules():
        if keeps_fp32(m):
            continue
        for p in m.parameters(recurse=False):
            if p.is_floating_point():
                p.data = p.data.to(dtype)
    return model


def optimizer_bytes(params, optimizer: str) -> int:
    """Bytes the optimizer keeps for `params`: fp32 state (k tensors per weight), plus an fp32
    master of every weight held in 16 bits. In fp32 this is k x the weight bytes, as before."""
    k = STATE_TENSORS[optimizer]
    total = 0
    for p in params:
        n = p.numel()
        total += k * MASTER_BYTES * n + (MASTER_BYTES * n if p.element_size() < MASTER_BYTES else 0)
    return total


class MetaAutocast(TorchFunctionMode):
    """torch.autocast's casts, for tensors on the meta device (where autocast does nothing).

    `policy='cuda'` follows CUDA's autocast op lists (what the analytic profile predicts: a GPU);
    'cpu' follows the CPU's (tests compare it with a real autocast run here); 'megatron' is CUDA's
    with the softmax left in 16 bits, as Megatron-LM's half model runs it (POLICIES). Operators in the
    lower-precision list get their fp32 inputs cast to `dtype`; those in the fp32 list get 16-bit
    inputs cast to fp32; the rest run in the type of their inputs.
    """

    LOWER = {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
             "convolution", "_convolution", "conv_tbc", "linear", "matmul", "__matmul__", "__rmatmul__", "mm",
             "bmm", "baddbmm", "addmm", "addbmm", "addmv", "addr", "mv", "einsum", "chain_matmul", "multi_dot",
             "prelu", "scaled_dot_product_attention", "_native_multi_head_attention"}
    FP32_CUDA = {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
                 "rsqrt", "sinh", "tan", "pow", "__pow__", "__rpow__", "softplus", "layer_norm", "group_norm",
                 "norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
                 "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
                 "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
                 "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist",
                 "cdist", "renorm", "logsumexp", "softmax", "log_softmax", "softmin", "cross_entropy",
                 "cross_entropy_loss", "cumprod", "cumsum", "prod", "sum", "normalize"}
    FP32_CPU = {"avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "quantile", "nanquantile",
                "stft", "cdist", "trace", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve",
                "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d",
                "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d",
                "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
                "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy",
                "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
                "triplet_margin_loss", "multi_margin_loss", "ctc_loss", "kl_div", "multilabel_margin_loss",
                "binary_cross_entropy_with_logits"}

    #: 'megatron': Megatron-LM 2019's own fp16 layer (Shoeybi et al. 2019; its mpu/transformer.py), which
    #: runs the model in half (FP16_Module): the attention softmax on 16-bit scores, where autocast would
    #: cast them to fp32 and back (two more passes over the (s x s) scores per head), and the causal mask
    #: applied as torch.mul(scores, mask) - 10000.0 * (1.0 - mask) (two passes, where the zoo's layer
    #: has one masked_fill). Scale, mask and softmax stay separate kernels: Megatron fused them only
    #: in later versions.
    POLICIES = ("cuda", "cpu", "megatron")

    def __init__(self, dtype: torch.dtype, policy: str = "cuda"):
        super().__init__()
        if policy not in self.POLICIES:
            raise KarmaError(f"unknown autocast policy {policy!r}; valid: {', '.join(self.POLICIES)}")
        self.dtype, self.policy = dtype, policy
        self.fp32 = {"cuda": self.FP32_CUDA, "cpu": self.FP32_CPU,
                     "megatron": self.FP32_CUDA - {"softmax"}}[policy]

    @staticmethod
    def megatron_mask(scores: torch.Tensor, mask: torch.Tensor, _value) -> torch.Tensor:
        """Megatron-LM 2019's causal mask: keep = 1 where attended, scores * keep - 10000 (1 - keep)."""
        keep = (~mask).to(scores.dtype)
        return torch.mul(scores, keep) - 10000.0 * (1.0 - keep)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "").split(".")[0]  # an ATen overload of an exported graph: `linear.default`
        if self.policy == "megatron" and name == "masked_fill" and len(args) == 3 and args[0].is_floating_point():
            return self.megatron_mask(*args)
        if name in self.LOWER:
            to, cast = self.dtype, (torch.float32,)
        elif name in self.fp32:
            to, cast = torch.float32, (torch.float16, torch.bfloat16)
        else:
            return func(*args, **kwargs)

        def convert(t):
            return t.to(to) if isinstance(t, torch.Tensor) and t.dtype in cast else t

        return func(*tree_map(convert, args), **tree_map(convert, kwargs))


def autocast(device: torch.device | str, precision: str, policy: str | None = None):
    """The forward's context: nothing in fp32; torch.autocast on a real device; MetaAutocast on
    meta (CUDA's op lists unless `policy` says 'cpu')."""
    if not mixed(precision):
        return contextlib.nullcontext()
    device = torch.device(device)
    if device.type == "meta":
        return MetaAutocast(DTYPES[precision], policy or "cuda")
    return torch.autocast(device.type, dtype=DTYPES[precision])


class LossScaler:
    """fp16's dynamic loss scale (Micikevicius et al. 2018, Sec. 3.2; Megatron-LM's defaults):
    start at 2^16, halve and skip the step when a gradient overflows, double after `window`
    clean steps. bf16 and fp32 use scale 1 and never skip."""

    def __init__(self, precision: str, scale: float = 2.0 ** 16, window: int = 1000):
        self.enabled = check(precision) == "fp16"
        self.scale = scale if self.enabled else 1.0
        self.window, self.clean = window, 0

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale if self.enabled else loss

    @staticmethod
    def finite(grads) -> bool:
        return all(g is None or bool(torch.isfinite(g).all()) for g in grads)

    def update(self, overflow: bool) -> None:
        if not self.enabled:
            return
        if overflow:
            self.scale, self.clean = max(self.scale / 2, 1.0), 0
            return
        self.clean += 1
        if self.clean >= self.window:
            self.scale, self.clean = self.scale * 2, 0


def to_master_grad(grad: torch.Tensor | None, scale: float) -> torch.Tensor | None:
    """A 16-bit gradient as the fp32 master's (unscaled) gradient."""
    if grad is None:
        return None
    g = grad.float()
    return g / scale if scale != 1.0 else g


class MixedPrecisionOptimizer:
    """The optimizer of a mixed-precision model: fp32 masters of its 16-bit weights (fp32 weights
    are their own masters), the given torch optimizer over the masters, and the loss scale. Its
    step turns each 16-bit gradient into the master's, steps, and copies the masters back
    (single-tensor updates, so a per-block update on the host gives the same bits)."""

    def __init__(self, params: list[torch.Tensor], make, precision: str):
        self.params = params
        self.masters = [p.detach().float().clone() if p.dtype != torch.float32 else p for p in params]
        self.inner = make(self.masters)
        self.scaler = LossScaler(precision)

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return self.scaler.scaled(loss)

    def step(self) -> None:
        for p, m in zip(self.params, self.masters, strict=True):
            if m is not p:
                m.grad = to_master_grad(p.grad, self.scaler.scale)
            elif p.grad is not None and self.scaler.scale != 1.0:
                p.grad.div_(self.scaler.scale)
        overflow = not LossScaler.finite(m.grad for m in self.masters)
        self.scaler.update(overflow)
        if overflow:
            return
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters, strict=True):
                if m is not p:
                    p.copy_(m)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, m in zip(self.params, self.masters, strict=True):
            p.grad = None
            if m is not p:
                m.grad = None

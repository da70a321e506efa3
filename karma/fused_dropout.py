"""`F.dropout` costed as the one fused kernel CUDA runs (karma/unit_trace.py, "Dropout as CUDA runs it"):
the meta and CPU paths decompose it into empty_like / bernoulli_ / div_ / mul, which the profile would
otherwise record as several operators with their own traffic."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from karma.unit_trace import OpCost, OpRecorder


class FusedDropout(TorchFunctionMode):
    """`F.dropout` in training costed as the one kernel PyTorch runs on CUDA (`native_dropout`, and
    `native_dropout_backward` in the backward) instead of the decomposition the meta and CPU paths
    dispatch: while it runs, `recorder` (the forward's, then the backward's: trace_unit swaps it)
    records nothing, then one operator with the fused kernel's traffic."""

    def __init__(self, recorder: OpRecorder):
        super().__init__()
        self.recorder = recorder

    def _fused(self, name: str, elements: int, size: int, dtype: torch.dtype, reads: int) -> OpCost:
        # `reads` tensors of the input's type read and one written, plus the 1-byte mask
        moved = (reads + 1) * elements * size + elements
        return OpCost(name, 0.0, float(moved), str(dtype).removeprefix("torch."))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not torch.nn.functional.dropout:
            return func(*args, **kwargs)
        x = args[0]
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        if not (training and 0 < p < 1 and x.numel()):
            return func(*args, **kwargs)
        recorder = self.recorder
        recorder.fusing = True
        try:
            out = func(*args, **kwargs)
        finally:
            recorder.fusing = False
        n, size, dtype = x.numel(), x.element_size(), x.dtype
        recorder.ops.append(self._fused("aten.native_dropout", n, size, dtype, reads=1))
        node = out.grad_fn
        if node is not None:
            def begin(_grads):
                self.recorder.fusing = True

            def end(_inputs, _outputs):
                self.recorder.fusing = False
                self.recorder.ops.append(self._fused("aten.native_dropout_backward", n, size, dtype, reads=1))

            node.register_prehook(begin)
            node.register_hook(end)
        return out

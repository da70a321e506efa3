"""What a unit's backward makes, in bytes: weight gradients (tied weights credited once), the gradient
of its output and of its input, and its backward transient. Shared by the simulator, the bound, the
recompute program and the coarsening, all of which read these terms of karma/profile.py's units."""

from __future__ import annotations


class GradientBytes:
    """Weight-gradient bytes a unit's backward creates, in backward order: its own weights' and
    those of tied weights it uses (owned by an earlier unit). The owner's backward then finds the
    gradient of its shared weights made already and accumulates into it (GPT's embedding, whose
    table the head uses: found crediting the unit after the head instead, a layer, on the runtime's
    Megatron peak)."""

    def __init__(self):
        self.made_early = 0

    def __call__(self, u) -> float:
        credit = min(self.made_early, u.shared_param_bytes)
        self.made_early += u.tied_param_bytes - credit
        return u.param_bytes + u.tied_param_bytes - credit


def output_gradient_bytes(units, i: int) -> float:
    """Bytes of the gradient of unit i's output, as unit i+1's backward makes it (none for the last
    unit, which ends in the scalar loss)."""
    return 0 if i == len(units) - 1 else units[i].output_bytes - units[i + 1].grad_alias_bytes


def backward_transient(units, i: int) -> float:
    """Bytes unit i's backward holds besides saved tensors and weight gradients: its output's
    gradient, the input gradients it makes (the first unit's input is the batch, which needs none)
    and its backward workspace."""
    return output_gradient_bytes(units, i) + input_gradient_bytes(units, i) + units[i].backward_workspace_bytes


def input_gradient_bytes(units, i: int) -> float:
    """Bytes of the input gradients unit i's backward makes (none for the first unit: the batch)."""
    return 0 if i == 0 else units[i].input_bytes - units[i].grad_reused_bytes

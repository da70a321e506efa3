"""The paper setting's optimizers: SGD with momentum for the CNNs, Adam for the GPT models.

Single-tensor implementations (foreach=False), so that per-block host updates and one
whole-model update round identically.
"""

from __future__ import annotations

import torch


def new_optimizer(kind: str, params: list[torch.Tensor], lr: float = 0.01) -> torch.optim.Optimizer:
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, foreach=False)
    return torch.optim.SGD(params, lr=lr, momentum=0.9, foreach=False)

"""`karma run MODEL --check-exact`: the plan trains the model exactly as plain PyTorch does.

Two copies of the model are built from the same seed: one trains in plain PyTorch (the original
module's forward, the loss, backward, the optimizer step), the other as its chain under the plan
on the emulated device (karma.runtime.execute.train_step, optimizer on the host where the plan
says so). Step s of both runs on the batch of seed s with the RNG seeded alike (dropout). Then
every weight and buffer of the two originals is compared: bitwise in fp32 (docs/design.md allows a
float tolerance for recompute; the runtime restores the RNG and BatchNorm statistics, so it is
bitwise here too), to the precision tests' tolerance in mixed precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from karma.plan.plan import Plan
from karma.runtime.execute import make_optimizer, scaled, train_step
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.streamed import HostWeights
from models.registry import build_original, chain_of
from models.specs import build_pair, is_spec


@dataclass
class ExactResult:
    equal: bool
    tensors: int
    differing: list[str]
    max_abs_diff: float
    bitwise: bool
    steps: int

    def line(self) -> str:
        how = "bitwise" if self.bitwise else "to float tolerance (rtol 1e-2, atol 1e-3: mixed precision)"
        if self.equal:
            return (f"check-exact: {self.tensors} weights and buffers equal {how} to plain PyTorch after "
                    f"{self.steps} steps")
        return (f"check-exact: FAILED: {len(self.differing)} of {self.tensors} tensors differ from plain PyTorch "
                f"after {self.steps} steps (max |diff| {self.max_abs_diff:.3g}; first: {self.differing[0]})")


def pair(model: str, size: str, batch: int | None, seed: int, precision: str, options: dict | None):
    """(original module, its chain) for a zoo name or a model spec."""
    if is_spec(model):
        return build_pair(model, batch, "cpu", seed, options, precision)
    original = build_original(model, size, "cpu", seed)
    return original, chain_of(model, size, original, batch, precision)


def check_exact(model: str, size: str, batch: int | None, plan: Plan, *, steps: int = 2, precision: str = "fp32",
                options: dict | None = None, capacity: float = math.inf, seed: int = 1) -> ExactResult:
    ref, ref_chain = pair(model, size, batch, seed, precision, options)
    orig, chain = pair(model, size, batch, seed, precision, options)
    ref.train()
    opt_ref = make_optimizer(ref_chain)
    # oneDNN's depthwise convolution backward is not deterministic on the CPU (MobileNetV2 trained twice in
    # plain PyTorch differs in its last bits): both sides run PyTorch's own kernels instead
    with torch.backends.mkldnn.flags(enabled=False), EmulatedLink(1e12, 1e12) as link:
        opt = HostWeights(chain, plan, link=link) if plan.host_optimizer else make_optimizer(chain)
        try:
            for s in range(steps):
                inputs, targets = chain.make_batch(seed=s)
                torch.manual_seed(1000 + s)
                opt_ref.zero_grad()
                with ref_chain.autocast():
                    loss = ref_chain.loss(ref(inputs), targets)
                scaled(opt_ref, loss).backward()
                opt_ref.step()
                torch.manual_seed(1000 + s)
                train_step(chain, plan, opt, (inputs, targets), Ledger(capacity), link, track=False)
            if isinstance(opt, HostWeights):
                opt.sync()
        finally:
            if isinstance(opt, HostWeights):
                opt.close()
    bitwise = precision == "fp32"
    differing, worst = [], 0.0
    a_state, b_state = ref.state_dict(), orig.state_dict()
    for key, a in a_state.items():
        b = b_state[key]
        same = torch.equal(a, b) if bitwise else torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3)
        if not same:
            differing.append(key)
            if a.is_floating_point():
                worst = max(worst, (a.float() - b.float()).abs().max().item())
    return ExactResult(not differing, len(a_state), differing, worst, bitwise, steps)

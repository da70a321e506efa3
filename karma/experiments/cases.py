"""The planning problems KARMA's planner is judged on (docs/planner.md, *How good it is*).

The six paper models are the tuning set; the held-out cases were chosen before any planner setting was changed
and are never used to choose one: own-model specs from torchvision and transformers at batches whose in-core
peak is 2-4x a 16 GB V100 (and where some plan fits: densenet121 at 384 and efficientnet_b0 in bf16 at 768 have
a unit whose backward alone exceeds 16 GB), capacities from 8 to 32 GB, bf16, the large NLP models' chains and a
layer-granularity chain. karma/experiments/planner_cases.py and bound_schedule.py run them.
"""

from __future__ import annotations

from dataclasses import dataclass

from karma.core.hardware import Hardware
from karma.profile.analytic import analytic_profile
from karma.profile.profile import Profile
from models import build


@dataclass(frozen=True)
class Case:
    """One planning problem: a model built on the meta device, profiled analytically on `hardware`."""

    name: str
    #: a zoo name or a model spec (torchvision:NAME, hf:MODEL_TYPE)
    model: str
    #: None: the zoo model's paper batch
    batch: int | None = None
    #: device memory the plan must fit, GB
    capacity_gb: float = 16.0
    #: fp32, fp16 or bf16 (mixed precision)
    precision: str = "fp32"
    #: block or layer units (zoo models)
    granularity: str = "block"
    #: the Hardware preset it is profiled and simulated on (karma hardware lists them)
    hardware: str = "v100-abci"
    #: False: a paper model, the planner's tuning set
    held_out: bool = True

    def profile(self, hw: Hardware) -> Profile:
        return analytic_profile(build(self.model, "paper", batch=self.batch, device="meta",
                                      precision=self.precision, granularity=self.granularity), hw)


PAPER = [Case(m, m, held_out=False) for m in ("resnet50", "vgg16", "resnet200", "resnet1001", "wrn28-10",
                                               "megatron-1.2b")]
HELD_OUT = [
    Case("densenet121-b320", "torchvision:densenet121", batch=320),
    Case("gpt2-b12", "hf:gpt2", batch=12),
    Case("resnet152-bf16-b512", "torchvision:resnet152", batch=512, precision="bf16"),
    Case("convnext-tiny-bf16-b640", "torchvision:convnext_tiny", batch=640, precision="bf16"),
    Case("resnet50-8gb", "resnet50", capacity_gb=8.0),
    Case("wrn28-10-b2x-32gb", "wrn28-10", batch=1536, capacity_gb=32.0),
    Case("megatron-1.2b-bf16", "megatron-1.2b", precision="bf16"),
    Case("megatron-8.3b-fp16", "megatron-8.3b", precision="fp16"),
    Case("turing-nlg-17b-fp16", "turing-nlg-17b", precision="fp16", capacity_gb=32.0),
    Case("resnet50-layers", "resnet50", granularity="layer"),
]
CASES = {c.name: c for c in PAPER + HELD_OUT}
#: The layer chain of issue 36's time target; its own option (planning it takes the longest).
RESNET1001_LAYERS = Case("resnet1001-layers", "resnet1001", granularity="layer", held_out=False)

"""Profile a model by name or spec: build it where the source needs it (the meta device for an analytic
profile, the local device for a measured one), profile it, write it. Shared by `karma profile` and the
pipeline (workflow/scripts/profile_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from karma.core.errors import KarmaError, choose
from karma.core.files import write_atomic
from karma.core.hardware import load
from karma.profile.analytic import analytic_profile
from karma.profile.granularity import auto_profile
from karma.profile.measured import measured_profile
from models.registry import build, spec
from models.specs import is_spec


def write_profile(profile, out: Path, csv_path: Path | None) -> None:
    """Write atomically: a half-written profile must never be left behind."""
    write_atomic(out, json.dumps(profile.to_dict(), indent=1))
    if csv_path:
        write_atomic(csv_path, profile.to_csv())


def make_profile(model: str, size: str, batch: int | None, source: str, hardware: str,
                 reps: int = 5, threads: int | None = None, progress=None, precision: str = "fp32",
                 policy: str | None = None, options: dict | None = None, granularity: str = "block"):
    """Build the model where the source needs it and profile it (shared by CLI and pipeline), in
    `precision` ('fp32', or mixed precision 'fp16' / 'bf16'; the profile's dtype records it); an
    analytic profile in mixed precision follows `policy`'s autocast lists (karma.core.precision.MetaAutocast:
    CUDA's by default, 'megatron' for Megatron-LM's half layer). `model` is a zoo name or a model spec
    (models/specs.py: torchvision:NAME, hf:..., package.module:function) with its `options`; a zoo model
    at `granularity` 'block', 'layer' (models/layer_units.py) or 'auto' (karma/profile/granularity.py)."""
    if not is_spec(model):
        spec(model)
    elif granularity != "block":
        raise KarmaError("--granularity applies to zoo models; a model spec is cut by models/auto_chain.py "
                         "(its `units` option sets how finely)")
    if granularity == "auto" and source != "analytic":
        raise KarmaError("--granularity auto cuts the blocks that do not fit --hardware's memory: it needs "
                         "--source analytic (profile at block or layer granularity to measure)")
    if source == "analytic":
        hw = load(hardware)
        def profiled(granularity: str, split: frozenset[str] = frozenset()):
            return analytic_profile(build(model, size, batch, device="meta", precision=precision, overrides=options,
                                          granularity=granularity, split=split), hw, progress, policy)

        if granularity != "auto":
            return profiled(granularity)
        return auto_profile(lambda split: profiled("block", split), hw)
    choose("device for a measured profile", hardware, ["cpu", "cuda"])
    if threads:
        torch.set_num_threads(threads)
    device = "cuda" if hardware == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise KarmaError("CUDA was asked for but no CUDA device is available")
    return measured_profile(build(model, size, batch, device=device, precision=precision, overrides=options,
                                  granularity=granularity), reps=reps, progress=progress)

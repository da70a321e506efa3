"""Snakemake script: profile one model (analytic on a preset, or measured here)."""

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
import torch  # noqa: E402
from _log import logged  # noqa: E402

from karma.profile.build import make_profile, write_profile  # noqa: E402
from karma.sim.simulate import in_core_peak_bytes  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    p = sm.params
    device = p.hardware
    if p.source == "measured" and device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"

    def progress(i, n, name):
        if i + 1 == n or (i + 1) % max(1, n // 10) == 0:
            print(f"profiled {i + 1}/{n} units ({name})")

    # a zoo name, or an extra model's spec and options (config extra_models)
    profile = make_profile(getattr(p, "spec", sm.wildcards.model), p.size, p.batch or None, p.source, device,
                           reps=p.reps, threads=p.threads, progress=progress,
                           precision=getattr(p, "precision", "fp32"), policy=getattr(p, "policy", None),
                           options=dict(getattr(p, "options", {}) or {}) or None)
    if getattr(p, "spec", sm.wildcards.model) != sm.wildcards.model:  # an extra model: its name in the tables
        profile = replace(profile, model=sm.wildcards.model, note=f"model spec {p.spec} {dict(p.options or {})}")
    write_profile(profile, Path(sm.output.json), Path(sm.output.csv))
    print(f"{profile.model} batch {profile.batch}: in-core peak {in_core_peak_bytes(profile) / 1e9:.3f} GB, "
          f"fwd+bwd {(profile.forward_time() + profile.backward_time()) * 1e3:.1f} ms, {profile.dtype} "
          f"[{profile.label}]")

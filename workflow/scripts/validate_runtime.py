"""Snakemake script: measured profile, then every strategy simulated and run on the emulated device."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))  # noqa: F821 (snakemake injects it)
from _log import logged  # noqa: E402

sm = snakemake  # noqa: F821
with logged(sm):
    import torch

    from karma.profile_measured import measured_profile
    from karma.runtime.emulation import default_link_bandwidth, validate
    from karma.tables import to_markdown
    from models import build

    torch.set_num_threads(1)  # compute on one core, the link's workers on the other (FACTS.md)
    model, batch = sm.wildcards.model, sm.params.batch or None
    profile = measured_profile(build(model, "small", batch), reps=3)
    link = sm.params.link_mbs * 1e6 if sm.params.link_mbs else default_link_bandwidth(profile)
    capacity = profile.in_core_peak_bytes() * sm.params.fraction
    print(f"{model} small batch {profile.batch}: link {link / 1e6:.1f} MB/s, capacity {capacity / 1e6:.1f} MB "
          f"({sm.params.fraction} of the in-core {profile.in_core_peak_bytes() / 1e6:.1f} MB)")
    table = validate(lambda: build(model, "small", batch, seed=1), profile, list(sm.params.strategies), capacity,
                     link, steps=sm.params.steps)
    table.to_csv(sm.output[0], index=False)
    print(to_markdown(table.drop(columns=["source"])))

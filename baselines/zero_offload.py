"""ZeRO-Offload (Ren, Rajbhandari, Aminabadi, Ruwase, Yang, Zhang, Li, He,
"ZeRO-Offload: Democratizing Billion-Scale Model Training", USENIX ATC'21).

Rule (Sec. 4, "unique optimal offload strategy"): the fp16 weights stay on the
device for forward and backward; gradients are offloaded to the host as each
block's backward produces them; the fp32 master weights and the optimizer
state live on the host, where the CPU optimizer (Sec. 5.1) updates them; the
updated weights are copied back to the device. In our Plan that is
``weights='resident', optimizer='host'`` (karma/plan/plan.py). Activation
checkpointing (Sec. 6, used with DeepSpeed's per-layer
``checkpoint_activations``) only when the model does not fit without it:
configurations, in order, no checkpointing, then every unit its own
checkpointed segment; the first that fits. The one-step delayed parameter
update (DPU, Sec. 5.2) changes convergence and is off by default; without it the CPU
steps after the whole backward (the optimizer's step() once every gradient is down, then
the updated weights go up): ``update_order='after-backward'``.

Unit granularity: a layer is a unit; the gradients of a unit's weights go to the
host when its block's backward ends. Our profiles keep weights in the
profile's dtype on the device (fp16 weights when the profile is fp16).
"""

from __future__ import annotations

from baselines._choose import first_fit, named
from karma.plan.plan import from_policies


def configurations(profile):
    n = len(profile.units)
    for labels, activations in ((["keep"] * n, "kept"), (["recompute"] * n, "checkpointed per layer")):
        plan = from_policies(profile.model, profile.batch, labels, segments=list(range(n)), optimizer="host",
                             update_order="after-backward", strategy="zero-offload")
        yield named(plan, "zero-offload", activations=activations)


def plan(profile, hw, capacity):
    return first_fit(profile, hw, capacity, configurations(profile))

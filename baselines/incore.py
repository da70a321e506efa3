"""In-core training: every activation kept on the device, weights resident.

The reference every out-of-core method is compared with; when the model does
not fit, the simulator rejects the plan and tables print OOM, never a time.
"""

from karma.plan.plan import from_policies


def plan(profile, hw, capacity):
    n = len(profile.units)
    return from_policies(profile.model, profile.batch, ["keep"] * n, strategy="incore")

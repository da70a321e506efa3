"""vDNN_all (Rhu et al. MICRO'16, Sec. III-C): every layer's input offloaded,
whatever the capacity; see baselines/vdnn.py for the overlap and the unit
interpretation. A static policy: it has no configuration to tune."""

from baselines._choose import named
from baselines.vdnn import policy


def plan(profile, hw, capacity):
    return named(policy(profile, "all"), "vdnn-all")

"""vDNN_conv (Rhu et al. MICRO'16, Sec. III-C): only convolution layers' inputs
offloaded (convolution-like units, baselines/_layers.py), whatever the
capacity; see baselines/vdnn.py. A static policy: nothing to tune."""

from baselines._choose import named
from baselines.vdnn import policy


def plan(profile, hw, capacity):
    return named(policy(profile, "conv"), "vdnn-conv")

"""Precision names and the byte arithmetic of mixed precision, without torch (karma/core/precision.py has the
layout and the torch side: casts, autocast on the meta device, loss scaling).

The simulator, the planner and the table jobs need only these; importing torch costs a job a second or two.
"""

from __future__ import annotations

from karma.core.errors import KarmaError, choose

#: precision name -> Profile.dtype
PROFILE_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
PRECISION_OF = {v: k for k, v in PROFILE_DTYPE.items()}
MASTER_BYTES = 4  # fp32 master weights and optimizer state
#: bytes of optimizer state per fp32 weight: SGD momentum 1, Adam's two moments 2 (Kingma & Ba 2015)
STATE_TENSORS = {"sgd": 1, "adam": 2}


def check(precision: str) -> str:
    choose("precision", precision, PROFILE_DTYPE)
    return precision


def precision_of(dtype: str) -> str:
    """'bfloat16' (a Profile's dtype) -> 'bf16'."""
    if dtype not in PRECISION_OF:
        raise KarmaError(f"unknown dtype {dtype!r}; valid: {', '.join(PRECISION_OF)}")
    return PRECISION_OF[dtype]


def mixed(precision: str) -> bool:
    return check(precision) != "fp32"


def master_bytes(param_bytes: float, optimizer_bytes: float, optimizer: str) -> float:
    """fp32 bytes of the master weights behind `param_bytes` of weights, from the two byte counts
    of a profile: with n16 16-bit and n32 fp32 weights, P = 2 n16 + 4 n32 and O = (4 + 4k) n16 +
    4k n32, so n16 = (O - kP) / (4 + 2k) and the masters are P + 2 n16 (P itself in fp32, where
    O = kP). Exact for either precision and linear, so it holds for sums of units too."""
    k = STATE_TENSORS[optimizer]
    n16 = max(optimizer_bytes - k * param_bytes, 0.0) / (4 + 2 * k)
    return param_bytes + 2 * n16

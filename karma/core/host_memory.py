"""The host's allocator set to keep what it frees, as a GPU's caching allocator does.

On the emulated device (the CPU standing in for a GPU), tensors live in the C library's heap. glibc's
malloc serves large blocks by mmap and gives them back to the system when they are freed, and trims
the top of its heap past a threshold, so the next tensor of that size faults every page in again: a
fresh tensor is written at 1-2 GB/s where a reused one takes 6-7 (docs/machine.md). A step pays this
in proportion to the bytes it frees and makes again (recomputed activations, prefetched copies, new
gradients), which a unit timed alone, reusing the same blocks every repeat, does not: recomputing
ResNet-50's first stage inside a step cost about 1.3 times what its units measured alone. A GPU does
not pay it: PyTorch's CUDA caching allocator keeps freed blocks for the next allocation (PyTorch docs,
*CUDA semantics*, "Memory management"). `keep_freed_memory` makes the host's allocator do the same,
so that what is measured on the emulated device is what a GPU's step would cost, and what a unit
costs alone is what it costs in a step.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

#: mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
#: the largest trim threshold mallopt takes (an int): up to 2 GB freed at the heap's top stays with the process
TRIM_THRESHOLD = 2**31 - 1


@cache
def keep_freed_memory() -> bool:
    """Serve every allocation from the heap (no mmap) and never trim it, for the rest of the process.
    True where the C library took both settings (glibc); elsewhere False, and nothing changes."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))

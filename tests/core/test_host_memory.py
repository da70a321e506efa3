"""The emulated device's allocator keeps what it frees (karma/core/host_memory.py)."""

import resource
import subprocess
import sys

SCRIPT = """
import resource, sys, torch
from karma.core.host_memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
sizes = [mb * 2**20 // 4 for mb in (16, 8, 32, 8, 4)]  # 68 MB of tensors, as a step makes and frees them


def step():
    tensors = [torch.empty(n).fill_(1.0) for n in sizes]
    del tensors


for _ in range(4):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
step()
step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    """Page faults of two more rounds of the same tensors, in a process of its own (the setting is for a whole
    process)."""
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_a_freed_block_is_reused_without_faulting_its_pages_in_again():
    pages = 2 * 68 * 2**20 // resource.getpagesize()  # two rounds'
    assert faults("keep") < pages / 3  # alignment leaves a block or two unfit for reuse
    # glibc's default gives back at least the 32 MB block (at its largest mmap threshold on 64 bits, so always
    # mapped anew) in both rounds; the smaller ones depend on its adaptive thresholds (16-20 k faults in all)
    assert faults("default") >= 2 * 32 * 2**20 // resource.getpagesize()

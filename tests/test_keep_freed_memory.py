"""A process that merges large results (experiments/executor.py run_all, after its
workers started) takes large blocks from its heap and keeps them there when freed, where
glibc is the C library: the kernel zeroes a fresh mapping's pages every time, a reused
block's never (docs/results/2026-12-07-day-of-traffic.md)."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

CHILD = """
import ctypes, numpy as np
from batchlab.experiments.executor import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if {keep}:
    keep_freed_memory()
a = np.ones(8_000_000)  # 64 MB: past any threshold glibc maps by default
mapped = libc.mallinfo2().hblkhd
del a
b = np.ones(8_000_000)
print(mapped >= 64_000_000, libc.mallinfo2().arena >= 64_000_000)
"""


def glibc() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not glibc(), reason="glibc's malloc only")
@pytest.mark.parametrize("keep", [False, True])
def test_large_blocks_come_from_the_heap_once_kept(keep):
    out = subprocess.run([sys.executable, "-c", CHILD.format(keep=keep)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == (["False", "True"] if keep else ["True", "False"])

"""experiments/process_memory.py. A process that merges large results (executor.run_all,
after its workers started) takes large blocks from its heap and keeps them there when
freed, where glibc is the C library: the kernel zeroes a fresh mapping's pages every time,
a reused block's never. NumPy's huge-page advice is turned off exactly where the kernel
would compact memory at a fault to follow it (docs/results/2026-12-07-day-of-traffic.md)."""
from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from batchlab.experiments.process_memory import no_huge_page_advice

CHILD = """
import ctypes, numpy as np
from batchlab.experiments.process_memory import keep_freed_memory
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


def _advice_switch():
    return getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)


@pytest.mark.skipif(_advice_switch() is None, reason="this NumPy has no huge-page switch")
@pytest.mark.parametrize("defrag, off", [
    ("always defer defer+madvise [madvise] never", True),
    ("[always] defer defer+madvise madvise never", True),
    ("always defer [defer+madvise] madvise never", True),
    ("always [defer] defer+madvise madvise never", False),
    ("always defer defer+madvise madvise [never]", False),
    ("", False)])
def test_huge_page_advice_is_off_where_the_kernel_compacts_at_a_fault(tmp_path, defrag, off):
    switch = _advice_switch()
    path = tmp_path / "defrag"
    path.write_text(defrag + "\n")
    before = switch(True)
    try:
        assert no_huge_page_advice(str(path)) is off
        assert switch(True) is not off  # the advice as the call left it
    finally:
        switch(before)


def test_no_kernel_setting_leaves_the_advice_as_it_was(tmp_path):
    assert no_huge_page_advice(str(tmp_path / "absent")) is False

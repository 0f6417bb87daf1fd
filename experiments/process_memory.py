"""How a process's memory is had from and given back to the system, set for the work it
does: a pool's parent that merges large results, a worker done simulating (glibc's
malloc where there is one; elsewhere these change nothing)."""
from __future__ import annotations

import ctypes
import re

import numpy as np

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -4, -8
_KEEP_UP_TO = 2**31 - 1  # bytes free at the heap's top before it gives them back


def keep_freed_memory() -> None:
    """Large blocks of this process from its heap, kept there when freed (glibc; elsewhere
    nothing is changed). By default each is mapped afresh and unmapped when freed, and the
    kernel zeroes every new page: the groups' results merged and summarised make some thirty
    temporaries of the table's size, and that zeroing took a third of the parent's time
    (docs/results/2026-12-07-day-of-traffic.md). Not for a simulating process: a block
    that grows (array.array's rows) is copied on the heap where a mapping is moved."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_MAX, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_UP_TO)
        # One heap for every thread: a block freed by one is reused by the others (the
        # summary's threads, core/summary.py), not kept in an arena of its own.
        libc.mallopt(_M_ARENA_MAX, 1)
    except (OSError, AttributeError):  # no glibc
        pass


def give_back_freed_memory() -> None:
    """This process's freed heap memory returned to the system (glibc malloc_trim;
    elsewhere nothing): a pool worker done with its simulation holds its result alone
    while the parent merges the results, and the memory of every process counts."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # no glibc
        pass


_THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
# The kernel's choices under which a page fault in a mapping advised MADV_HUGEPAGE
# compacts memory there and then, to find a huge page (Documentation/admin-guide/mm/transhuge.rst).
_COMPACTS_AT_FAULT = ("always", "madvise", "defer+madvise")


def no_huge_page_advice(defrag: str = _THP_DEFRAG) -> bool:
    """NumPy's advice that its large arrays be backed by huge pages (MADV_HUGEPAGE) turned
    off for this process, where the kernel answers that advice by compacting memory at the
    first touch of each page: then the first pass over a fresh array, after a long run has
    fragmented memory, waits on compaction (docs/results/2026-12-07-day-of-traffic.md).
    Whether it was turned off (kept on elsewhere, and where NumPy has no such switch)."""
    try:
        with open(defrag) as f:
            chosen = re.search(r"\[([^\]]+)\]", f.read())
    except OSError:
        return False
    if chosen is None or chosen.group(1) not in _COMPACTS_AT_FAULT:
        return False
    advise = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if advise is None:
        return False
    advise(False)
    return True

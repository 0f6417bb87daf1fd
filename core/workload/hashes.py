"""Prefix block hashes read from a trace: the size of the blocks they cover, and the
check that each row's list covers its prompt (one hash per block, the last one partial).

Mooncake's hash_ids cover 512-token blocks. The batchlab format says its block size in
an optional `hash_block_size` column (one value for the whole file; 512 when absent).
How those blocks map onto the engine's KV blocks: core/prefix_cache.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.core.workload.errors import WorkloadError

MOONCAKE_BLOCK = 512


def hash_block_size(values: np.ndarray | None, has_hashes: np.ndarray, lines: np.ndarray,
                    path: str | Path, name: str) -> int:
    """The one block size of the rows with hashes (a column read as integers, 0 where
    empty), MOONCAKE_BLOCK when the file has no such column."""
    if values is None:
        return MOONCAKE_BLOCK
    given = values[has_hashes]
    if not len(given):
        return MOONCAKE_BLOCK
    bad = np.flatnonzero(given < 1)
    if len(bad):
        i = np.flatnonzero(has_hashes)[bad[0]]
        raise WorkloadError(path, int(lines[i]), f"{name} is {int(values[i])}; expected the "
                                                 f"tokens each prefix hash covers, >= 1")
    other = np.flatnonzero(given != given[0])
    if len(other):
        i = np.flatnonzero(has_hashes)[other[0]]
        raise WorkloadError(path, int(lines[i]), f"{name} is {int(values[i])}; expected one "
                                                 f"block size for the whole file ({int(given[0])}"
                                                 f" on earlier rows)")
    return int(given[0])


def check_coverage(hashes: list[tuple[int, ...]], prompt: np.ndarray, block: int,
                   lines: np.ndarray, path: str | Path, name: str, prompt_name: str) -> None:
    """Each non-empty list has exactly ceil(prompt / block) hashes."""
    counts = np.fromiter(map(len, hashes), dtype=np.int64, count=len(hashes))
    want = -(-prompt // block)
    bad = np.flatnonzero((counts > 0) & (counts != want))
    if len(bad):
        i = bad[0]
        raise WorkloadError(path, int(lines[i]), f"{name} has {counts[i]} hashes; expected "
                                                 f"{want[i]}, one per {block}-token block of "
                                                 f"the {prompt[i]}-token prompt ({prompt_name})")

"""Batch sizes to compile or capture for, and the padding of a batch to the next one.

vLLM's default CUDA-graph capture sizes (vLLM v0.13.0, vllm/config/vllm.py
VllmConfig._set_cudagraph_sizes; the formula is repeated in vllm/config/compilation.py,
CompilationConfig.max_cudagraph_capture_size):
    max_graph_size = min(max_num_seqs * 2, 512)
    [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max_graph_size + 1, 16))
A decode step of n sequences runs the graph of the smallest captured size >= n, its extra
rows padding (they write a scratch slot and sample nothing); a step larger than every
captured size runs eagerly.

The in-place attention kernel is compiled per row count too, so its decode rows are
padded the same way (kernel_rows): on a CPU a padded row reads no block but still costs
~3 us per head, which the fine steps of vLLM's sizes keep small."""
from __future__ import annotations

from bisect import bisect_left

VLLM_MAX_GRAPH_SIZE = 512


def vllm_capture_sizes(max_num_seqs: int) -> list[int]:
    """vLLM's default capture sizes for a server of max_num_seqs sequences."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
    top = min(max_num_seqs * 2, VLLM_MAX_GRAPH_SIZE)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


def power_of_two_sizes(largest: int) -> list[int]:
    """1, 2, 4, ... up to the first power of two >= largest."""
    sizes = [1]
    while sizes[-1] < largest:
        sizes.append(sizes[-1] * 2)
    return sizes


def padded_size(n: int, sizes: list[int]) -> int | None:
    """The smallest of the ascending `sizes` that holds n rows; None when none does."""
    if n < 1:
        raise ValueError(f"a batch has at least one row, got {n}")
    i = bisect_left(sizes, n)
    return sizes[i] if i < len(sizes) else None


def pow2_at_least(n: int, floor: int = 1) -> int:
    """The power of two >= max(n, floor): a compiled kernel's row count."""
    p = floor
    while p < n:
        p *= 2
    return p


_KERNEL_SIZES = vllm_capture_sizes(VLLM_MAX_GRAPH_SIZE)


def kernel_rows(n: int) -> int:
    """Rows of a compiled attention call for n decode rows: vLLM's next capture size,
    past 512 the next power of two."""
    return padded_size(n, _KERNEL_SIZES) or pow2_at_least(n)

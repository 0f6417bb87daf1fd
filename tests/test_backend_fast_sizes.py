"""The fast path's bookkeeping, without compiling anything: CUDA-graph capture sizes
(vLLM's defaults) and padding to them, a decode row's blocks split into full and partial
ones, and the flags refused where they cannot run."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.fast.options import FastPath
from batchlab.backend.fast.paged_flex import _row_blocks
from batchlab.backend.fast.sizes import padded_size, pow2_at_least, power_of_two_sizes, vllm_capture_sizes


def test_vllm_default_sizes():
    sizes = vllm_capture_sizes(256)  # max_graph_size = min(2 * 256, 512) = 512
    assert sizes[:6] == [1, 2, 4, 8, 16, 24]
    assert sizes[sizes.index(248):sizes.index(248) + 3] == [248, 256, 272]
    assert sizes[-1] == 512 and len(sizes) == 3 + 31 + 17
    assert vllm_capture_sizes(4) == [1, 2, 4, 8]  # up to 2 * max_num_seqs
    assert vllm_capture_sizes(1000)[-1] == 512
    with pytest.raises(ValueError, match="max_num_seqs"):
        vllm_capture_sizes(0)


@given(st.integers(1, 600), st.integers(1, 300))
def test_padding_is_the_next_captured_size(n, seqs):
    sizes = vllm_capture_sizes(seqs)
    p = padded_size(n, sizes)
    if n > sizes[-1]:
        assert p is None  # larger than every graph: runs eagerly
    else:
        assert p in sizes and p >= n
        assert all(s < n for s in sizes if s < p)


@given(st.integers(1, 5000), st.sampled_from([1, 8, 64]))
def test_power_of_two_rows(n, floor):
    p = pow2_at_least(n, floor)
    assert p >= max(n, floor) and p & (p - 1) == 0
    assert p == floor or p // 2 < n
    assert power_of_two_sizes(n)[-1] == pow2_at_least(n)


@given(st.data())
def test_row_blocks_cover_exactly_the_attended_blocks(data):
    bs = data.draw(st.sampled_from([1, 4, 16]))
    ctx = data.draw(st.integers(1, 200))
    window = data.draw(st.one_of(st.none(), st.integers(1, 64)))
    table = list(range(100, 100 + -(-ctx // bs)))
    start = max(ctx - window, 0) if window else 0
    first, last = start // bs, (ctx - 1) // bs
    partial, full = _row_blocks(table, first, last, start - first * bs, ctx - last * bs, bs)
    assert sorted(partial + full) == table[first:last + 1]
    assert len(partial) <= 2 and not set(partial) & set(full)
    keys = set(range(start, ctx))
    for b in full:  # a full block: every key in it is attended
        logical = table.index(b)
        assert set(range(logical * bs, (logical + 1) * bs)) <= keys


def test_cuda_graphs_refused_on_a_cpu():
    with pytest.raises(ValueError, match=r"^CUDA graphs need a CUDA device; this backend runs on cpu"):
        FastPath("paged", cuda_graphs=True).check(torch.device("cpu"))
    with pytest.raises(ValueError, match="attention='paged'"):
        FastPath("gather", cuda_graphs=True).check(torch.device("cuda"))
    with pytest.raises(ValueError, match="unknown attention"):
        FastPath("flash").check(torch.device("cpu"))
    assert FastPath.fast(torch.device("cpu")) == FastPath("paged", True, False, one_row=True)


def test_a_graphs_decode_mask_follows_its_refilled_tensors():
    """A CUDA graph keeps one block mask per size and refills its tensors each step: the
    mask (indices and mask function) must then read the new step, as one built fresh."""
    from batchlab.backend.fast.paged_flex import DecodeMask, plan_decode
    cpu = torch.device("cpu")
    first = plan_decode([(20, [3, 4])], 16, 12, cpu, padded=4)
    later = plan_decode([(5, [7]), (40, [1, 9, 2])], 16, 12, cpu, padded=4)
    kept = DecodeMask.of(first.arrays(8), cpu)
    mask = kept.block_mask(16, 12)
    kept.fill(later.arrays(8))
    fresh = later.block_mask(8)
    for a, b in ((mask.kv_num_blocks, fresh.kv_num_blocks), (mask.kv_indices, fresh.kv_indices),
                 (mask.full_kv_num_blocks, fresh.full_kv_num_blocks),
                 (mask.full_kv_indices, fresh.full_kv_indices)):
        assert torch.equal(a, b)
    b = torch.arange(4)[:, None]
    kv = torch.arange(12 * 16)[None, :]
    zero = torch.zeros((), dtype=torch.int64)
    assert torch.equal(mask.mask_mod(b, zero, zero, kv), fresh.mask_mod(b, zero, zero, kv))

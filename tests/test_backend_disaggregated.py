"""Disaggregation on the real backend (backend/disaggregated): a prefill engine and a
decode engine in one process, the prompt's KV blocks copied between their pools. Greedy
outputs equal transformers' generate token for token: the KV that landed is the KV the
prefill computed, and the decode engine ran on from it."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.disaggregated.handoff import land, stage  # noqa: E402
from batchlab.backend.disaggregated.pools import run_pools  # noqa: E402
from batchlab.backend.kv_cache import PagedKVCache  # noqa: E402
from batchlab.core.config import SchedulerConfig  # noqa: E402
from tests.test_backend_oracle import W_MIXED, _reference  # noqa: E402


@pytest.fixture(scope="module")
def reference(tiny):
    return _reference(tiny.hf, tiny.spec.vocab_size, W_MIXED)


@pytest.mark.parametrize("policy, blocks", [("continuous", 200), ("chunked", 200), ("continuous", 30)])
def test_pools_reply_as_transformers_generate(hf_runtime, reference, policy, blocks):
    """30 decode blocks of 4 tokens are fewer than the mix needs at once: the decode
    pool waits for blocks, preempts and recomputes, and still replies the same."""
    sc = SchedulerConfig(policy=policy, block_size=4, max_num_batched_tokens=32 if policy == "chunked" else None)
    run = run_pools(hf_runtime, W_MIXED, sc, prefill_blocks=200, decode_blocks=blocks)
    assert run.outputs == reference
    assert (run.decode_preemptions > 0) == (blocks < 200)
    multi = [i for i, n in enumerate(W_MIXED.output_len) if n > 1]
    assert run.handoffs == len(multi) and not run.rejected
    spec = hf_runtime.spec
    per_token = 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 4  # float32 K and V
    padded = sum(-(-int(W_MIXED.prompt_len[i]) // 4) * 4 for i in multi)
    assert run.kv_bytes == padded * per_token


def test_staged_kv_lands_bit_for_bit(tiny):
    src = PagedKVCache(tiny.spec, 8, 4)
    dst = PagedKVCache(tiny.spec, 8, 4)
    src.pool.copy_(torch.randn_like(src.pool))
    kv = stage(src, [5, 2, 7], 10)  # 10 tokens: 3 blocks
    src.pool.zero_()  # the prefill pool's blocks reused: the staged copy is its own
    land(dst, kv, [1, 6, 3])
    assert torch.equal(dst.pool[:, :, :, [1, 6, 3]], kv.blocks)
    assert not dst.pool[:, :, :, [0, 2, 4, 5, 7]].any()
    with pytest.raises(RuntimeError, match="cannot take 3 staged blocks"):
        land(dst, kv, [1, 6])

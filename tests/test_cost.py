"""Roofline cost model and presets against published figures."""
from __future__ import annotations

import pytest

from batchlab.core.batch import Batch, StepFeatures, step_features
from batchlab.core.cost.dispatch import kv_capacity_blocks, roofline
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.request import Request, Sequence
from batchlab.core.model.presets import lookup_hardware, lookup_model


@pytest.mark.parametrize("name,billions", [("llama-2-7b", 6.74), ("llama-2-13b", 13.02),
                                           ("llama-2-70b", 68.98), ("llama-3-8b", 8.03),
                                           ("mistral-7b", 7.24), ("qwen2.5-7b", 7.62)])
def test_parameter_counts_match_published(name, billions):
    assert lookup_model(name).params / 1e9 == pytest.approx(billions, rel=0.005)


def test_kv_bytes_per_token_llama3_8b():
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB
    assert lookup_model("llama-3-8b").kv_bytes_per_token == 131072


def decode_features(batch: int, context: int) -> StepFeatures:
    return StepFeatures(num_seqs=batch, decode_tokens=batch, kv_tokens_read=batch * (context + 1),
                        attention_pairs=batch * (context + 1))


def test_decode_is_memory_bound_so_batching_is_nearly_free():
    cost = roofline(lookup_model("llama-3-8b"), lookup_hardware("a100-80gb"))
    t1, t8 = cost.step_time(decode_features(1, 512)), cost.step_time(decode_features(8, 512))
    # Every weight but the embedding table (gathered row by row) is streamed once.
    weights_time = (8.03e9 - 128256 * 4096) * 2 / 2.039e12
    assert t1 == pytest.approx(weights_time, rel=0.02)
    assert t8 < 1.1 * t1  # 8x the tokens for under 10% more time


def test_large_prefill_is_compute_bound():
    cost = roofline(lookup_model("llama-3-8b"), lookup_hardware("h100-sxm"))
    f = StepFeatures(num_seqs=1, num_prefill_seqs=1, prefill_tokens=4096,
                     kv_tokens_read=4096, attention_pairs=4096 * 4097 // 2)
    flops = lookup_model("llama-3-8b").flops_per_token * 4096 + \
        lookup_model("llama-3-8b").attention_flops_per_pair * f.attention_pairs
    assert cost.step_time(f) == pytest.approx(flops / 989e12, rel=1e-9)


def test_tensor_parallel_splits_work_and_adds_communication():
    m, hw = lookup_model("llama-2-70b"), lookup_hardware("h100-sxm")
    t4 = roofline(m, hw, tensor_parallel=4).step_time(decode_features(8, 512))
    t8 = roofline(m, hw, tensor_parallel=8).step_time(decode_features(8, 512))
    assert t8 < t4 < 2 * 68.98e9 * 2 / 3.35e12 / 4 + 0.01


def test_kv_capacity_from_memory_left_after_weights():
    m, hw = lookup_model("llama-3-8b"), lookup_hardware("a100-80gb")
    blocks = kv_capacity_blocks(m, hw, 1, 16, memory_utilization=0.9)
    expected = (80 * 2**30 * 0.9 - m.weight_bytes) / (131072 * 16)
    assert blocks == int(expected)


def test_tensor_parallel_beyond_the_kv_heads_replicates_them():
    m, hw = lookup_model("llama-3-70b"), lookup_hardware("h100-sxm")  # 64 heads, 8 KV heads
    weights = m.weight_bytes
    free8, free16 = (tp * hw.memory_bytes * 0.9 - weights for tp in (8, 16))
    # tp=16: each GPU holds one KV head's share, so a token takes twice its bytes.
    assert kv_capacity_blocks(m, hw, 16, 16) == int(free16 // (2 * m.kv_bytes_per_token * 16))
    assert kv_capacity_blocks(m, hw, 8, 16) == int(free8 // (m.kv_bytes_per_token * 16))
    # Each GPU still reads one KV head per token: no faster than at tp=8.
    assert roofline(m, hw, 16).kv_bytes_per_token == roofline(m, hw, 8).kv_bytes_per_token
    for tp in (3, 5, 12):  # 3: splits no head count; 12: splits 64 heads unevenly
        with pytest.raises(ValueError, match="does not split"):
            kv_capacity_blocks(m, hw, tp, 16)


def test_model_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match="leaves no KV memory"):
        kv_capacity_blocks(lookup_model("llama-2-70b"), lookup_hardware("l4"), 1, 16)


def test_step_features_of_a_mixed_batch():
    s_dec = Sequence(Request(0, 0.0, prompt_len=10, output_len=5))
    s_dec.num_computed, s_dec.num_generated = 11, 2  # 12 known: decoding token 12
    s_pre = Sequence(Request(1, 0.0, prompt_len=100, output_len=5))
    s_pre.num_computed = 40  # a chunk of 30 after 40 cached
    b = Batch()
    b.add(s_dec, 1)
    b.add(s_pre, 30)
    f = step_features(b)
    assert (f.num_seqs, f.num_prefill_seqs, f.prefill_tokens, f.decode_tokens) == (2, 1, 30, 1)
    assert f.kv_tokens_read == 12 + 70
    assert f.attention_pairs == 12 + (30 * 40 + 30 * 31 // 2)
    assert f.masked_pairs == 30 * 29 // 2  # the chunk's rectangle beyond causal; the decode has none


def test_masked_pairs_of_a_first_chunk_are_its_diagonal_tiles():
    """A first chunk runs is_causal, whose kernel skips the key tiles above the diagonal;
    a later chunk's explicit mask skips nothing."""
    from batchlab.core.features import MASK_TILE, masked_pairs
    t = MASK_TILE
    assert masked_pairs(t) == masked_pairs(t, cached=7) == t * (t - 1) // 2
    assert masked_pairs(2 * t + 100) == 2 * (t * (t - 1) // 2) + 100 * 99 // 2
    assert masked_pairs(2 * t + 100, cached=1) == (2 * t + 100) * (2 * t + 99) // 2
    assert masked_pairs(1) == masked_pairs(1, cached=50) == 0


def test_linear_model_rejects_unknown_features():
    with pytest.raises(ValueError, match="unknown cost features"):
        LinearCostModel(0.0, {"batch": 1.0})


@pytest.mark.parametrize("tp", [1, 4])
def test_decode_run_forms_equal_step_time_exactly(tp):
    """The fast-forward prices decode runs with these; stepping uses step_time."""
    cost = roofline(lookup_model("llama-3-70b"), lookup_hardware("h100-sxm"), tp, 0.8, 0.6, 0.002)
    for n, kv0, m in ((1, 17, 5), (37, 40_000, 60), (300, 2_000_000, 9)):
        slow = [cost.step_time(StepFeatures(n, 0, 0, n, kv, kv)) for kv in range(kv0, kv0 + m * n, n)]
        assert cost.decode_times(n, kv0, m) == slow
        assert cost.decode_run_times(StepFeatures(n, 0, 0, n, kv0, kv0), m).tolist() == slow

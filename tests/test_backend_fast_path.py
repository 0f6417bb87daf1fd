"""The fast path (backend/fast/) against the reference path: attention that reads the KV
pool in place (FlexAttention, compiled) and fused elementwise kernels give the same greedy
tokens as the gather path and as transformers, token for token, through batching, chunked
prefills and preemption, on the dense, mixture-of-experts and sliding-window test models;
their logits agree within float32 rounding. Compiling costs seconds per shape on a CPU,
so one KV pool shape and one small workload serve each model."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from tests.test_backend_oracle import W_MIXED, _reference, _serve
from batchlab.backend.attention import build_metadata, inplace_attention, paged_attention
from batchlab.backend.fast.options import FastPath
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.models import build_preset
from batchlab.backend.runtime import Runtime
from batchlab.core.model.presets import MODELS

# float32 logits of the same step, fast against reference: the kernels sum in another
# order (flex's blockwise softmax, fused norms), so they agree to rounding of the
# logits' scale, not bit for bit.
LOGIT_RTOL = 1e-4
POOL = 40  # blocks of 4 tokens: the 8 requests need more, so the runs preempt
FAST = FastPath("paged", fuse=True)


def fast_runtime(model) -> Runtime:
    rt = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1, fast=FAST)
    rt.runner.fused.min_rows = 1  # the fused kernels on every step, not only large ones
    rt.runner.inplace_min_bytes = 0  # attention in place on every step, as on a GPU
    rt.runner.inplace_prefill = True
    return rt


@pytest.fixture(scope="module", params=["batchlab-tiny", "batchlab-tiny-moe", "batchlab-tiny-swa"])
def model(request):
    torch.set_num_threads(1)
    return build_preset(request.param, seed=0)


@pytest.fixture(scope="module")
def reference(model):
    return _reference(model.hf, model.spec.vocab_size, W_MIXED)


@pytest.fixture(scope="module")
def fast(model):
    return fast_runtime(model)


def test_greedy_tokens_equal_the_reference(model, fast, reference):
    out, res = _serve(fast, W_MIXED, policy="continuous", block_size=4, num_kv_blocks=POOL)
    assert out == reference
    assert res.steps["num_seqs"].max() > 1


def test_chunked_prefill_and_preemption(fast, reference):
    out, res = _serve(fast, W_MIXED, policy="chunked", block_size=4, num_kv_blocks=POOL,
                      max_num_batched_tokens=16)
    assert out == reference
    assert res.requests["preemptions"].sum() > 0
    mixed = (res.steps["num_prefill_seqs"] > 0) & (res.steps["decode_tokens"] > 0)
    assert mixed.any()


def test_logits_of_a_mixed_step_agree(model, fast):
    """One step of decodes at several lengths and prefill chunks (one fresh, two later
    chunks), on the same cache contents: fast and reference logits agree."""
    ref_rt = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1)
    cache = PagedKVCache(model.spec, POOL, 4)
    torch.manual_seed(1)
    cache.pool.normal_()
    tables = [list(range(a, b)) for a, b in ((0, 3), (3, 9), (9, 10), (10, 20), (20, 28), (28, 40))]
    decodes = [(2, tables[2]), (5, tables[0]), (21, tables[1])]  # sorted by position
    prefills = [(0, 30, tables[3]), (17, 12, tables[4]), (40, 6, tables[5])]
    rows = 3 + 30 + 12 + 6
    ids = torch.randint(0, model.spec.vocab_size, (rows,))
    pos = torch.cat([torch.tensor([2, 5, 21]), torch.arange(0, 30), torch.arange(17, 29), torch.arange(40, 46)])
    sample = torch.tensor([0, 1, 2, 32, 44, 50])
    saved = cache.pool.clone()
    want = ref_rt.runner.forward(ids, pos, build_metadata(decodes, prefills, cache), cache, sample, 45)
    cache.pool.copy_(saved)
    got = fast.runner.forward(ids, pos, fast.runner.metadata(decodes, prefills, cache), cache, sample, 45)
    scale = want.abs().max()
    assert (got - want).abs().max() <= LOGIT_RTOL * scale
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_attention_reads_the_pool_in_place():
    """The in-place kernel against the gather, windowed or not, on scattered blocks."""
    spec = MODELS["batchlab-tiny"]
    cache = PagedKVCache(spec, POOL, 4)
    torch.manual_seed(2)
    cache.pool.normal_()
    order = torch.randperm(POOL).tolist()
    decodes = [(0, order[0:1]), (6, order[1:3]), (13, order[3:7])]
    prefills = [(8, 20, order[7:14]), (0, 9, order[14:17])]
    T = 3 + 20 + 9
    q = torch.randn(T, spec.num_heads, spec.head_dim)
    k, v = torch.randn(2, T, spec.num_kv_heads, spec.head_dim)
    saved = cache.pool.clone()
    for window in (None, 5):
        cache.pool.copy_(saved)
        want = paged_attention(0, q, k, v, build_metadata(decodes, prefills, cache), cache, window)
        cache.pool.copy_(saved)
        got = inplace_attention(0, q, k, v, build_metadata(decodes, prefills, cache, "paged"), cache, window)
        assert (got - want).abs().max() < 1e-5


def test_cpu_defaults_read_in_place_only_where_it_pays(model):
    """On a CPU the fast path's defaults: decode rows in place from 16 MiB gathered a layer
    (their fixed cost beats the gather below it), later prefill chunks gathered."""
    runner = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1, fast=FAST).runner
    per_token = 2 * model.spec.num_kv_heads * model.spec.head_dim * 4  # K and V, float32, a layer
    ctx = (16 << 20) // per_token // 64 + 1  # 64 rows at this context gather just over 16 MiB
    cache = PagedKVCache(model.spec, 64 * (ctx // 16 + 1), 16)
    table = list(range(ctx // 16 + 1))
    small = runner.metadata([(100, table)] * 4, [], cache)
    large = runner.metadata([(ctx - 1, table)] * 64, [(64, 32, table)], cache)
    assert small.layout == "gather" and small.paged_decode is None
    assert large.layout == "paged" and large.paged_decode.rows == 64
    assert large.prefills[0].paged is None  # the later chunk still gathers on a CPU
    fresh = runner.metadata([(ctx - 1, table)] * 63, [], cache)  # just under 16 MiB
    assert fresh.layout == "gather"

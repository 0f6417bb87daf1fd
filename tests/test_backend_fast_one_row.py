"""The one-row decode (backend/fast/one_row.py): a step of one decoding sequence by its
own few-op forward, its work between GEMMs in C where a compiler is found (the native
variant) or in torch ops (the fallback). Both give transformers' greedy tokens token for
token on the dense, mixture-of-experts and sliding-window test models, and one step's
logits and written K/V agree with the reference path's within float32 rounding."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from tests.test_backend_oracle import W_MIXED, _serve
from tests.test_backend_fast_path import model, reference  # noqa: F401  the same three models, reference tokens
from batchlab.backend.attention import build_metadata
from batchlab.backend.fast.one_row import OneRowDecode, OneRowMeta
from batchlab.backend.fast.options import FastPath
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.runtime import Runtime

LOGIT_RTOL = 1e-4  # as tests/test_backend_fast_path.py: the kernels sum in another order
POOL = 48  # blocks of 4 tokens
# whole: one C call a step (dense models; tiny-moe takes "native"'s path); native: the
# work between GEMMs in C, the GEMMs in torch; torch: torch ops only
VARIANTS = ["whole", "native", "torch"]


def one_row_runtime(model, variant: str) -> Runtime:
    rt = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1, fast=FastPath(one_row=True))
    if variant == "torch":
        rt.runner._one_row = OneRowDecode(rt.runner, native=False)
    elif variant == "native":
        rt.runner._one_row = OneRowDecode(rt.runner, whole=False)
    elif shutil.which("cc") or shutil.which("gcc"):
        assert rt.runner._one_row.lib is not None  # a compiler is here: the C functions run
        assert (rt.runner._one_row.whole is not None) == (not rt.runner.has_moe)
    return rt


@pytest.mark.parametrize("variant", VARIANTS)
def test_greedy_tokens_equal_transformers(model, reference, variant):
    """One sequence at a time: every decode step is a one-row step."""
    rt = one_row_runtime(model, variant)
    out, res = _serve(rt, W_MIXED, policy="continuous", block_size=4, max_num_seqs=1)
    assert out == reference
    assert (res.steps["num_seqs"] == 1).all() and (res.steps["decode_tokens"] == 1).sum() > 100


@pytest.mark.parametrize("variant", VARIANTS)
def test_beside_batched_steps(model, reference, variant):
    """Many sequences, preempted: one-row steps only where one sequence is left."""
    rt = one_row_runtime(model, variant)
    out, res = _serve(rt, W_MIXED, policy="chunked", block_size=4, num_kv_blocks=40,
                      max_num_batched_tokens=16)
    assert out == reference
    assert res.requests["preemptions"].sum() > 0 and (res.steps["num_seqs"] == 1).any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_written_kv_agree(model, variant):
    """Scattered blocks, positions at a block's start, middle and past a window: the
    one-row step against the reference step on the same cache contents."""
    ref = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1).runner
    fast = one_row_runtime(model, variant).runner
    cache = PagedKVCache(model.spec, POOL, 4)
    torch.manual_seed(3)
    cache.pool.normal_()
    saved = cache.pool.clone()
    table = torch.randperm(POOL).tolist()
    for position in (0, 5, 8, 47, 150):
        tok = torch.tensor([position % model.spec.vocab_size])
        pos, sample = torch.tensor([position]), torch.tensor([0])
        cache.pool.copy_(saved)
        want = ref.forward(tok, pos, build_metadata([(position, table)], [], cache), cache, sample, position)
        want_pool = cache.pool.clone()
        cache.pool.copy_(saved)
        meta = fast.metadata([(position, table)], [], cache)
        assert isinstance(meta, OneRowMeta)
        got = fast.forward(tok, pos, meta, cache, sample, position)
        assert (got - want).abs().max() <= LOGIT_RTOL * want.abs().max()
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        assert (cache.pool - want_pool).abs().max() < 1e-4


def test_other_steps_keep_the_general_forward(model):
    """Two decode rows, or a prefill, are not one-row steps."""
    runner = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1,
                     fast=FastPath(one_row=True)).runner
    cache = PagedKVCache(model.spec, POOL, 4)
    assert not isinstance(runner.metadata([(5, [0, 1]), (6, [2, 3])], [], cache), OneRowMeta)
    assert not isinstance(runner.metadata([], [(0, 6, [0, 1])], cache), OneRowMeta)
    assert not isinstance(runner.metadata([(5, [0, 1])], [(0, 2, [2])], cache), OneRowMeta)


def test_dense_weights_kept_only_for_the_whole_step(model):
    """The reference path keeps oneDNN's packed weights alone; the one-row decode's C step
    keeps dense ones beside them, equal to the model's."""
    ref = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1).runner
    fast = one_row_runtime(model, "whole").runner
    if ref.matmul == "onednn":
        assert ref.lm_head.dense is None and all(lw.o.dense is None for lw in ref.layers)
    if fast._one_row.whole is not None:
        hf = model.hf.model.layers[0]
        assert torch.equal(fast.layers[0].o.dense, hf.self_attn.o_proj.weight)
        q = hf.self_attn.q_proj.weight
        assert torch.equal(fast.layers[0].qkv.dense[:q.shape[0]], q)
        assert torch.equal(fast.lm_head.dense, model.hf.lm_head.weight)

"""Prefix caching on the real backend: cached blocks are reused, not recomputed (the
scheduler's block tables map them onto the pool), greedy output still equals
transformers' generate token for token, and the real run hits where the simulation does."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.backend.prompt_ids import request_prompt
from batchlab.core.config import SchedulerConfig
from batchlab.core.cost.linear import LinearCostModel
from batchlab.core.workload import Workload
from batchlab.sim import simulate

# Eight requests over three documents: shared leading 4-token hash blocks, own tails.
PROMPTS = [23, 30, 17, 41, 26, 12, 33, 29]
OUTPUTS = [9, 14, 6, 11, 20, 7, 12, 5]
DOCS = [0, 0, 1, 0, 1, 2, 0, 1]
SHARED = [5, 7, 4, 10, 6, 3, 8, 2]  # leading hash blocks taken from the document


def _hashes(i: int) -> tuple[int, ...]:
    n = -(-PROMPTS[i] // 4)
    return tuple(DOCS[i] * 100 + j if j < SHARED[i] else 10_000 + i * 100 + j for j in range(n))


W = Workload(np.zeros(8), PROMPTS, OUTPUTS, prefix_hashes=[_hashes(i) for i in range(8)],
             hash_block_size=4)


@pytest.fixture(scope="module")
def reference(tiny):
    ref = {}
    for i in range(len(W)):
        ids = torch.from_numpy(request_prompt(W.request(i), tiny.spec.vocab_size))[None]
        out = tiny.hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=OUTPUTS[i], pad_token_id=0)
        ref[i] = out[0, ids.shape[1]:].tolist()
    return ref


def _serve(hf_runtime, **sched):
    outputs: dict[int, list[int]] = {}
    cfg = SchedulerConfig(block_size=4, max_num_seqs=2, prefix_caching=True, **sched)
    res = run_workload(hf_runtime, W, cfg, time_scale=0.0, progress=False, outputs=outputs)
    assert (res.requests["status"] == "finished").all()
    return outputs, res, cfg


def test_equal_hashes_give_equal_tokens():
    a, b = W.request(0), W.request(1)
    shared = min(SHARED[0], SHARED[1]) * 4
    va, vb = request_prompt(a, 1000), request_prompt(b, 1000)
    assert np.array_equal(va[:shared], vb[:shared]) and not np.array_equal(va[shared:shared + 4],
                                                                           vb[shared:shared + 4])


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_cached_blocks_are_reused_and_output_matches_generate(hf_runtime, reference, policy):
    out, res, cfg = _serve(hf_runtime, policy=policy, max_num_batched_tokens=64)
    assert out == reference
    s = res.summary()
    assert s["prefix_cache_hits"] > 0 and res.requests["preemptions"].sum() == 0
    # A cached block is not recomputed: the steps computed every prompt token but the hits.
    assert res.steps["prefill_tokens"].sum() == sum(PROMPTS) - s["prefix_cache_hits"]
    # The same schedule in the simulator finds the same hits, request by request.
    sim = simulate(W, cfg, LinearCostModel(0.01), res.meta.num_kv_blocks)
    assert np.array_equal(sim.requests["cached_tokens"], res.requests["cached_tokens"])
    assert np.array_equal(sim.steps["cached_blocks"], res.steps["cached_blocks"])


def test_sharing_a_prefix_with_a_preempted_request(hf_runtime, reference):
    # 16 blocks of 4 tokens for two seats: decoding outgrows the pool, sequences are
    # preempted while others reuse (and they themselves recompute from) shared blocks.
    out, res, cfg = _serve(hf_runtime, policy="chunked", num_kv_blocks=16, max_num_batched_tokens=32)
    assert res.requests["preemptions"].sum() > 0 and res.summary()["prefix_cache_hits"] > 0
    assert out == reference
    sim = simulate(W, cfg, LinearCostModel(0.01), 16)
    assert np.array_equal(sim.requests["cached_tokens"], res.requests["cached_tokens"])
    assert np.array_equal(sim.requests["preemptions"], res.requests["preemptions"])

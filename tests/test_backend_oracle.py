"""Correctness oracle: on the same weights and prompts, the backend's greedy tokens equal
transformers' generate token for token, whatever the scheduler does to the sequences
(several per step, chunked prefills, recompute preemption, static batches)."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")  # the backend extra; without it the module skips

from batchlab.backend.driver import run_workload
from batchlab.backend.engine import synthetic_prompt
from batchlab.backend.models import build_preset
from batchlab.backend.runtime import Runtime
from batchlab.core.config import SchedulerConfig
from batchlab.core.workload import Workload


def _workload(prompts, outputs, arrivals=None) -> Workload:
    n = len(prompts)
    return Workload(arrival=np.zeros(n) if arrivals is None else arrivals,
                    prompt_len=prompts, output_len=outputs)


def _reference(hf, vocab: int, w: Workload, seed: int = 0) -> dict[int, list[int]]:
    ref = {}
    for i in range(len(w)):
        ids = torch.from_numpy(synthetic_prompt(i, int(w.prompt_len[i]), vocab, seed))[None]
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                          max_new_tokens=int(w.output_len[i]), pad_token_id=0)
        ref[i] = out[0, ids.shape[1]:].tolist()
    return ref


def _serve(hf_runtime, w, **sched):
    outputs: dict[int, list[int]] = {}
    res = run_workload(hf_runtime, w, SchedulerConfig(**sched), time_scale=0.0, progress=False,
                       outputs=outputs)
    assert (res.requests["status"] == "finished").all()
    return outputs, res


def preempted_as_reference(hf_runtime, w, reference, **sched):
    """Served under sched with at least one preemption, every reply still the reference's
    (the recomputed prefix continues as if never evicted)."""
    out, res = _serve(hf_runtime, w, **sched)
    assert res.requests["preemptions"].sum() > 0
    assert out == reference


W_MIXED = _workload([5, 37, 12, 64, 1, 23, 50, 9], [20, 7, 33, 12, 15, 1, 25, 30])


@pytest.fixture(scope="module")
def reference(tiny):
    return _reference(tiny.hf, tiny.spec.vocab_size, W_MIXED)


def test_continuous_many_sequences_per_step(hf_runtime, reference):
    out, res = _serve(hf_runtime, W_MIXED, policy="continuous", block_size=4)
    assert out == reference
    assert res.steps["num_seqs"].max() == len(W_MIXED)  # they really shared steps


def test_chunked_prefill_small_budget(hf_runtime, reference):
    out, res = _serve(hf_runtime, W_MIXED, policy="chunked", block_size=4, max_num_batched_tokens=16)
    assert out == reference
    assert res.steps["prefill_tokens"].max() <= 16
    # chunks that do not start at 0 were run, mixed with decodes
    mixed = (res.steps["num_prefill_seqs"] > 0) & (res.steps["decode_tokens"] > 0)
    assert mixed.any()


def test_preemption_recompute(hf_runtime, reference):
    # 22 blocks of 4 tokens: far fewer than the 8 sequences need together
    preempted_as_reference(hf_runtime, W_MIXED, reference, policy="chunked", block_size=4,
                           num_kv_blocks=22, max_num_batched_tokens=32)


def test_preemption_continuous(hf_runtime, reference):
    preempted_as_reference(hf_runtime, W_MIXED, reference, policy="continuous", block_size=4, num_kv_blocks=24)


def test_static_batches(hf_runtime, reference):
    out, _ = _serve(hf_runtime, W_MIXED, policy="static", block_size=8, max_num_seqs=3)
    assert out == reference


def test_generate_batch_agrees(tiny, hf_runtime):
    """transformers' own continuous batching as a second oracle."""
    from transformers import ContinuousBatchingConfig, GenerationConfig
    w = _workload([6, 30, 17], [10, 10, 10])
    prompts = [synthetic_prompt(i, int(w.prompt_len[i]), tiny.spec.vocab_size).tolist() for i in range(3)]
    gen = GenerationConfig(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    cb = ContinuousBatchingConfig(num_blocks=16, page_size=16, max_batch_tokens=64, max_requests_per_batch=4)
    res = tiny.hf.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb)
    theirs = sorted((r.prompt_ids, r.generated_tokens) for r in res.values())
    out, _ = _serve(hf_runtime, w, policy="continuous", block_size=4)
    ours = sorted((prompts[i], out[i]) for i in range(3))
    assert ours == theirs


@pytest.mark.slow
def test_small_model_realistic_mix_matches_transformers():
    """batchlab-small (125M), 12 requests of 40-300 prompt tokens: chunked prefill with
    a 256-token budget and a pool too small for all of them (preemptions)."""
    model = build_preset("batchlab-small", seed=1)
    rt = Runtime(loaded=model, keep_hf=True, kv_memory="64MiB", threads=1)
    rng = np.random.default_rng(5)
    w = _workload(rng.integers(40, 300, 12), rng.integers(8, 40, 12))
    out, res = _serve(rt, w, policy="chunked", block_size=16, num_kv_blocks=40,
                      max_num_batched_tokens=256)
    assert res.requests["preemptions"].sum() > 0
    assert out == _reference(model.hf, model.spec.vocab_size, w)

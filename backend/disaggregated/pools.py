"""Serve a workload on a prefill engine and a decode engine in one process, offline (every
request queued at once; steps alternate between the engines), under the same scheduler
code as everything else. The prefill engine serves each request to its first token
(core/kv_handoff.py prefill_request); its prompt's KV is staged off the prefill pool and
the request queued on the decode engine with that KV elsewhere; when the decode scheduler
admits it (blocks for the prompt, counted computed), the KV lands in those blocks and the
decode engine runs on from the first token. Greedy outputs equal an aggregated engine's."""
from __future__ import annotations

from dataclasses import dataclass, field

from batchlab.backend.disaggregated.handoff import StagedKV, land, stage
from batchlab.backend.engine import Engine
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.runtime import Runtime
from batchlab.core.batch import Batch
from batchlab.core.config import SchedulerConfig
from batchlab.core.kv_handoff import decode_sequence, prefill_request
from batchlab.core.request import Request, Sequence, Status
from batchlab.core.schedulers import make_scheduler
from batchlab.core.workload import Workload


@dataclass
class PoolsRun:
    outputs: dict[int, list[int]] = field(default_factory=dict)  # by request id
    handoffs: int = 0
    kv_bytes: int = 0  # staged bytes moved between the pools
    prefill_steps: int = 0
    decode_steps: int = 0
    decode_preemptions: int = 0
    rejected: list[int] = field(default_factory=list)


def _engine(runtime: Runtime, blocks: int, block_size: int, seed: int) -> Engine:
    cache = PagedKVCache(runtime.spec, blocks, block_size, runtime.dtype, runtime.device)
    return Engine(runtime.runner, cache, seed=seed, prompt_seed=seed)


def run_pools(runtime: Runtime, workload: Workload, scheduler: SchedulerConfig, prefill_blocks: int,
              decode_blocks: int, seed: int = 0, max_steps: int = 1_000_000) -> PoolsRun:
    bs = scheduler.block_size
    pre_engine, dec_engine = _engine(runtime, prefill_blocks, bs, seed), _engine(runtime, decode_blocks, bs, seed)
    pre, dec = make_scheduler(scheduler, prefill_blocks), make_scheduler(scheduler, decode_blocks)
    originals: dict[int, Request] = {}
    for r in workload.requests():
        originals[r.id] = r
        if pre.add(prefill_request(r), 0.0).status is Status.REJECTED:
            raise ValueError(f"request {r.id}: the prefill pool refuses it")
    out, staged = PoolsRun(), {}
    now = 0.0
    while pre.has_work() or dec.has_work():
        if out.prefill_steps + out.decode_steps >= max_steps:
            raise RuntimeError(f"no end after {max_steps} steps")
        if pre.has_work():
            batch = pre.schedule(now)
            if not batch.is_empty:
                now += 1.0
                pre_engine.execute(batch)
                out.prefill_steps += 1
                prompts_done = _sampling(batch)
                for seq in prompts_done:  # staged before complete() frees their blocks
                    if originals[seq.id].output_len > 1:
                        staged[seq.id] = stage(pre_engine.cache, seq.block_table, seq.request.prompt_len)
                for seq in pre.complete(batch, now):
                    _handed(seq, originals[seq.id], staged, dec, out, now)
                    pre_engine.forget(seq)
        if dec.has_work():
            batch = dec.schedule(now)
            if not batch.is_empty:
                now += 1.0
                for seq in batch.seqs:  # admitted now: its KV lands in the blocks it was given
                    kv = staged.pop(seq.id, None)
                    if kv is not None:
                        first = seq.cached_tokens // bs if dec.prefix_caching else 0
                        land(dec_engine.cache, kv, seq.block_table, first)
                dec_engine.execute(batch)
                out.decode_steps += 1
                for seq in dec.complete(batch, now):
                    out.outputs[seq.id] = list(seq.output_token_ids)
                    dec_engine.forget(seq)
    out.decode_preemptions = dec.num_preemptions
    return out


def _sampling(batch: Batch) -> list[Sequence]:
    """The batch's items that reached the end of their prompt (they sample this step)."""
    return [s for s, start, n in zip(batch.seqs, batch.starts, batch.num_tokens) if start + n == s.known]


def _handed(seq: Sequence, request: Request, staged: dict[int, StagedKV], dec, out: PoolsRun,
            now: float) -> None:
    """A prompt finished on the prefill engine: its one-token reply, or on to decode."""
    if request.output_len == 1:
        out.outputs[seq.id] = list(seq.output_token_ids)
        return
    d = decode_sequence(seq, request)
    d.output_token_ids = list(seq.output_token_ids)
    if dec.add_sequence(d, now).status is Status.REJECTED:
        staged.pop(seq.id, None)
        out.rejected.append(seq.id)
        return
    out.handoffs += 1
    out.kv_bytes += staged[seq.id].nbytes

"""Executes one scheduler Batch for real: build the step's input tensors from the
sequences' token bookkeeping and block tables, run one forward pass, sample.

Token ids of a sequence are its request's prompt ids followed by the tokens sampled so
far (seq.output_token_ids), so a recompute after preemption re-feeds exactly what the
sequence knew. Requests without prompt ids (synthetic workloads) get deterministic ones
from a generator keyed by (prompt_seed, request id), or by their prefix hashes
(backend/prompt_ids.py). A prefix cache hit needs nothing here: the scheduler starts the
sequence at its cached tokens and its block table maps the shared blocks of the pool."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from batchlab.backend.attention import AttentionMetadata
from batchlab.backend.device import synchronize
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.sampling import sample_rows
from batchlab.backend.prompt_ids import request_prompt, synthetic_prompt  # noqa: F401 (re-exported)
from batchlab.core.batch import Batch
from batchlab.core.request import Request, Sequence


@dataclass
class EngineStats:
    """Seconds summed over steps: building inputs, the forward pass with sampling."""
    steps: int = 0
    prepare_s: float = 0.0
    forward_s: float = 0.0


@dataclass
class StepInputs:
    """One forward pass's inputs: token ids and positions [T], attention metadata, the rows
    whose logits are wanted, and which sequence owns them (counts[i] rows of sampling[i],
    in order)."""
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    rows: torch.Tensor
    sampling: list[Sequence]
    counts: list[int]
    max_pos: int


class Engine:
    def __init__(self, runner: ModelRunner, cache: PagedKVCache, temperature: float = 0.0,
                 seed: int = 0, prompt_seed: int = 0) -> None:
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.runner, self.cache = runner, cache
        self.temperature = temperature
        self.prompt_seed = prompt_seed
        self.generator = torch.Generator(device=runner.device).manual_seed(seed)
        self.stats = EngineStats()
        self._prompts: dict[int, np.ndarray] = {}

    # -- token ids ------------------------------------------------------------------
    def prompt_ids(self, request: Request) -> np.ndarray:
        ids = self._prompts.get(request.id)
        if ids is None:
            vocab = self.runner.vocab_size
            if request.prompt_token_ids is not None:
                ids = np.asarray(request.prompt_token_ids, dtype=np.int64)
                if ids.min() < 0 or ids.max() >= vocab:
                    raise ValueError(f"request {request.id}: prompt token id out of range [0, {vocab})")
            else:
                ids = request_prompt(request, vocab, self.prompt_seed)
            self._prompts[request.id] = ids
        return ids

    def forget(self, seq: Sequence) -> None:
        """Drop a finished request's cached prompt ids."""
        self._prompts.pop(seq.id, None)

    def _tokens(self, seq: Sequence, start: int, n: int) -> np.ndarray:
        plen = seq.request.prompt_len
        if start >= plen:
            return np.asarray(seq.output_token_ids[start - plen:start - plen + n], dtype=np.int64)
        prompt = self.prompt_ids(seq.request)
        if start + n <= plen:
            return prompt[start:start + n]
        tail = np.asarray(seq.output_token_ids[:start + n - plen], dtype=np.int64)
        return np.concatenate([prompt[start:], tail])

    # -- one step -------------------------------------------------------------------
    def sampled_rows(self, seq: Sequence, start: int, n: int) -> int:
        """How many of an item's last rows sample a token: its last one where it reaches
        the end of what its sequence knows (a speculative engine samples at its drafts too)."""
        return 1 if start + n == seq.known else 0

    def inputs(self, batch: Batch) -> StepInputs:
        """The step's input tensors, attention metadata and the rows that sample."""
        if self.runner.fast.one_row and len(batch.seqs) == 1 and batch.num_tokens[0] == 1:
            return self._one_row_inputs(batch.seqs[0], batch.starts[0])
        dev = self.runner.device
        one = [i for i, n in enumerate(batch.num_tokens) if n == 1]
        one.sort(key=lambda i: batch.starts[i])  # similar lengths share a decode group
        many = [i for i, n in enumerate(batch.num_tokens) if n > 1]
        order = one + many
        ids, pos_parts, rows, sampling, counts = [], [], [], [], []
        row = 0
        for i in order:
            seq, s, n = batch.seqs[i], batch.starts[i], batch.num_tokens[i]
            if len(seq.block_table) * self.cache.block_size < s + n:
                raise RuntimeError(f"sequence {seq.id}: block table too short for {s + n} tokens")
            ids.append(self._tokens(seq, s, n))
            pos_parts.append(np.arange(s, s + n))
            row += n
            take = self.sampled_rows(seq, s, n)
            if take:
                if len(seq.output_token_ids) != seq.num_generated:
                    raise RuntimeError(f"sequence {seq.id}: {len(seq.output_token_ids)} output ids "
                                       f"but {seq.num_generated} generated")
                rows.extend(range(row - take, row))
                sampling.append(seq)
                counts.append(take)
        meta = self.runner.metadata(
            [(batch.starts[i], batch.seqs[i].block_table) for i in one],
            [(batch.starts[i], batch.num_tokens[i], batch.seqs[i].block_table) for i in many], self.cache)
        positions = np.concatenate(pos_parts)
        return StepInputs(torch.from_numpy(np.concatenate(ids)).to(dev), torch.from_numpy(positions).to(dev),
                          meta, torch.tensor(rows, dtype=torch.int64, device=dev), sampling, counts,
                          int(positions.max()))

    def _one_row_inputs(self, seq: Sequence, s: int) -> StepInputs:
        """inputs() of one decoding sequence, without its lists and concatenations (the
        one-row decode's per-step Python work: backend/fast/one_row.py)."""
        dev = self.runner.device
        if len(seq.block_table) * self.cache.block_size < s + 1:
            raise RuntimeError(f"sequence {seq.id}: block table too short for {s + 1} tokens")
        take = self.sampled_rows(seq, s, 1)
        if take and len(seq.output_token_ids) != seq.num_generated:
            raise RuntimeError(f"sequence {seq.id}: {len(seq.output_token_ids)} output ids "
                               f"but {seq.num_generated} generated")
        meta = self.runner.metadata([(s, seq.block_table)], [], self.cache)
        return StepInputs(torch.from_numpy(self._tokens(seq, s, 1)).to(dev),
                          torch.tensor([s], device=dev), meta,
                          torch.tensor([0] if take else [], dtype=torch.int64, device=dev),
                          [seq] if take else [], [1] if take else [], s)

    def execute(self, batch: Batch) -> float:
        """Run `batch` (before Scheduler.complete) and append each sampled token to its
        sequence's output_token_ids. Returns the step's wall seconds."""
        t0 = time.perf_counter()
        x = self.inputs(batch)
        t1 = time.perf_counter()
        logits = self.runner.forward(x.input_ids, x.positions, x.meta, self.cache, x.rows, x.max_pos)
        tokens = self.sample(logits, x.sampling).tolist() if x.sampling else []
        synchronize(self.runner.device)
        for seq, tok in zip(x.sampling, tokens):
            seq.output_token_ids.append(tok)
        t2 = time.perf_counter()
        self._count(t1 - t0, t2 - t1)
        return t2 - t0

    def _count(self, prepare_s: float, forward_s: float) -> None:
        st = self.stats
        st.steps += 1
        st.prepare_s += prepare_s
        st.forward_s += forward_s

    def sample(self, logits: torch.Tensor, seqs: list[Sequence] | None = None) -> torch.Tensor:
        """One token per row; seqs[i] owns row i (a server samples per request)."""
        return sample_rows(logits, self.temperature, self.generator)

    def warmup(self, tokens: int = 32) -> None:
        """One prefill and one decode on scratch blocks, so one-time costs (thread pools,
        allocator growth, kernel selection) fall before the clock starts. The scratch
        blocks are free at this point and any sequence overwrites them later."""
        bs = self.cache.block_size
        tokens = max(2, min(tokens, self.cache.num_blocks * bs - 1))
        table = list(range(-(-(tokens + 1) // bs)))
        ids = torch.zeros(tokens, dtype=torch.int64, device=self.runner.device)
        for start, n in ((0, tokens), (tokens, 1)):
            meta = (self.runner.metadata([], [(0, n, table)], self.cache) if n > 1
                    else self.runner.metadata([(start, table)], [], self.cache))
            pos = torch.arange(start, start + n, device=self.runner.device)
            self.runner.forward(ids[:n], pos, meta, self.cache,
                                torch.tensor([n - 1], device=self.runner.device), start + n)
        synchronize(self.runner.device)

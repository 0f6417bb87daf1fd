"""Chunked prefill, vLLM-v1 / Sarathi-Serve style.

One token budget per step (max_num_batched_tokens). Running sequences go first, most
protected first: a decode takes its width (one token without drafts, core/emission.py),
an unfinished prefill takes the next chunk that fits the budget left. Then waiting
requests are admitted into free seats with a first chunk, while budget and KV memory
last. Prompt chunks and decodes share a step.
As in vLLM v1, no new request is admitted in a step that had to preempt."""
from __future__ import annotations

from mypy_extensions import mypyc_attr

from batchlab.core.batch import Batch
from batchlab.core.schedulers import register
from batchlab.core.schedulers.base import Scheduler


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: policies may extend it
class ChunkedPrefillScheduler(Scheduler):
    name = "chunked"
    # Compiled, a module keeps no docstring: the listings' line is said here too.
    description = "Chunked prefill, vLLM-v1 / Sarathi-Serve style."
    fast_forward = True  # obeys the contract in base.py
    default_token_budget = 2048

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        budget = self.step_budget
        width = self.decode_width()
        preempted = self._reserve_running(
            batch, lambda seq: min(width if seq.decoding else seq.remaining_prefill,
                                   budget - batch.total_tokens))
        if preempted:
            return batch
        while self._waiting and len(self.running) < self.max_seqs and batch.total_tokens < budget:
            _, whole = self._head_prefill()  # less its cached prefix
            # Admitted only if the whole prompt fits now (as vLLM v0 allocates it): one
            # that fits a first chunk alone is the next victim when decoders grow, and
            # is readmitted into the blocks it just freed, over and over.
            if not self._admit_head(batch, now, min(whole, budget - batch.total_tokens), whole):
                break
        return batch


register(ChunkedPrefillScheduler)  # not as a decorator: mypyc compiles only undecorated classes

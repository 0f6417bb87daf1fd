"""Continuous (iteration-level) batching, Orca / vLLM-v0 style.

Every step: finished sequences have left; if waiting requests fit a free seat, the
token budget (whole prompt) and KV memory, run a prefill-only step admitting them
(prefills first); otherwise run one decode step over all running sequences, preempting
by recompute when KV blocks run out."""
from __future__ import annotations

from mypy_extensions import mypyc_attr

from batchlab.core.batch import Batch
from batchlab.core.request import Request
from batchlab.core.schedulers import register
from batchlab.core.schedulers.base import Scheduler


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled: policies may extend it
class ContinuousScheduler(Scheduler):
    name = "continuous"
    # Compiled, a module keeps no docstring: the listings' line is said here too.
    description = "Continuous (iteration-level) batching, Orca / vLLM-v0 style."
    fast_forward = True  # obeys the contract in base.py
    default_token_budget = 8192

    def reject_reason(self, request: Request) -> str:
        if request.prompt_len > self.step_budget:
            return (f"prompt of {request.prompt_len} tokens exceeds max_num_batched_tokens="
                    f"{self.step_budget} and this policy does not chunk prefills")
        return super().reject_reason(request)

    def schedule(self, now: float) -> Batch:
        batch = self._admit_prefills(now)
        if batch.is_empty:
            width = self.decode_width()
            self._reserve_running(batch, lambda seq: width)
        return batch

    def _admit_prefills(self, now: float) -> Batch:
        batch = Batch()
        budget = self.step_budget
        while self._waiting and len(self.running) < self.max_seqs:
            # Whole prompt (plus generated tokens after a preemption), less its cached prefix.
            _, n = self._head_prefill()
            # A recompute longer than the budget may run alone, or it would never run.
            if n > budget - batch.total_tokens and not batch.is_empty:
                break
            if not self._admit_head(batch, now, n):
                break
        return batch


register(ContinuousScheduler)  # not as a decorator: mypyc compiles only undecorated classes

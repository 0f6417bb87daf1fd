"""Static (request-level) batching: the seed's baseline, as HF `generate` on a batch.

Form a batch of up to max_num_seqs waiting requests (optionally waiting up to
max_batch_delay_s for it to fill), prefill their whole prompts in one step, then decode
until the LAST member finishes. Seats of finished members stay empty meanwhile."""
from __future__ import annotations

from batchlab.core.batch import Batch
from batchlab.core.schedulers import register
from batchlab.core.schedulers.base import Scheduler


@register
class StaticScheduler(Scheduler):
    name = "static"
    fast_forward = True  # obeys the contract in base.py
    admits_while_running = False
    # Request-level batching engines (FasterTransformer, HF generate) keep no cache
    # across batches: off unless [scheduler] prefix_caching = true asks for it.
    prefix_caching_default = False

    def schedule(self, now: float) -> Batch:
        batch = Batch()
        if self.running:
            width = self.decode_width()
            self._reserve_running(batch, lambda seq: width if seq.decoding else seq.remaining_prefill)
            return batch
        if not self._waiting or self._holding(now):
            return batch
        while self._waiting and len(self.running) < self.max_seqs:
            if not self._admit_head(batch, now, self._head_prefill()[1]):
                break
        return batch

    def _oldest_arrival(self) -> float:
        return min(e[2].request.arrival for e in self._waiting)

    def _holding(self, now: float) -> bool:
        """Still waiting for the batch to fill?"""
        delay = self.config.max_batch_delay_s
        return (delay > 0 and len(self._waiting) < self.max_seqs
                and now < self._oldest_arrival() + delay)

    def next_wakeup(self, now: float) -> float | None:
        if not self.running and self._waiting and self._holding(now):
            return self._oldest_arrival() + self.config.max_batch_delay_s
        return None

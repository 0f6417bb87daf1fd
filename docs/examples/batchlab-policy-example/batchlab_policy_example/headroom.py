"""kv_headroom: continuous batching that keeps a share of the KV blocks free.

A waiting prompt is admitted only if, with its blocks taken, at least `headroom` of the
pool stays free, so that running sequences can grow without being preempted. An idle
replica always admits (no livelock)."""
from __future__ import annotations

from pydantic import Field

from batchlab.core.kv import blocks_for
from batchlab.core.params import PolicyParams
from batchlab.core.request import Sequence
from batchlab.core.schedulers.continuous import ContinuousScheduler


class HeadroomParams(PolicyParams):
    headroom: float = Field(0.1, ge=0.0, le=0.9,
                            description="share of the KV blocks to keep free when admitting")


class KVHeadroomScheduler(ContinuousScheduler):
    name = "kv_headroom"
    description = "continuous batching that admits only while a headroom share of the KV blocks stays free"
    Params = HeadroomParams
    fast_forward = True  # KV use only grows in a decode run: a held head stays held

    def holds_back(self, seq: Sequence) -> bool:
        need = blocks_for(seq.request.prompt_len, self.kv.block_size)
        free_after = self.kv.num_blocks - self.kv.num_used - need
        return bool(self.running) and free_after < self.params.headroom * self.kv.num_blocks

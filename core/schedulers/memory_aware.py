"""Memory-aware continuous batching: the worked example of docs/policies.md.

Continuous batching (core/schedulers/continuous.py) that holds back long prompts while
KV memory is busy: a prompt of at least `long_prompt` tokens waits while more than
`kv_threshold` of the KV blocks are in use, so that one long prefill does not fill the
pool and force the running sequences out (preemption by recompute). The queue keeps its
order: nobody overtakes a held-back head, as with any head that does not fit.

Fast-forward: during a run of decode steps KV use only grows, so a head held back stays
held back; the decision reads no clock, and admission still goes through the base
class's _admit_head. So continuous batching's claim still holds, and is made here
again (fast_forward = True: a subclass must make the claim itself, since it may have
changed the very decisions the claim is about)."""
from __future__ import annotations

from pydantic import Field

from batchlab.core.params import PolicyParams
from batchlab.core.request import Sequence
from batchlab.core.schedulers import register
from batchlab.core.schedulers.continuous import ContinuousScheduler


class MemoryAwareParams(PolicyParams):
    long_prompt: int = Field(512, ge=1, le=131072,
                             description="prompts of at least this many tokens are long")
    kv_threshold: float = Field(0.8, ge=0.0, le=1.0,
                                description="hold long prompts back while more than this "
                                            "fraction of the KV blocks is in use")


@register
class MemoryAwareScheduler(ContinuousScheduler):
    name = "memory_aware"
    description = ("continuous batching that holds back prompts of >= long_prompt tokens "
                   "while KV use is above kv_threshold")
    Params = MemoryAwareParams
    fast_forward = True  # KV use only grows in a decode run: a held head stays held

    def holds_back(self, seq: Sequence) -> bool:
        p = self.params
        busy = self.kv.num_used > p.kv_threshold * self.kv.num_blocks
        # Only while something runs: an idle replica always admits (no livelock).
        return bool(self.running) and busy and seq.request.prompt_len >= p.long_prompt

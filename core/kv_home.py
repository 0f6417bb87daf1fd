"""Where a sequence's computed KV lives: the one place that says it.

A running sequence's KV lives in its replica's blocks (Sequence.block_table). Taken off
the replica (preempted), it lives nowhere: batchlab's engines drop it and recompute it
when the sequence runs again (vLLM's default). A second tier (CPU memory, local disk:
swapping) or another replica (a prefill pool handing a request to a decode pool) keeps
computed KV elsewhere instead; the sequence must then load it into this replica's blocks
before it runs again, which costs the link's time, not the model's. That is a new
KVHome, not a change to the scheduler or the simulator, which read it from here:

    evicted(seq)        tokens of seq's computed KV kept elsewhere when it is preempted
                        (0: dropped, recomputed)
    load_seconds(n)     what moving n tokens' KV into this replica's blocks costs

Sequence.kv_elsewhere counts the tokens a waiting sequence holds elsewhere (a hand-off
sets it on arrival; evicted() on preemption). Admission gives it blocks for them, counts
them computed without running them, and the step that admits it carries them in
Batch.kv_loaded, priced by load_seconds on top of the cost model's step time."""
from __future__ import annotations

from mypy_extensions import mypyc_attr

from batchlab.core.request import Sequence


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py): other homes extend it
class KVHome:
    """KV lives in the replica's blocks or nowhere: a preempted sequence recomputes."""

    def evicted(self, seq: Sequence) -> int:
        """Tokens of `seq`'s computed KV (seq.num_computed) kept elsewhere as it is
        preempted: none, it is dropped."""
        return 0

    def load_seconds(self, tokens: int) -> float:
        """Seconds to move `tokens` tokens' KV into this replica's blocks: nothing is
        ever elsewhere to load."""
        return 0.0


RECOMPUTE = KVHome()

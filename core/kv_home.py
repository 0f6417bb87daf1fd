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
    save_seconds(n)     what moving n tokens' KV out as they are preempted costs (the
                        step that preempts pays it: Batch.kv_saved)

A home with a tier of its own (core/kv_tiers/) sets `tiered`, and the scheduler then
tells it more: loaded(seq, n) as a sequence's KV comes back, and, with prefix caching,
keep(key, blocks) for each unit the GPU evicts and prefix_tokens(...) to look a prefix up
past the GPU's cache (tokens it can load). Untiered homes are never asked.

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

    def save_seconds(self, tokens: int) -> float:
        """Seconds to move `tokens` tokens' KV out of this replica's blocks as they are
        preempted: nothing is kept."""
        return 0.0

    # -- asked only of a home that sets `tiered` (core/kv_tiers/) ------------------------
    tiered: bool = False
    holds_prefixes: bool = False

    def loaded(self, seq: Sequence, tokens: int) -> None:
        """`seq` is admitted with `tokens` tokens of KV loaded from here (0: its KV here,
        if any, was not needed): whatever it kept here is released."""

    def prefix_tokens(self, keys: tuple[int, ...], start: int, limit: int, span: int) -> int:
        """Tokens of the prefix keys[:m] loadable from here, where units start..m-1
        (m <= limit) are all here (0 if none): the scheduler looks past its cache."""
        return 0

    def keep(self, key: int, blocks: int) -> None:
        """The GPU evicted cached unit `key` of `blocks` blocks: keep it here if it fits."""


RECOMPUTE = KVHome()

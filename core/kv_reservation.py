"""KV allocation modes (SchedulerConfig.kv_allocation), as admission control over the
block manager's pool.

paged: blocks are taken as tokens arrive (vLLM's PagedAttention); when the pool runs
out, a running sequence is preempted.
reserved: a request is admitted only if its whole budget, prompt + output - 1 tokens,
fits beside the budgets of every running sequence (TensorRT-LLM's GUARANTEED_NO_EVICT;
the memory Orca and FasterTransformer reserve contiguously per sequence). Blocks are
still handed out as tokens arrive, but the pool can always cover every running
sequence to its end, so nothing is ever preempted. The bookkeeping is a sum of
budgets, so it costs the same whatever the pool's size, and it uses the BlockManager
only through its public size."""
from __future__ import annotations

from batchlab.core.kv import BlockManager, blocks_for
from batchlab.core.request import Sequence

KV_ALLOCATIONS = ("paged", "reserved")


class Paged:
    """No reservation: admission asks only whether this step's blocks are free."""
    blocks = 0  # blocks reserved beyond those in use: none

    def fits(self, seq: Sequence) -> bool:
        return True

    def hold(self, seq: Sequence) -> None:
        pass

    def release(self, seq: Sequence) -> None:
        pass


class Reserved(Paged):
    def __init__(self, kv: BlockManager) -> None:
        self.kv = kv
        self.blocks = 0  # sum of the running sequences' whole budgets, in blocks

    def budget(self, seq: Sequence) -> int:
        return blocks_for(seq.request.max_kv_tokens, self.kv.block_size)

    def fits(self, seq: Sequence) -> bool:
        return self.blocks + self.budget(seq) <= self.kv.num_blocks

    def hold(self, seq: Sequence) -> None:
        self.blocks += self.budget(seq)

    def release(self, seq: Sequence) -> None:
        self.blocks -= self.budget(seq)


def make_reservation(mode: str, kv: BlockManager) -> Paged:
    if mode == "paged":
        return Paged()
    if mode == "reserved":
        return Reserved(kv)
    raise ValueError(f"unknown kv_allocation {mode!r}; expected one of {', '.join(KV_ALLOCATIONS)}")

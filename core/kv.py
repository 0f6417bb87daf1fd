"""KV-cache block accounting. The block table the scheduler keeps per sequence is the
physical layout a real backend uses: block ids index its KV pool directly."""
from __future__ import annotations


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class BlockManager:
    """A pool of `num_blocks` fixed-size blocks of `block_size` token slots.

    Free blocks are kept as a stack so allocation order is deterministic."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def blocks_needed(self, block_table: list[int], tokens: int) -> int:
        """Extra blocks a table must gain to hold `tokens` token slots."""
        return max(0, blocks_for(tokens, self.block_size) - len(block_table))

    def can_grow(self, block_table: list[int], tokens: int) -> bool:
        return self.blocks_needed(block_table, tokens) <= len(self._free)

    def grow(self, block_table: list[int], tokens: int) -> None:
        """Extend `block_table` in place so it holds `tokens` slots."""
        need = self.blocks_needed(block_table, tokens)
        if need:
            block_table.extend(self.take(need))

    def take(self, n: int) -> list[int]:
        """Hand out n blocks, in the order n single grows would."""
        if n > len(self._free):
            raise RuntimeError(f"KV pool exhausted: need {n} blocks, {len(self._free)} free")
        out = self._free[len(self._free) - n:][::-1]
        del self._free[len(self._free) - n:]
        return out

    def free(self, block_table: list[int]) -> None:
        """Return a table's blocks to the pool and empty the table."""
        self._free.extend(reversed(block_table))
        block_table.clear()

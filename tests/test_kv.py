import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchlab.core.kv import BlockManager, blocks_for


def test_blocks_for_rounds_up():
    assert [blocks_for(t, 16) for t in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_grow_and_free_conserve_blocks():
    kv = BlockManager(num_blocks=10, block_size=4)
    a, b = [], []
    kv.grow(a, 9)  # 3 blocks
    kv.grow(b, 4)  # 1 block
    assert (len(a), len(b), kv.num_free) == (3, 1, 6)
    assert not set(a) & set(b)
    kv.grow(a, 12)  # still 3 blocks: no change
    assert len(a) == 3
    kv.free(a)
    assert a == [] and kv.num_free == 9


def test_allocation_order_is_deterministic():
    kv = BlockManager(4, 2)
    t = []
    kv.grow(t, 8)
    assert t == [0, 1, 2, 3]


def test_grow_beyond_pool_raises_and_can_grow_says_so():
    kv = BlockManager(2, 4)
    t = []
    assert not kv.can_grow(t, 9)
    with pytest.raises(RuntimeError):
        kv.grow(t, 9)
    assert kv.num_free == 2 and t == []


@pytest.mark.parametrize("blocks,size", [(0, 16), (4, 0)])
def test_rejects_empty_pool(blocks, size):
    with pytest.raises(ValueError):
        BlockManager(blocks, size)


class _Stack:
    """The allocation order as a plain list says it (the reference): returned blocks
    latest first, then never-used ones in id order."""

    def __init__(self, num_blocks: int) -> None:
        self.free: list[int] = []
        self.next = 0
        self.num_blocks = num_blocks

    def take(self, n: int) -> list[int]:
        out = []
        for _ in range(n):
            if self.free:
                out.append(self.free.pop())
            else:
                out.append(self.next)
                self.next += 1
        return out

    def give(self, table: list[int]) -> None:
        self.free.extend(reversed(table))



@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=60))
def test_blocks_handed_out_as_a_plain_stack_would(ops):
    """Tables grown and freed in any order get the blocks a plain stack gives, and the
    pool's counts hold (the free stack keeps stale entries past its live part)."""
    pool = 300
    kv, ref = BlockManager(pool, 4), _Stack(pool)
    tables: list[list[int]] = []
    for grow, tokens in ops:
        if grow or not tables:
            t: list[int] = []
            if kv.blocks_needed(t, tokens) > kv.num_free:
                continue
            kv.grow(t, tokens)
            assert t == ref.take(blocks_for(tokens, 4))
            tables.append(t)
        else:
            t = tables.pop(tokens % len(tables))
            ref.give(t)
            kv.free(t)
            assert t == []
        assert kv.returned() == ref.free
        assert kv.num_free == pool - sum(len(x) for x in tables)

import pytest

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

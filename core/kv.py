"""KV-cache block accounting. The block table the scheduler keeps per sequence is the
physical layout a real backend uses: block ids index its KV pool directly.

Bookkeeping costs memory in proportion to the blocks in use, not to the pool: blocks
never handed out are a counter (ids from `_next` up), returned ones a stack. With prefix
caching (core/prefix_cache.py), returned blocks of a cached unit stay cached instead,
and are evicted, least recently used unit first, only when no plain free block is left.
A cached unit sits in a table at its own place: unit i of a prompt is the table's
blocks [i * unit, (i + 1) * unit)."""
from __future__ import annotations

from typing import Final

from batchlab.core.prefix_cache import PrefixCache

# Block ids as int objects, made once for every pool of the process: Python caches ints
# up to 256 only, and a pool handing out never-used blocks (a lightly loaded replica
# does it at nearly every admission) would make a new object an id, in memory of its own.
# A tuple (in a list: its one slot), which the collector stops tracking (ints only)
# where a list of them would be walked at every collection.
_IDS: Final[list[tuple[int, ...]]] = [()]


def _fresh_ids(lo: int, hi: int) -> tuple[int, ...]:
    """(lo, ..., hi - 1), the shared objects."""
    ids = _IDS[0]
    if len(ids) < hi:
        ids = _IDS[0] = tuple(range(max(hi, 2 * len(ids), 1024)))
    return ids[lo:hi]


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class BlockManager:
    """A pool of `num_blocks` fixed-size blocks of `block_size` token slots.

    Allocation order is deterministic: the most recently returned block first, then
    never-used blocks in id order 0, 1, 2, ..., then blocks of evicted cached units."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = []  # returned plain blocks: pop() hands out the latest
        self._next = 0  # blocks _next .. num_blocks - 1 were never handed out
        self.cache = PrefixCache()
        self.unit = 1  # blocks per cached unit: set by the first keyed request (set_unit)

    @property
    def num_spare(self) -> int:
        """Free blocks outside cached units: taking them evicts nothing."""
        return len(self._free) + self.num_blocks - self._next

    @property
    def num_free(self) -> int:
        """Blocks no sequence uses: plain free ones and those of evictable cached units."""
        return len(self._free) + self.num_blocks - self._next + len(self.cache.evictable) * self.unit

    def returned(self) -> list[int]:
        """The returned plain blocks (a copy), the next one handed out last."""
        return list(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks of cached units, in use or not."""
        return len(self.cache.units) * self.unit

    def blocks_needed(self, block_table: list[int], tokens: int) -> int:
        """Extra blocks a table must gain to hold `tokens` token slots."""
        return max(0, blocks_for(tokens, self.block_size) - len(block_table))

    def can_grow(self, block_table: list[int], tokens: int) -> bool:
        return self.blocks_needed(block_table, tokens) <= self.num_free

    def grow(self, block_table: list[int], tokens: int) -> None:
        """Extend `block_table` in place so it holds `tokens` slots."""
        need = self.blocks_needed(block_table, tokens)
        if need:
            block_table.extend(self.take(need))

    def take(self, n: int) -> list[int]:
        """Hand out n blocks: returned blocks (latest first), then never-used ones, then
        those of evicted cached units (LRU first; a unit's leftover blocks are returned)."""
        free = self._free
        k = len(free)
        if n <= k:  # the common case: recycled blocks
            if n == 1:
                return [free.pop()]
            out = free[k - n:]
            del free[k - n:]
            out.reverse()  # in place: a reversed slice copied the copy
            return out
        fresh = min(n - k, self.num_blocks - self._next)
        short = n - k - fresh
        units = -(-short // self.unit)
        if units > len(self.cache.evictable):
            raise RuntimeError(f"KV pool exhausted: need {n} blocks, {self.num_free} free")
        out = free[::-1]
        free.clear()
        out.extend(_fresh_ids(self._next, self._next + fresh))
        self._next += fresh
        if short:
            evicted = self.cache.evict(units)
            out += evicted[:short]
            free.extend(evicted[short:][::-1])
        return out

    def free(self, block_table: list[int]) -> None:
        """Return a table's blocks to the pool and empty the table. Blocks of cached
        units stay cached (evictable once unused), the table's last units first in line."""
        refs = self.cache.refs
        if refs:
            u = self.unit
            heads = [i for i in range(0, len(block_table) - u + 1, u) if block_table[i] in refs]
            if heads:
                rest, prev = [], 0
                for i in heads:
                    rest += block_table[prev:i]
                    prev = i + u
                rest += block_table[prev:]
                self._free.extend(rest[::-1])
                self.cache.release([block_table[i] for i in reversed(heads)])
                block_table.clear()
                return
        # A reversed slice, not reversed(): compiled, a slice is copied in C, where an
        # iterator is stepped through Python's protocol a block at a time.
        self._free.extend(block_table[::-1])
        block_table.clear()

    # -- prefix caching ------------------------------------------------------------
    def set_unit(self, unit: int) -> None:
        if unit != self.unit:
            if self.cache.units:
                raise ValueError(f"prefix hashes of {unit} KV blocks each after ones of "
                                 f"{self.unit}: one run needs one hash block size")
            self.unit = unit

    def cached_prefix(self, keys: tuple[int, ...], tokens: int) -> list[int]:
        """Blocks of the longest cached prefix a sequence knowing `tokens` tokens may
        reuse: whole cached units, never holding its last token (that one is computed,
        so that a token is sampled)."""
        u = self.unit
        heads = self.cache.match(keys, (tokens - 1) // self.block_size // u)
        if u == 1:
            return heads
        units = self.cache.units
        return [b for h in heads for b in units[h][1]]

    def can_admit(self, hit: list[int], tokens: int) -> bool:
        """Whether a sequence reusing cached blocks `hit` can hold `tokens` slots:
        reusing an evictable unit takes it out of the free count too."""
        need = blocks_for(tokens, self.block_size) - len(hit)
        if hit:
            evictable = self.cache.evictable
            need += self.unit * sum(1 for h in hit[::self.unit] if h in evictable)
        return need <= self.num_free

    def reuse(self, block_table: list[int], hit: list[int]) -> None:
        """An empty table starts with the cached blocks `hit` (shared, ref-counted)."""
        self.cache.acquire(hit[::self.unit])
        block_table.extend(hit)

    def register(self, block_table: list[int], keys: tuple[int, ...], lo: int, hi: int) -> None:
        """The table's units lo..hi-1 are computed and hold keys[lo:hi]: cache them
        (units already cached, the hits, stay as they are)."""
        u, refs, register = self.unit, self.cache.refs, self.cache.register
        for i in range(lo, hi):
            if block_table[i * u] not in refs:
                register(keys[i], tuple(block_table[i * u:(i + 1) * u]))

    def freed_in_order(self, tables: list[list[int]]) -> list[int]:
        """Blocks each table would make free if the tables were freed in this order (a
        shared cached unit counts for the last table that drops it)."""
        refs = self.cache.refs
        if not refs:
            return [len(t) for t in tables]
        u, out = self.unit, []
        dropped: dict[int, int] = {}
        for t in tables:
            n = len(t)
            for i in range(0, len(t) - u + 1, u):
                h = t[i]
                if h in refs:
                    d = dropped[h] = dropped.get(h, 0) + 1
                    n -= 0 if d == refs[h] else u
            out.append(n)
        return out

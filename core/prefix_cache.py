"""Prefix caching with vLLM v1's semantics: the cached full blocks of prompts, shared by
every sequence that uses them.

The unit of caching is a run of `unit` KV blocks (one block unless a trace hash covers
several): Mooncake's hash_ids cover 512 tokens, so with 16-token KV blocks a trace
block is 32 engine blocks, cached, shared and evicted together under a key derived from
its hash (any finer split would be guesswork: the trace says nothing of the tokens
inside a block). A unit is identified by a chained key: the hash of its parent unit's
key and its own content (the trace's hash, or the prompt's token ids when a request has
them), so equal keys mean an equal whole prefix. Only prompt blocks are keyed: the
simulator never knows generated tokens, and the real backend must hit exactly where the
simulation does.

Block states (every block is in exactly one):
  free       holds nothing: handed out first (BlockManager's free list and counter)
  cached     in a cached unit that no sequence uses: free too, but only evicted (least
             recently freed unit first) when no plain free block is left
  in use     referenced by >= 1 sequence; a cached unit in use is reference-counted,
             any other block in use belongs to exactly one sequence's table
A unit becomes cached when the step that completes it has run (Scheduler.complete), so
a hit always reads KV that exists. Bookkeeping is per unit (one dict entry for 32
blocks of a Mooncake replay), which keeps a cached replay within 2x of an uncached one.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from batchlab.core.request import Request

_ROOT = 0x5BD1E995  # the parent key of a prompt's first unit


def chain(hashes: tuple[int, ...]) -> list[int]:
    """Chained keys of trace hash blocks: key i stands for hashes[0..i] together."""
    keys, parent = [], _ROOT
    for h in hashes:
        parent = hash((parent, h))
        keys.append(parent)
    return keys


def block_keys(request: Request, block_size: int) -> tuple[tuple[int, ...], int]:
    """(chained keys of the request's full prompt units, KV blocks per unit). From its
    token ids (one block per unit), else from its trace hashes (each covering
    hash_block_size tokens; one size must divide the other). No keys without either."""
    keys: list[int] = []
    parent = _ROOT
    if request.prompt_token_ids is not None:
        ids = tuple(request.prompt_token_ids)
        for j in range(request.prompt_len // block_size):
            parent = hash((parent, ids[j * block_size:(j + 1) * block_size]))
            keys.append(parent)
        return tuple(keys), 1
    hashes = request.prefix_hashes
    hbs = request.hash_block_size
    if not hashes:
        return (), 1
    if hbs % block_size == 0:  # a trace block is a unit of hbs / block_size blocks
        return tuple(chain(hashes[:request.prompt_len // hbs])), hbs // block_size
    if block_size % hbs == 0:  # an engine block spans r trace blocks
        r = block_size // hbs
        for j in range(min(request.prompt_len // block_size, len(hashes) // r)):
            parent = hash((parent, hashes[j * r:(j + 1) * r]))
            keys.append(parent)
        return tuple(keys), 1
    raise ValueError(f"request {request.id}: KV block size {block_size} and the "
                     f"workload's {hbs}-token hash blocks: neither divides the other")


def check_block_size(hash_block_size: int, block_size: int) -> str:
    """Why a workload's hash blocks cannot map onto engine blocks ('' when they can)."""
    if hash_block_size % block_size and block_size % hash_block_size:
        return (f"KV block size {block_size} does not divide the workload's "
                f"{hash_block_size}-token hash blocks (nor is a multiple of them)")
    return ""


class PrefixCache:
    """The cached units of one KV pool, each named by its first block (its head):
    key <-> unit, reference counts of cached units in use, and the evictable ones in
    LRU order. Memory: O(cached units)."""

    def __init__(self) -> None:
        self.head_of: dict[int, int] = {}  # key -> head block
        self.units: dict[int, tuple[int, tuple[int, ...]]] = {}  # head -> (key, blocks)
        self.refs: dict[int, int] = {}  # head of a cached unit in use -> sequences using it
        self.evictable: OrderedDict[int, None] = OrderedDict()  # unused heads, LRU first
        # Told (key, blocks) of each unit evicted: a lower tier keeping it (core/kv_tiers/).
        self.on_evict: Callable[[int, int], None] | None = None

    def match(self, keys: tuple[int, ...], limit: int) -> list[int]:
        """Heads of the longest cached prefix of `keys[:limit]` (exact key matches)."""
        out = []
        head_of = self.head_of
        for k in keys[:limit]:
            h = head_of.get(k)
            if h is None:
                break
            out.append(h)
        return out

    def acquire(self, heads: list[int]) -> None:
        """One more sequence uses these cached units (no longer evictable)."""
        refs, evictable = self.refs, self.evictable
        for h in heads:
            if h in evictable:
                del evictable[h]
                refs[h] = 1
            else:
                refs[h] += 1

    def register(self, key: int, blocks: tuple[int, ...]) -> bool:
        """A computed unit now holds `key`: cache it (False if the key is cached
        already, by a sequence that computed it at the same time: this copy stays
        plain)."""
        if key in self.head_of:
            return False
        self.head_of[key] = blocks[0]
        self.units[blocks[0]] = (key, blocks)
        self.refs[blocks[0]] = 1
        return True

    def release(self, heads: list[int]) -> None:
        """Sequences drop these cached units; unused ones become evictable, in this
        order (most recently used, evicted last)."""
        refs, evictable = self.refs, self.evictable
        for h in heads:
            n = refs[h]
            if n == 1:
                del refs[h]
                evictable[h] = None
            else:
                refs[h] = n - 1

    def evict(self, n: int) -> list[int]:
        """Take the n least recently used evictable units out of the cache: their blocks."""
        out: list[int] = []
        for _ in range(n):
            h, _ = self.evictable.popitem(last=False)
            key, blocks = self.units.pop(h)
            del self.head_of[key]
            if self.on_evict is not None:
                self.on_evict(key, len(blocks))
            out += blocks
        return out

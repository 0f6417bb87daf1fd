"""TieredHome: a KVHome (core/kv_home.py) with a tier below the GPU's KV pool.

Preemption: a victim's computed KV either swaps to the tier (copied out now, back when it
is admitted again) or is dropped and recomputed, chosen per preemption by the tier's
`preemption`: swap (recompute only when the tier is full), recompute, or cheapest (swap
when copying its bytes out and back costs less than prefilling its tokens again, priced
by the cost model as a lone prefill). Both copies block the step that makes them, as in
vLLM v0, whose worker issues swap_out/swap_in before the model's forward
(vllm/worker/worker.py execute_worker; vllm/core/scheduler.py _preempt at 0054e1fa:
RECOMPUTE for a single sequence, SWAP for beam groups). What the engines do today:
vLLM v1 recomputes (vllm/v1/core/sched/scheduler.py _preempt_request frees the blocks
and sets num_computed_tokens = 0, seen at 6cf7b26); SGLang retracts a decode request,
freeing its KV past its radix-tree prefix and re-queueing it (schedule_batch.py
retract_decode/release_req at 000eaff), offloading it to host only on a PD decode node.

Prefix caching: a cached unit the GPU evicts is kept in the tier (LRU within what the
swapped sequences leave free; inclusive: a unit loaded back stays in the tier too). A
lookup that ends in the GPU's cache goes on in the tier, and the units found there are
loaded at the link's price instead of computed. The copy out is not priced: it overlaps
compute (vLLM's offloading connector stores blocks asynchronously), but its bytes count.

Every figure is per replica, in tokens; bytes are tokens times the KV bytes a token
takes per GPU (each GPU moves its share over its own link)."""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from batchlab.core.batch import Batch, step_features
from batchlab.core.cost.form import CostModel
from batchlab.core.kv_home import KVHome
from batchlab.core.kv_tiers.spec import TierConfig
from batchlab.core.request import Request, Sequence

# A step's (and the run's) figures, in TieredHome._step and .totals by these indexes:
# tokens copied out (swaps, kept prefix units), tokens loaded back (swaps, prefix hits),
# prefix tokens a first admission found here, preemptions that swapped, that recomputed.
OUT, IN, HIT, SWAPS, RECOMPUTES = range(5)


def lone_prefill_seconds(cost: CostModel) -> Callable[[int], float]:
    """What recomputing n tokens costs: a step prefilling them alone (memoised)."""
    seen: dict[int, float] = {}

    def price(n: int) -> float:
        if n not in seen:
            batch = Batch()
            batch.add(Sequence(Request(0, 0.0, n, 1)), n)
            seen[n] = cost.step_time(step_features(batch))
        return seen[n]
    return price


class TieredHome(KVHome):
    def __init__(self, tier: TierConfig, kv_bytes_per_token: float, block_size: int,
                 recompute_seconds: Callable[[int], float] | None = None) -> None:
        if tier.preemption == "cheapest" and recompute_seconds is None:
            raise ValueError("kv_tier.preemption = 'cheapest' needs the price of a recompute")
        self.tier = tier
        self.bytes_per_token = kv_bytes_per_token
        self.block_size = block_size
        self.capacity = tier.capacity_blocks(kv_bytes_per_token, block_size)
        self._s_per_token = kv_bytes_per_token / tier.bandwidth_bytes_s
        self._latency = tier.latency_s
        self._recompute = recompute_seconds
        self.swapped: dict[Sequence, int] = {}  # a waiting sequence -> its blocks in the tier
        self.swap_blocks = 0
        self.prefix: OrderedDict[int, int] = OrderedDict()  # unit key -> blocks, LRU first
        self.prefix_blocks = 0
        self.tiered = True
        self.holds_prefixes = tier.prefix
        # This step's figures (OUT .. RECOMPUTES), and the run's totals.
        self._step = [0, 0, 0, 0, 0]
        self.totals = [0, 0, 0, 0, 0]
        self.rows: list[tuple] = []  # (start, blocks used, *figures) of each step noted
        self.max_blocks_used = 0

    @property
    def blocks_used(self) -> int:
        return self.swap_blocks + self.prefix_blocks

    def transfer_seconds(self, tokens: int) -> float:
        return self._latency + tokens * self._s_per_token

    # -- the KVHome contract ------------------------------------------------------------
    def evicted(self, seq: Sequence) -> int:
        n = seq.num_computed
        if n <= 0:
            return 0
        tier = self.tier
        need = -(-n // self.block_size)
        swap = tier.preemption != "recompute"
        if swap and tier.preemption == "cheapest":
            assert self._recompute is not None
            swap = 2 * self.transfer_seconds(n) < self._recompute(n)
        if not (swap and self._room(need)):
            self._step[RECOMPUTES] += 1
            return 0
        self.swapped[seq] = need
        self.swap_blocks += need
        self._step[OUT] += n
        self._step[SWAPS] += 1
        return n

    def save_seconds(self, tokens: int) -> float:
        return self.transfer_seconds(tokens)

    def load_seconds(self, tokens: int) -> float:
        return self.transfer_seconds(tokens)

    def loaded(self, seq: Sequence, tokens: int) -> None:
        blocks = self.swapped.pop(seq, 0)
        self.swap_blocks -= blocks
        self._step[IN] += tokens
        if not blocks and seq.preemptions == 0:  # a prefix found in the tier, first time
            self._step[HIT] += tokens

    def prefix_tokens(self, keys: tuple[int, ...], start: int, limit: int, span: int) -> int:
        prefix, m = self.prefix, start
        while m < limit and keys[m] in prefix:
            prefix.move_to_end(keys[m])
            m += 1
        return m * span if m > start else 0

    def keep(self, key: int, blocks: int) -> None:
        prefix = self.prefix
        if key in prefix:
            prefix.move_to_end(key)
            return
        if not self._room(blocks):
            return
        prefix[key] = blocks
        self.prefix_blocks += blocks
        self._step[OUT] += blocks * self.block_size
        self._track()

    # -- bookkeeping ----------------------------------------------------------------------
    def _room(self, blocks: int) -> bool:
        """Make `blocks` free, dropping least recently used prefix units; False (nothing
        dropped) when even all of them would not do."""
        free = self.capacity - self.swap_blocks - self.prefix_blocks
        if free + self.prefix_blocks < blocks:
            return False
        prefix = self.prefix
        while free < blocks:
            _, b = prefix.popitem(last=False)
            self.prefix_blocks -= b
            free += b
        self._track()
        return True

    def _track(self) -> None:
        used = self.swap_blocks + self.prefix_blocks
        if used > self.max_blocks_used:
            self.max_blocks_used = used

    def note(self, start: float) -> None:
        """The step starting at `start` is formed: its figures become a row."""
        step = self._step
        self._track()
        self.rows.append((start, self.swap_blocks + self.prefix_blocks, *step))
        for i in range(5):
            self.totals[i] += step[i]
            step[i] = 0


class HandOffTier(TieredHome):
    """A decode replica's tier (sim/disaggregated): a sequence handed off by a prefill
    replica brings its prompt's KV over the link, priced there (core/kv_handoff.py), not
    from this tier; its admission moves nothing here, costs nothing here and is no hit.
    It is told apart as the scheduler admits it: KV elsewhere, yet nothing swapped here."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._arrived = 0  # tokens of this step's admissions that came by hand-off

    def loaded(self, seq: Sequence, tokens: int) -> None:
        if seq.kv_elsewhere and seq not in self.swapped:
            self._arrived += tokens
            return
        super().loaded(seq, tokens)

    def load_seconds(self, tokens: int) -> float:
        """The step's loads (batch.kv_loaded) less its hand-offs', priced once a step
        (a step that loads anything is formed by schedule(), never fast-forwarded)."""
        tier, self._arrived = tokens - self._arrived, 0
        return self.transfer_seconds(tier) if tier > 0 else 0.0

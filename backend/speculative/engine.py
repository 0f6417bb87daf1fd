"""The speculative engine: each step, the draft proposes its drafts for every sequence the
scheduler gave more than one decode token (c - 1 drafts for c tokens: the token budget
may cut them, as in vLLM), then the target runs the whole step once, with logits at every
verified position, and keeps, per sequence, the target's greedy tokens up to and with the
first one that disagrees with a draft. The output is the target's own greedy output."""
from __future__ import annotations

import time

import numpy as np
import torch

from batchlab.backend.attention import build_metadata
from batchlab.backend.device import synchronize
from batchlab.backend.engine import Engine
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.speculative.emission import VerifiedEmission
from batchlab.core.batch import Batch
from batchlab.core.request import Sequence


class SpeculativeEngine(Engine):
    def __init__(self, runner, cache, draft: ModelRunner, emission: VerifiedEmission,
                 seed: int = 0, prompt_seed: int = 0, draft_cache: PagedKVCache | None = None) -> None:
        """draft_cache: the draft's own KV pool (None: the draft shares the target's)."""
        super().__init__(runner, cache, 0.0, seed, prompt_seed)
        self.draft, self.emission = draft, emission
        self.draft_cache = cache if draft_cache is None else draft_cache
        self._drafts: dict[int, list[int]] = {}

    def _verifying(self, seq: Sequence, start: int, n: int) -> bool:
        """A decode of n > 1 tokens (its last token and n - 1 drafts): an item that runs
        past what its sequence knows (a prefill chunk stops at it)."""
        return start + n > seq.known

    def sampled_rows(self, seq: Sequence, start: int, n: int) -> int:
        return n if self._verifying(seq, start, n) else super().sampled_rows(seq, start, n)

    def _tokens(self, seq: Sequence, start: int, n: int) -> np.ndarray:
        if self._verifying(seq, start, n):
            return np.asarray([seq.output_token_ids[-1], *self._drafts[seq.id]], dtype=np.int64)
        return super()._tokens(seq, start, n)

    def propose(self, batch: Batch) -> None:
        """The draft's passes: pass j runs, for every verifying sequence that needs a j-th
        draft, the token before it at its position, one token each."""
        items = [(seq, s, n) for seq, s, n in zip(batch.seqs, batch.starts, batch.num_tokens)
                 if self._verifying(seq, s, n)]
        self._drafts = {seq.id: [] for seq, _, _ in items}
        first = self.first_pass(batch, items)
        dev = self.runner.device
        for j in range(max((n - 1 for _, _, n in items), default=0)):
            if j == 0:
                for seq, _, _ in items:
                    self._drafts[seq.id].append(first[seq.id])
                continue
            # build_metadata takes one-token decodes sorted by position
            live = sorted(((seq, s) for seq, s, n in items if n - 1 > j), key=lambda x: x[1])
            last = [self._drafts[seq.id][-1] for seq, _ in live]
            meta = build_metadata([(s + j, seq.block_table) for seq, s in live], [], self.draft_cache)
            pos = torch.tensor([s + j for _, s in live], dtype=torch.int64, device=dev)
            logits = self.draft.forward(torch.tensor(last, dtype=torch.int64, device=dev), pos, meta,
                                        self.draft_cache, torch.arange(len(live), device=dev), int(pos.max()))
            for (seq, _), tok in zip(live, logits.argmax(-1).tolist()):
                self._drafts[seq.id].append(tok)

    def first_pass(self, batch: Batch, items: list[tuple[Sequence, int, int]]) -> dict[int, int]:
        """The first draft of each verifying item (seq id -> token): the draft runs its last
        token at its position (the target's KV, shared, holds everything before it)."""
        if not items:
            return {}
        dev = self.runner.device
        live = sorted(((seq, s) for seq, s, _ in items), key=lambda x: x[1])
        meta = build_metadata([(s, seq.block_table) for seq, s in live], [], self.draft_cache)
        pos = torch.tensor([s for _, s in live], dtype=torch.int64, device=dev)
        last = [seq.output_token_ids[-1] for seq, _ in live]
        logits = self.draft.forward(torch.tensor(last, dtype=torch.int64, device=dev), pos, meta,
                                    self.draft_cache, torch.arange(len(live), device=dev), int(pos.max()))
        return {seq.id: tok for (seq, _), tok in zip(live, logits.argmax(-1).tolist())}

    def settle(self, seq: Sequence, accepted: int, drafts: int) -> None:
        """After verification: `accepted` of seq's `drafts` drafts matched (a draft with KV of
        its own rolls it back here; a shared one has nothing to do)."""

    def execute(self, batch: Batch) -> float:
        t0 = time.perf_counter()
        self.propose(batch)
        drafted = time.perf_counter()
        x = self.inputs(batch)
        t1 = time.perf_counter()
        logits = self.runner.forward(x.input_ids, x.positions, x.meta, self.cache, x.rows, x.max_pos)
        greedy = logits.argmax(-1).tolist() if x.sampling else []
        synchronize(self.runner.device)
        at = 0
        for seq, c in zip(x.sampling, x.counts):
            target = greedy[at:at + c]
            at += c
            drafts = self._drafts.pop(seq.id, [])
            accepted = 0
            while accepted < len(drafts) and drafts[accepted] == target[accepted]:
                accepted += 1
            kept = target[:min(accepted + 1, seq.request.output_len - seq.num_generated)]
            seq.output_token_ids.extend(kept)
            if c > 1:
                self.emission.verified(seq, len(kept), accepted, len(drafts))
                self.settle(seq, accepted, len(drafts))
        t2 = time.perf_counter()
        self._count(t1 - drafted, (drafted - t0) + (t2 - t1))  # the draft's passes are forward time
        return t2 - t0

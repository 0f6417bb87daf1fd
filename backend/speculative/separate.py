"""Speculative decoding with a separate draft model: its own weights and its own paged KV
pool (backend/speculative/draft_model.py), addressed by the target's block tables (the
block size is shared, so a sequence's block ids hold the same positions in both pools).

The draft's KV is kept in step with what the target kept. Each step's first draft pass
runs, for every sequence in the batch, the tokens the draft has not seen up to what the
step makes known: a prefill chunk's tokens, a plain decode's last token, and a verifying
sequence's last token (one more where every draft of its last step was accepted, since
the last draft itself was never run through the draft). Its logits at a verifying
sequence's last token give the first draft; the later passes run one draft each. After
verification the draft's KV counts only up to the last accepted draft: the positions past
it hold rejected drafts, overwritten when the draft next runs there (the rollback costs
nothing, as in vLLM's block tables). A preempted sequence (recompute or swap: its blocks
change) is fed again from its first token."""
from __future__ import annotations

import numpy as np
import torch

from batchlab.backend.attention import build_metadata
from batchlab.backend.kv_cache import PagedKVCache
from batchlab.backend.model_runner import ModelRunner
from batchlab.backend.speculative.emission import VerifiedEmission
from batchlab.backend.speculative.engine import SpeculativeEngine
from batchlab.core.batch import Batch
from batchlab.core.request import Sequence


class DraftModelEngine(SpeculativeEngine):
    def __init__(self, runner, cache, draft: ModelRunner, draft_cache: PagedKVCache,
                 emission: VerifiedEmission, seed: int = 0, prompt_seed: int = 0) -> None:
        super().__init__(runner, cache, draft, emission, seed, prompt_seed, draft_cache=draft_cache)
        # seq id -> (its preemptions then, positions 0..n-1 with the draft's KV in its pool)
        self._fed: dict[int, tuple[int, int]] = {}
        self._starts: dict[int, int] = {}  # a verifying sequence's position of its last token

    def forget(self, seq: Sequence) -> None:
        super().forget(seq)
        self._fed.pop(seq.id, None)

    def fed(self, seq: Sequence, start: int) -> int:
        """Positions of seq whose draft KV is valid (none after a preemption moved its blocks)."""
        preemptions, fed = self._fed.get(seq.id, (seq.preemptions, 0))
        return 0 if preemptions != seq.preemptions else min(fed, start)

    def first_pass(self, batch: Batch, items: list[tuple[Sequence, int, int]]) -> dict[int, int]:
        feeds = []  # (seq, first position to feed, end, verifying)
        for seq, s, n in zip(batch.seqs, batch.starts, batch.num_tokens):
            verifying = self._verifying(seq, s, n)
            end = s + 1 if verifying else s + n
            feeds.append((seq, self.fed(seq, s), end, verifying))
            self._fed[seq.id] = (seq.preemptions, end)
            if verifying:
                self._starts[seq.id] = s
        if not feeds:
            return {}
        one = sorted((f for f in feeds if f[2] - f[1] == 1), key=lambda f: f[1])  # as build_metadata takes them
        many = [f for f in feeds if f[2] - f[1] > 1]
        ids, pos, rows, owners = [], [], [], []
        row = 0
        for seq, a, b, verifying in one + many:
            ids.append(self._tokens(seq, a, b - a))
            pos.append(np.arange(a, b))
            row += b - a
            if verifying:  # its last token's logits give its first draft
                rows.append(row - 1)
                owners.append(seq)
        meta = build_metadata([(a, seq.block_table) for seq, a, _, _ in one],
                              [(a, b - a, seq.block_table) for seq, a, b, _ in many], self.draft_cache)
        positions = np.concatenate(pos)
        dev = self.draft.device
        logits = self.draft.forward(torch.from_numpy(np.concatenate(ids)).to(dev),
                                    torch.from_numpy(positions).to(dev), meta, self.draft_cache,
                                    torch.tensor(rows, dtype=torch.int64, device=dev), int(positions.max()))
        return {seq.id: tok for seq, tok in zip(owners, logits.argmax(-1).tolist())}

    def settle(self, seq: Sequence, accepted: int, drafts: int) -> None:
        # The draft ran its last token and drafts 1..drafts-1: valid through the last accepted.
        start = self._starts.pop(seq.id)
        self._fed[seq.id] = (seq.preemptions, start + 1 + min(accepted, drafts - 1))

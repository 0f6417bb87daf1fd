"""A step's price with speculation: the target's price of the step as it ran (its decodes
verify k + 1 positions each, priced as decode tokens by the step features) plus the
draft's k forward passes, priced by the same cost dispatch for the draft's shape. A
wrapper CostModel (as core/cost/form.py Slowed is), so the simulator prices every step
through the one `step_time` it always calls: a run without speculation never meets it.

The draft's passes: the first runs the step's own tokens (prefill chunks and the verified
positions: the draft extends its KV or hidden states over what the target kept), the
other k - 1 one token per decoding sequence, as vLLM's draft-model and EAGLE proposers do.
A draft that shares the target's KV (the target's own first layers: backend/speculative/)
has nothing of the step to catch up on: its k passes are one token per decoding sequence.
The draft's price carries no step overhead of its own (its form is built without one):
the engine's per-step host cost is paid once, by the target's step."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.core.cost.form import CostModel, window_stretch_times
from batchlab.core.features import StepFeatures
from batchlab.core.run_clock import RunClock


@dataclass(frozen=True)
class DraftedCost:
    base: CostModel  # the target's price (attention_window reads through `base`)
    draft: CostModel  # the draft's price, for its own shape
    k: int  # drafts a step
    shares_kv: bool = False  # the draft's KV is the target's: no pass over the step's tokens

    def draft_seconds(self, f: StepFeatures) -> float:
        if not f.num_seqs:
            return 0.0
        decoding = f.num_seqs - f.num_prefill_seqs
        if self.shares_kv:
            return sum(self.draft.decode_times(decoding, f.kv_tokens_read, self.k)) if decoding else 0.0
        t = self.draft.step_time(f)
        if decoding and self.k > 1:
            # Each later pass reads the context and the drafts before it.
            t += sum(self.draft.decode_times(decoding, f.kv_tokens_read + decoding, self.k - 1))
        return t

    def step_time(self, f: StepFeatures) -> float:
        return self.base.step_time(f) + self.draft_seconds(f)

    def decode_run_times(self, f: StepFeatures, m: int) -> np.ndarray:
        base = self.base.decode_run_times(f, m)
        g = np.arange(m, dtype=np.int64) * f.num_seqs
        extra = [self.draft_seconds(f._replace(kv_tokens_read=f.kv_tokens_read + int(d),
                                               attention_pairs=f.attention_pairs + int(d))) for d in g]
        return base + np.asarray(extra)

    def decode_times(self, n: int, kv0: int, m: int) -> list[float]:
        return [self.step_time(StepFeatures(n, 0, 0, n, kv, kv)) for kv in range(kv0, kv0 + m * n, n)]

    def decode_into(self, clock: RunClock, n: int, kv0: int, m: int) -> None:
        clock.extend(self.decode_times(n, kv0, m))

    def window_decode_times(self, n: int, kv0: int, w0: int, u: int, m: int) -> list[float]:
        return window_stretch_times(self, n, kv0, w0, u, m)

    def at(self, now: float) -> CostModel:
        base = self.base.at(now)
        return self if base is self.base else DraftedCost(base, self.draft, self.k, self.shares_kv)

    def at_speed(self, memory: float, compute: float | None = None) -> CostModel:
        """The target and the draft as the machine ran: both forms slowed alike."""
        slow = lambda c: c.at_speed(memory, compute)  # noqa: E731 - CostForm's, where it has one
        return DraftedCost(slow(self.base), slow(self.draft), self.k, self.shares_kv)

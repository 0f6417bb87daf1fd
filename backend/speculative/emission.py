"""The real run's emission: what greedy verification kept, as the engine reports it, and
the acceptance it measured (the simulator's acceptance file, core/speculative/acceptance.py)."""
from __future__ import annotations

from batchlab.core.emission import Emission
from batchlab.core.request import Sequence


class VerifiedEmission(Emission):
    """k drafts a step; each sequence keeps what the engine's verification kept."""

    def __init__(self, k: int, method: str = "draft_model", draft_cost_share: float | None = None,
                 draft_model: str | None = None) -> None:
        """draft_cost_share: the draft's weight bytes a pass over the target's (what the
        simulator scales a profile's price by for the draft's passes); draft_model: a
        separate draft's name (None: the target's own first layers, sharing its KV)."""
        super().__init__(k + 1)
        self.k, self.method, self.draft_cost_share = k, method, draft_cost_share
        self.draft_model = draft_model
        self._kept: dict[int, int] = {}
        self.verifications = 0
        self.accepted_total = 0  # tokens kept by verification (a reply's end not applied)
        self.histogram: dict[int, int] = {}  # acceptance length -> verifications of all k drafts

    def verified(self, seq: Sequence, kept: int, accepted: int, drafts: int) -> None:
        """The engine's report: seq keeps `kept` tokens; `accepted` of its `drafts` drafts matched."""
        self._kept[seq.id] = kept
        self.verifications += 1
        self.accepted_total += accepted + 1
        if drafts == self.k:
            self.histogram[accepted + 1] = self.histogram.get(accepted + 1, 0) + 1

    def emitted(self, seq: Sequence, verified: int) -> int:
        return self._kept.pop(seq.id)

    def stats(self) -> dict[str, object]:
        mean = self.accepted_total / self.verifications if self.verifications else None
        return {"method": self.method, "num_speculative_tokens": self.k,
                "verifications": self.verifications,
                "accepted_tokens": self.accepted_total - self.verifications,
                "mean_acceptance_length": mean,
                # verifications of all k drafts by tokens kept (1..k+1): the acceptance file's rows
                "acceptance_counts": [self.histogram.get(e, 0) for e in range(1, self.k + 2)],
                "draft_cost_share": self.draft_cost_share,
                **({"draft_model": self.draft_model} if self.draft_model else {})}

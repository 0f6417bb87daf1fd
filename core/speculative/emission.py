"""The speculative emission (core/emission.py's seam): a decoding sequence runs its last
token and k drafts (width k + 1) and keeps 1 to k + 1 of them, drawn from the acceptance
model.

Each draw is a pure function of (the run's seed, the request's id, how many tokens it had
generated): the same config and seed give the same run whatever order sequences complete
in, on any replica, stepped or not, and a sequence recomputed after a preemption is
accepted as before. A step that verified fewer than k + 1 positions (the token budget cut
its drafts, as vLLM's scheduler does) keeps at most what it verified: the leading drafts'
acceptance does not depend on the ones after them."""
from __future__ import annotations

from batchlab.core.emission import Emission
from batchlab.core.request import Sequence
from batchlab.core.speculative.acceptance import Acceptance, draw

_MASK = (1 << 64) - 1


def uniform(seed: int, request: int, position: int) -> float:
    """A uniform in [0, 1) from three integers (splitmix64 over their mix): cheap, stateless."""
    z = (seed * 0x9E3779B97F4A7C15 + request * 0xBF58476D1CE4E5B9 + position * 0x94D049BB133111EB
         + 0x2545F4914F6CDD1D) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


class SpeculativeEmission(Emission):
    """k drafts a step, kept as the acceptance model draws with `seed`."""

    def __init__(self, k: int, acceptance: Acceptance, seed: int, method: str = "draft_model") -> None:
        super().__init__(k + 1)
        if acceptance.k != k:
            raise ValueError(f"acceptance model for k={acceptance.k}, emission for k={k}")
        self.k, self.seed, self.method = k, seed, method
        self.acceptance = acceptance
        self._cumulative = acceptance.cumulative()
        self.verifications = 0  # decode steps that ran drafts, over every sequence
        self.kept = 0  # tokens those steps kept (before a reply's end cut them)

    def emitted(self, seq: Sequence, verified: int) -> int:
        kept = draw(self._cumulative, uniform(self.seed, seq.request.id, seq.num_generated))
        kept = kept if kept < verified else verified
        self.verifications += 1
        self.kept += kept
        return kept

    def stats(self) -> dict[str, object]:
        mean = self.kept / self.verifications if self.verifications else None
        return {"method": self.method, "num_speculative_tokens": self.k,
                "verifications": self.verifications, "accepted_tokens": self.kept - self.verifications,
                "mean_acceptance_length": mean}

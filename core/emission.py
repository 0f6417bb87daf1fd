"""What a step emits: the one place that says how many tokens a sequence that samples
gains in one engine step.

Every engine batchlab models today samples ONE token per sequence per step: a decode
runs its last token through the model and keeps the one token sampled after it. With
speculative decoding (draft models, EAGLE heads, MTP layers) a decoding sequence runs
its last token plus k draft tokens (width k + 1: what the step is priced by and reserves
KV for) and keeps 1 to k + 1 of them (the accepted drafts and one more). That is a new
Emission, not a change to the scheduler, the step features, the KV accounting or the
metrics, which all read it from here:

    width                      tokens a decoding sequence runs per step (1: no drafts)
    emitted(seq, verified)     tokens it keeps of the `verified` positions it sampled at,
                               1 <= emitted <= verified (verified is 1 without drafts)

The scheduler gives each decoding sequence `width` tokens, the features price them as
decode tokens, complete() keeps `emitted` of them (the rejected drafts' KV is dropped)
and the metrics stamp every kept token with the step's end (several tokens arriving
together are zero gaps, as a client sees them). The simulator's decode group and its
fast-forward assume width 1 (one token per member per step): a wider emission is
simulated step by step."""
from __future__ import annotations

from mypy_extensions import mypyc_attr

from batchlab.core.request import Sequence


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py): other emissions extend it
class Emission:
    """One token per sampling sequence per step: no drafts, nothing to reject."""

    def __init__(self, width: int = 1) -> None:
        if width < 1:
            raise ValueError(f"an emission runs at least one token per decode step, got width={width}")
        self.width = width

    def emitted(self, seq: Sequence, verified: int) -> int:
        """Tokens `seq` keeps from a step that sampled at `verified` positions (its last
        token and verified - 1 drafts): all a one-token step sampled."""
        return 1

    def stats(self) -> dict[str, object]:
        """What a run's meta records of its emission (core/run_meta.py Speculation):
        nothing for one token a step."""
        return {}


ONE_TOKEN = Emission()
